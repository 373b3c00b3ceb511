// Drawing the dashboard: counts, the three tables, the event list, countdowns, notices.

import { hidingHeartbeats } from './heartbeats.js';
import { MAX_ROWS, epochOf, view } from './model.js';
import {
  drawProgress, foldProgress, foldReports, foldedMark, percent,
} from './progress.js';
import { shown } from './shown.js';

// Events listed: this many heartbeats, and as many of the other events, so heartbeats
// (hidden or not) never push the others off the list.
const MAX_EVENTS = 200;
const MAX_KEPT = 1000;
// The error type a worker stores for a run stopped at its time limit.
export const TIME_LIMIT_ERROR = 'taskq.errors.TimeLimitExceeded';
// A schedule's tick still not fired this long after it fell due has no worker firing
// it: a worker asks at least every few seconds.
const LATE_TICK_MS = 10000;

// What rows and the task view need from the rest of the app: a task's name, the retry
// and cancel actions, and the DLQ's bulk buttons to draw with its rows.
export const hooks = {
  nameOf: () => '', retry: () => {}, cancel: async () => ({}), drawBulk: () => {},
};

const $ = (id) => document.getElementById(id);

let frame = 0;

// requestAnimationFrame batches a burst of events into one draw; the timeout keeps a
// hidden tab (where frames do not run) current.
export function schedule() {
  if (frame) return;
  const run = () => { frame = 0; render(); };
  const raf = requestAnimationFrame(() => { clearTimeout(timer); run(); });
  const timer = setTimeout(() => { cancelAnimationFrame(raf); run(); }, 200);
  frame = raf;
}

export function render() {
  const { dirty } = view;
  if (dirty.has('counts')) renderCounts();
  if (dirty.has('leased')) renderLeased();
  else view.moved.forEach(moveProgress);
  view.moved.clear();
  if (dirty.has('delayed')) renderDelayed();
  if (dirty.has('dead')) renderDead();
  dirty.clear();
  renderEvents();
  renderFooter();
  tick();
}

function renderCounts() {
  for (const [kind, n] of Object.entries(view.counts)) {
    $(`count-${kind}`).textContent = n.toLocaleString();
    const bar = document.querySelector(`#mix [data-kind="${kind}"]`);
    bar.style.flexGrow = String(n);
    bar.title = `${kind}: ${n}`;
    bar.hidden = n === 0;
  }
  document.title = `taskq · ${view.queue} · ${view.counts.ready} ready`;
}

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value == null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else if (key === 'title') node.title = shown(value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  node.append(...children.filter((c) => c != null)
    .map((c) => (typeof c === 'string' ? shown(c) : c)));
  return node;
}

// Every task id on the page links to its task view (task.js opens it from the hash).
export const taskLink = (id) => el('a', {
  class: 'task-link', href: `#task=${encodeURIComponent(id)}`, 'data-testid': 'task-link',
}, id);
const idCell = (id) => el('td', { class: 'id', title: id }, el('code', {}, taskLink(id)));
const nameCell = (row, badge = null) => el('td', { class: 'name' },
  row.name || hooks.nameOf(row.id) || '—', badge);
// Marks a delayed task that waits for its rate limit's slot, not a retry or a delay.
const rateLimitBadge = (throttled) => (throttled
  ? el('span', { class: 'badge rate-limit', 'data-testid': 'rate-limit-badge',
    title: 'waits for its rate limit\'s next slot' }, 'rate limit')
  : null);
// Marks a failure of a run stopped at its time limit (null for any other error type).
export const timeLimitBadge = (type) => (type === TIME_LIMIT_ERROR
  ? el('span', { class: 'badge time-limit', 'data-testid': 'time-limit-badge',
    title: 'the run passed its time limit' }, 'time limit')
  : null);
// A failure's summary, its error type (module.Name) before it where `withType`.
const errorCell = (error, type, withType = false) => (error || type
  ? el('td', { class: 'error', title: [type, error].filter(Boolean).join('\n') },
    el('span', {}, timeLimitBadge(type),
      withType && type ? el('code', { class: 'error-type', 'data-testid': 'error-type' }, type)
        : null,
      error))
  : el('td', { class: 'none' }, '—'));
// Marks an event that names a priority: an `enqueued` event carries one only when it is
// not the default, so the mark singles out the tasks that jump or wait behind the rest.
export const priorityBadge = (priority) => (priority == null ? null
  : el('span', { class: 'badge priority', 'data-testid': 'priority-badge',
    title: `priority ${priority} of 0 (lowest) to 9 (highest); the default is 5` },
  `priority ${priority}`));
// An event type's badge. `cancel_requested` is shown as what it starts, which fits the
// event list's column; its title keeps the name the feed uses.
const TYPE_LABELS = { cancel_requested: 'cancelling' };
export const typeBadge = (type) => el('span', { class: `badge type-${type}`, title: type },
  TYPE_LABELS[type] || type);
// Marks a running task whose cancel was requested: it runs on until its worker is told.
export const cancelRequestedBadge = () => el('span', {
  class: 'badge cancel-requested', 'data-testid': 'cancel-requested-badge',
  title: 'cancel requested: the worker stops it at its next heartbeat',
}, 'cancel requested');
const emptyRow = (span, text) => el('tr', { class: 'empty-row' }, el('td', { colspan: span }, text));

function meta(id, shown, total) {
  $(id).textContent = total > shown ? `showing ${shown} of ${total.toLocaleString()}` : '';
}

// The first rows of a table by `order`; rows far past the visible ones are forgotten so a
// large DLQ cannot grow without bound (the counts stay exact, the next resync refills).
function top(map, order) {
  const all = [...map.values()].sort(order);
  for (const row of all.slice(MAX_KEPT)) map.delete(row.id);
  return all.slice(0, MAX_ROWS);
}

function fill(body, rows, draw, span, empty) {
  replaceKeepingFocus($(body), rows.length ? rows.map(draw) : [emptyRow(span, empty)]);
}

// A pointer held down on a link or a button, then a redraw, then the release: the node
// pressed is gone, and the browser sends no click. So a container holding a press is
// redrawn at the release, after the click it makes, with the nodes last asked for.
let pressed = null;
const held = new Map();

function release() {
  pressed = null;
  if (!held.size) return;
  // The click follows the release in the same task: this runs after it.
  setTimeout(() => {
    const due = [...held];
    held.clear();
    for (const [container, nodes] of due) replaceKeepingFocus(container, nodes);
    tick();
  });
}

// The primary button alone makes a click; a context menu may take the release of another.
document.addEventListener('pointerdown', (e) => {
  if (e.button === 0) pressed = e.target;
}, true);
for (const type of ['pointerup', 'pointercancel', 'dragstart', 'contextmenu']) {
  document.addEventListener(type, release, true);
}
window.addEventListener('blur', release);

// Replaces `container`'s children with `nodes`; if the keyboard focus was on one of the
// old ones (a task link, a Retry button), it moves to its like among the new ones: the
// same tag, test id and link, in the row of the same task, schedule or workflow. A table
// redrawn every few seconds would else send a keyboard user back to the top of the page
// each time.
export function replaceKeepingFocus(container, nodes) {
  if (pressed && container.contains(pressed)) {
    held.set(container, nodes);
    return;
  }
  held.delete(container);
  const active = document.activeElement;
  const like = active && active !== document.body && container.contains(active)
    ? sameAs(active) : null;
  container.replaceChildren(...nodes);
  if (!like) return;
  const again = [...container.querySelectorAll(active.tagName)].find(like);
  if (again) again.focus();
}

// The task, schedule or workflow a node's row shows.
function rowOf(n) {
  const d = n.closest('[data-task-id], [data-schedule], [data-flow-id]')?.dataset;
  return d ? `${d.taskId}\n${d.schedule}\n${d.flowId}` : null;
}

function sameAs(node) {
  const row = rowOf(node);
  return (n) => rowOf(n) === row && n.dataset.testid === node.dataset.testid
    && n.getAttribute('href') === node.getAttribute('href');
}

// The element that had the focus when a view opened, to give it back when it closes.
export function focusBackTo(opener) {
  if (opener && opener.isConnected) opener.focus();
}

function progressCell(l) {
  const cell = el('td', { class: 'progress-cell', 'data-testid': 'progress-cell' });
  drawProgress(cell, l.permille, l.progressMessage);
  return cell;
}

// A report moves its row's bar alone: the row stays, and with it a link being clicked.
// Rows held back by a press (above) are moved too, so the release shows no older bar.
function moveProgress(id) {
  const l = view.leased.get(id);
  const body = $('leased-body');
  const row = [...body.children, ...(held.get(body) ?? [])]
    .find((r) => r.dataset.taskId === id);
  const cell = row?.querySelector(':scope > .progress-cell');
  if (l && cell) drawProgress(cell, l.permille, l.progressMessage);
}

function renderLeased() {
  const rows = top(view.leased, (a, b) => a.expires - b.expires);
  fill('leased-body', rows, (l) => el('tr', { 'data-testid': 'leased-row', 'data-task-id': l.id,
    'data-cancel-requested': String(Boolean(l.cancelRequested)) },
    idCell(l.id), nameCell(l, l.cancelRequested ? cancelRequestedBadge() : null),
    el('td', { class: 'worker', title: l.worker }, l.worker || '—'),
    el('td', { class: 'num' }, String(l.attempt ?? '—')),
    el('td', { class: 'num mono', 'data-testid': 'lease-token', title: String(l.token ?? '') },
      String(l.token ?? '—')),
    progressCell(l),
    el('td', {}, el('div', {
      class: 'countdown', 'data-testid': 'lease-countdown', 'data-kind': 'lease',
      'data-deadline': l.expires, 'data-total': l.total || '',
    }, el('span', { class: 'left' }), el('span', { class: 'track' }, el('span', { class: 'fill' }))))),
  7, 'No task is leased right now.');
  meta('leased-meta', rows.length, Math.max(view.counts.leased, rows.length));
}

function renderDelayed() {
  const rows = top(view.delayed, (a, b) => a.runAt - b.runAt);
  fill('delayed-body', rows, (d) => el('tr', { 'data-testid': 'delayed-row', 'data-task-id': d.id },
    idCell(d.id), nameCell(d, rateLimitBadge(d.throttled)),
    el('td', { class: 'num' }, String(d.retries)),
    errorCell(d.error, d.errorType),
    el('td', {}, el('div', {
      class: 'countdown', 'data-testid': 'runat-countdown', 'data-kind': 'runat',
      'data-deadline': d.runAt, title: new Date(d.runAt).toLocaleString(),
    }, el('span', { class: 'left' })))),
  5, 'Nothing is scheduled.');
  meta('delayed-meta', rows.length, Math.max(view.counts.delayed, rows.length));
}

function renderDead() {
  const rows = top(view.dead, (a, b) => b.deadAt - a.deadAt);
  fill('dlq-body', rows, (d) => {
    const busy = view.busy.get(d.id);
    const sent = view.sent.get(d.id);
    const button = (action, hook, label, doing, done) => el('button', {
      type: 'button', class: `row-action ${action}`, 'data-testid': `${action}-button`,
      disabled: Boolean(busy || sent), onclick: () => hooks[hook](d.id),
    }, sent === action ? done : busy === action ? doing : label);
    return el('tr', { 'data-testid': 'dlq-row', 'data-task-id': d.id },
      idCell(d.id), nameCell(d),
      el('td', { class: 'num' }, String(d.retries)),
      el('td', { class: 'since', 'data-since': d.deadAt, title: new Date(d.deadAt).toLocaleString() }),
      errorCell(d.error, d.errorType, true),
      el('td', { class: 'action' },
        button('retry', 'retry', 'Retry', 'Retrying…', 'Sent'),
        button('cancel', 'cancelDead', 'Cancel', 'Cancelling…', 'Cancelled')));
  }, 6, 'The dead letter queue is empty.');
  meta('dlq-meta', rows.length, Math.max(view.counts.dead, rows.length));
  hooks.drawBulk();
}

const isHeartbeat = (type) => type === 'heartbeat';

// The newest MAX_EVENTS rows of each kind, newest first.
function newest(rows) {
  const kept = [];
  const seen = { true: 0, false: 0 };
  for (let i = rows.length - 1; i >= 0; i -= 1) {
    const kind = isHeartbeat(rows[i].type);
    seen[kind] += 1;
    if (seen[kind] <= MAX_EVENTS) kept.push(rows[i]);
  }
  return kept;
}

// Drops the oldest rows of a kind past MAX_EVENTS.
function trimEvents(list) {
  const count = { true: 0, false: 0 };
  for (const row of list.children) count[isHeartbeat(row.dataset.type)] += 1;
  let row = list.lastElementChild;
  while (row && (count.true > MAX_EVENTS || count.false > MAX_EVENTS)) {
    const older = row;
    row = row.previousElementSibling;
    const kind = isHeartbeat(older.dataset.type);
    if (count[kind] > MAX_EVENTS) {
      older.remove();
      count[kind] -= 1;
    }
  }
}

export function renderEvents() {
  const list = $('events');
  if (view.newRows.length) {
    for (const d of newest(foldReports(view.newRows.splice(0))).reverse()) {
      let row;
      try {
        row = eventRow(d);
      } catch (err) {
        // One event the page cannot draw must not cost it the others of the batch.
        console.error('taskq: an event could not be drawn', d, err);
        continue;
      }
      if (d.type === 'progress') foldProgress(list, row);
      list.prepend(row);
    }
    trimEvents(list);
  }
  const shown = hidingHeartbeats() ? list.querySelector(':scope > :not([data-type=heartbeat])')
    : list.firstElementChild;
  $('events-empty').hidden = Boolean(shown);
  const now = performance.now();
  while (view.seen.length && now - view.seen[0] > 10000) view.seen.shift();
  const rate = view.seen.length / 10;
  $('events-meta').textContent = rate ? `${rate.toFixed(rate < 10 ? 1 : 0)}/s` : '';
}

function eventRow(d) {
  if (d.gap) {
    return el('li', { class: 'gap-row', 'data-testid': 'gap-row' },
      el('span', {}, `missed events · ${d.gap.reason}`));
  }
  const attempt = d.type === 'leased' && d.retries ? ` · attempt ${d.retries + 1}` : '';
  const detail = d.error || flowText(d) || (d.from ? `from ${d.from}` : '')
    || (d.worker ? `by ${d.worker}${attempt}` : '') || progressText(d) || d.name || '';
  const reported = d.type === 'progress';
  return el('li', {
    class: 'event', 'data-testid': 'event-row', 'data-seq': d.seq, 'data-epoch': epochOf(d),
    'data-type': d.type, 'data-task-id': d.task, 'data-token': reported ? d.token : null,
    'data-folded': d.reports,
  },
  el('time', { datetime: isoTime(d.ts) }, clockTime(d.ts)),
  typeBadge(d.type),
  el('code', { class: 'task', title: d.task }, taskLink(d.task)),
  el('span', { class: `state state-${d.state}` }, d.state),
  el('span', { class: `detail${d.error ? ' error' : ''}`, title: detail },
    timeLimitBadge(d.error_type), priorityBadge(d.priority),
    reported ? foldedMark(d.reports) : null, detail));
}

// What an event of a workflow's step says of it ('' for any other event): a step
// skipped names the step that failed the workflow; one that waits or starts, its
// workflow.
function flowText(d) {
  if (d.upstream) return `skipped: ${d.upstream} did not complete`;
  if (d.type === 'triggered') return `its stage started · workflow ${d.flow}`;
  if (d.state === 'waiting') return `waits for its stage · workflow ${d.flow}`;
  return '';
}

// What a `progress` event says: how far, and what the run is doing ('' for another event).
export const progressText = (d) => (d.type === 'progress'
  ? [percent(Number(d.progress)), d.message].filter(Boolean).join(' · ') : '');

export function renderFooter() {
  const [epoch, seq] = view.lastId.split('.');
  $('position').textContent = view.lastId ? `feed at #${seq} · epoch ${epoch}` : 'feed at the start';
  const off = Math.round(view.offset);
  $('clock').textContent = `server clock ${off >= 0 ? '+' : '−'}${Math.abs(off)} ms`;
}

// A time as an ISO string for a `datetime` attribute; null (no attribute) for a value
// that names no time, as a log entry written by hand may carry.
export function isoTime(ms) {
  const t = new Date(ms);
  return ms != null && ms !== '' && Number.isFinite(t.getTime()) ? t.toISOString() : null;
}

export function clockTime(ms) {
  const t = new Date(ms);
  if (!isoTime(ms)) return '—';
  const two = (n) => String(n).padStart(2, '0');
  return `${two(t.getHours())}:${two(t.getMinutes())}:${two(t.getSeconds())}` +
    `.${String(t.getMilliseconds()).padStart(3, '0')}`;
}

export function duration(ms) {
  const s = ms / 1000;
  const two = (n) => String(Math.floor(n)).padStart(2, '0');
  if (s < 60) return `${s.toFixed(1)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${two(s % 60)}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${two((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${two((s % 86400) / 3600)}h`;
}

// Countdowns run on the server's clock: this browser's clock plus the measured offset.
export function tick() {
  const now = Date.now() + view.offset;
  for (const node of document.querySelectorAll('[data-deadline]')) {
    const left = Number(node.dataset.deadline) - now;
    const label = node.querySelector('.left');
    if (node.dataset.kind === 'lease') {
      label.textContent = left > 0 ? duration(left) : 'expired';
      // A lease seen first in a snapshot has no known length: its first reading stands in.
      if (!node.dataset.total) node.dataset.total = String(Math.max(left, 1));
      const fraction = Math.max(0, Math.min(1, left / Number(node.dataset.total)));
      node.querySelector('.fill').style.width = `${(fraction * 100).toFixed(1)}%`;
      node.dataset.urgency = left <= 0 ? 'expired' : fraction < 0.25 ? 'low' : 'ok';
    } else if (node.dataset.kind === 'tick') {
      label.textContent = left > 0 ? `in ${duration(left)}` : `due ${duration(-left)} ago`;
      const late = left <= -LATE_TICK_MS;
      node.dataset.urgency = late ? 'late' : 'ok';
      node.title = late ? `Due ${node.dataset.at} and not fired: no worker is running, `
        + 'or none declares this schedule any more.' : node.dataset.at;
    } else {
      label.textContent = left > 0 ? `in ${duration(left)}` : 'due now';
      node.dataset.urgency = left > 0 ? 'ok' : 'due';
    }
  }
  for (const node of document.querySelectorAll('[data-since]')) {
    const since = Number(node.dataset.since);
    node.textContent = since ? `${duration(Math.max(0, now - since))} ago` : '—';
  }
}

// Notices that end a feed stream until the retry they carry (a queue with no tasks yet,
// Redis unavailable) or for good (a name no queue can have), and how a badge says each;
// any other state is said by its name.
export const NOTICES = ['missing', 'unavailable', 'invalid'];
export const NOTICE_LABELS = {
  missing: 'no tasks yet', unavailable: 'Redis unavailable', invalid: 'no such queue name',
};

export function setConn(state, title = 'live event feed') {
  const node = $('conn');
  node.dataset.state = state;
  node.textContent = NOTICE_LABELS[state] || state;
  node.title = title;
}

export function showGap(gap) {
  const seq = /^\d+\.(\d+)\.\d+$/.exec(gap.requested || '');
  const asked = seq ? `after #${seq[1]}` : gap.requested ? `from ${gap.requested}` : 'from the start';
  const kept = gap.first_available > gap.head ? 'the log is empty'
    : `the log keeps #${gap.first_available}–#${gap.head}`;
  $('gap-text').replaceChildren(
    el('strong', {}, `missed events: ${gap.reason} — reloaded a fresh snapshot`),
    el('span', { class: 'notice-detail' }, ` · asked ${asked}; ${kept}`));
  $('gap-notice').hidden = false;
}

export function showError(text) {
  const node = $('error-notice');
  node.textContent = text;
  node.hidden = false;
}

export function hideError() {
  $('error-notice').hidden = true;
}

export function toast(text, ok, testid = 'retry-result') {
  const node = el('div', { class: `toast ${ok ? 'ok' : 'bad'}`, 'data-testid': testid,
    'data-ok': String(ok), role: 'status' }, text);
  $('toasts').append(node);
  setTimeout(() => node.classList.add('leaving'), 4000);
  setTimeout(() => node.remove(), 4400);
}
