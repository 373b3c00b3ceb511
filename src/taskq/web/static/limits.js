// The concurrency limits panel: each limited task name's slots as Redis holds them (the
// limit, the runs holding a slot, the tasks parked for one). It reloads from the
// server, never counting locally: a task's name is not on every event, and a cancel
// of a parked task looks like any cancel of a pending one. It reloads
//   - on `parked` and `unparked` events, and on a lease or a lease's end of a name the
//     panel shows (each takes or frees a slot);
//   - at each resync of the page, and after a gap in the feed.

import { Reloader } from './reloader.js';
import { el } from './render.js';

// The events that take or free a slot, besides parked and unparked.
const SLOT_EVENTS = new Set(['leased', 'completed', 'failed', 'released', 'reaped',
  'cancelled']);

const $ = (id) => document.getElementById(id);
const q = encodeURIComponent;

const panel = new Reloader((queue) => `api/limits?queue=${q(queue)}`,
  (body) => draw(body.limits), (message) => { $('limits-meta').textContent = message; });
let names = new Set(); // the limited names shown

export function loadLimits(queue) {
  if (panel.switchTo(queue)) {
    names = new Set();
    $('limits-body').replaceChildren();
    $('limits-meta').textContent = '';
  }
  panel.load();
}

// A feed event; `name` is the task's name where the page knows it.
export function limitsEvent(data, name) {
  if (data.type === 'parked' || data.type === 'unparked'
      || (SLOT_EVENTS.has(data.type) && names.has(name))) {
    reloadLimitsSoon();
  }
}

export function reloadLimitsSoon() {
  panel.soonAgain();
}

function draw(rows) {
  names = new Set(rows.map((r) => r.name));
  $('limits-body').replaceChildren(...(rows.length ? rows.map(row)
    : [el('tr', { class: 'empty-row' }, el('td', { colspan: 4 },
      'No worker has leased a task with max_concurrency on this queue.'))]));
  const waiting = rows.reduce((n, r) => n + r.parked, 0);
  $('limits-meta').textContent = rows.length
    ? `${names.size} limited · ${waiting} waiting for a slot` : '';
}

function row(r) {
  const full = r.most > 0 && r.running >= r.most;
  const fill = el('span', { class: 'fill' });
  // Through the CSSOM: the page's CSP allows no style attribute.
  fill.style.width = `${r.most > 0 ? Math.round(Math.min(1, r.running / r.most) * 100) : 0}%`;
  return el('tr', { 'data-testid': 'limit-row', 'data-name': r.name, 'data-key': r.key },
    el('td', { class: 'name', title: r.key ? `${r.name}, for ${r.key}` : r.name },
      el('code', {}, r.name),
      r.key ? el('span', { class: 'badge limit-key', 'data-testid': 'limit-key' }, r.key)
        : null),
    el('td', { class: 'num', 'data-testid': 'limit-running',
      title: r.most ? `${r.running} of ${r.most} slots held` : 'no worker applies a limit now' },
    r.most ? `${r.running} / ${r.most}` : `${r.running} / ?`),
    el('td', {}, el('div', { class: `slots${full ? ' full' : ''}`, 'data-testid': 'limit-bar' },
      fill)),
    el('td', { class: 'num', 'data-testid': 'limit-parked',
      title: 'tasks waiting, still pending, for a slot' }, String(r.parked)));
}
