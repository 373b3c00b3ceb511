// The workers panel: the queue's live workers as they registered themselves (GET
// /api/workers): id, host, pid, slots in use of their concurrency, the task names they
// run, the queues they serve, how long they have been up and their last beat. A worker
// refreshes its record at each beat and the record expires a lease after the last, so
// the panel reloads on a timer, not on events: a worker that vanished leaves it within
// a lease and one reload.

import { Reloader } from './reloader.js';
import { duration, el, replaceKeepingFocus } from './render.js';

const $ = (id) => document.getElementById(id);
const q = encodeURIComponent;

const panel = new Reloader((queue) => `api/workers?queue=${q(queue)}`, draw,
  (message) => { $('workers-meta').textContent = message; });

export function loadWorkers(queue) {
  if (panel.switchTo(queue)) {
    $('workers-body').replaceChildren();
    $('workers-meta').textContent = '';
  }
  panel.load();
}

export function reloadWorkers() {
  panel.load();
}

function draw(body) {
  // The registry lists them by when their records expire, which each beat changes:
  // ordered by start, rows keep their places from one reload to the next.
  const workers = [...body.workers].sort((a, b) => a.started_at - b.started_at
    || a.worker_id.localeCompare(b.worker_id));
  replaceKeepingFocus($('workers-body'), workers.length
    ? workers.map((w) => row(w, body.now_ms))
    : [el('tr', { class: 'empty-row' }, el('td', { colspan: 8 },
      'No live worker on this queue.'))]);
  const used = workers.reduce((n, w) => n + w.in_hand, 0);
  const slots = workers.reduce((n, w) => n + w.concurrency, 0);
  // A queue lists at most 1,000 (those whose records expire soonest); `total` counts all.
  const more = (body.total ?? workers.length) - workers.length;
  $('workers-meta').textContent = workers.length
    ? `${workers.length} live · ${used} of ${slots} slots in use`
      + (more > 0 ? ` · ${more.toLocaleString()} more not listed` : '') : '';
}

function row(w, now) {
  const fill = el('span', { class: 'fill' });
  // Through the CSSOM: the page's CSP allows no style attribute.
  fill.style.width = `${w.concurrency ? Math.round(Math.min(1, w.in_hand / w.concurrency) * 100) : 0}%`;
  const full = w.concurrency > 0 && w.in_hand >= w.concurrency;
  return el('tr', { 'data-testid': 'worker-row', 'data-worker-id': w.worker_id,
    'data-pid': w.pid },
  el('td', { class: 'id', title: `${w.worker_id}\ntaskq ${w.version}` },
    el('code', {}, w.worker_id)),
  el('td', { class: 'name', title: w.host, 'data-testid': 'worker-host' }, w.host),
  el('td', { class: 'num mono', 'data-testid': 'worker-pid' }, String(w.pid)),
  el('td', { title: `${w.in_hand} of ${w.concurrency} slots held at its last beat` },
    el('div', { class: 'worker-slots' },
      el('span', { class: 'mono', 'data-testid': 'worker-slots' },
        `${w.in_hand} / ${w.concurrency}`),
      el('span', { class: `slots${full ? ' full' : ''}` }, fill))),
  el('td', { class: 'name', title: w.tasks.join('\n'), 'data-testid': 'worker-tasks' },
    w.tasks.join(', ') || '—'),
  el('td', { class: 'name', title: w.queues.join('\n'), 'data-testid': 'worker-queues' },
    w.queues.join(', ')),
  el('td', { 'data-testid': 'worker-up', title: new Date(w.started_at).toLocaleString() },
    duration(Math.max(0, now - w.started_at))),
  el('td', { class: 'since', 'data-since': w.last_beat, 'data-testid': 'worker-beat' }));
}
