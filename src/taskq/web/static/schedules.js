// The schedules panel: a queue's periodic schedules as Redis holds them, with their last
// and next ticks. It reloads from the server, never guessing a tick locally:
//   - when a tick makes a task: its `enqueued` event (id sched:<schedule>:<tick>) comes
//     from the same atomic step that advanced the schedule's last tick;
//   - shortly after the next tick falls due, for what emits no event (a tick dropped
//     under the skip policy, a schedule seen for the first time, a replaced definition);
//   - at each resync of the page, and after a gap in the feed.
// A schedule whose next tick is long overdue (no worker declares it any more) has a
// Forget button, which takes its record out of Redis (POST .../forget).

import { postJSON } from './http.js';
import { Reloader } from './reloader.js';
import { el, replaceKeepingFocus, tick, toast } from './render.js';

// How long after a tick is due to look again: a worker fires it within a loop's turn.
const SETTLE_MS = 1500;
// Farther ticks are left to the page's periodic resync (a timer of days would overflow).
const HORIZON_MS = 60000;
// How overdue a next tick must be for the server to forget its schedule unforced
// (taskq.schedule_view.FORGET_AFTER_MS).
const FORGET_AFTER_MS = 60000;

const $ = (id) => document.getElementById(id);
const q = encodeURIComponent;

const panel = new Reloader((queue) => `api/schedules?queue=${q(queue)}`, (body) => draw(body),
  (message) => { $('schedules-meta').textContent = message; });
let due = 0; // the timer for the next tick

export function loadSchedules(queue) {
  if (panel.switchTo(queue)) {
    clearTimeout(due);
    due = 0;
    $('schedules-body').replaceChildren();
    $('schedules-meta').textContent = '';
  }
  panel.load();
}

// A feed event: a schedule's tick made a task.
export function scheduleEvent(data) {
  if (data.type !== 'enqueued' || !String(data.task).startsWith('sched:')) return;
  reloadSoon();
}

export function reloadSoon() {
  panel.soonAgain();
}

function draw(body) {
  const rows = body.schedules;
  replaceKeepingFocus($('schedules-body'), rows.length ? rows.map((s) => row(s, body.now_ms))
    : [el('tr', { class: 'empty-row' }, el('td', { colspan: 7 },
      'No worker has fired a schedule on this queue.'))]);
  $('schedules-meta').textContent = rows.length ? `${rows.length} on this queue` : '';
  armTimer(rows, body.now_ms);
  tick();
}

function armTimer(rows, nowMs) {
  clearTimeout(due);
  const ahead = rows.map((s) => s.next_tick_ms).filter((t) => t != null && t > nowMs);
  if (!ahead.length) return;
  const wait = Math.min(...ahead) - nowMs + SETTLE_MS;
  if (wait <= HORIZON_MS) due = setTimeout(reloadSoon, wait);
}

const DEFINITION_NOTE = {
  older: ['older definition', 'Workers fire a newer definition of this schedule than the '
    + 'one stored: it was changed by a worker that keeps no definitions.'],
  missing: ['no definition', 'Only a worker that keeps no definitions has fired this '
    + 'schedule: its task and timing are unknown here.'],
};

async function forget(name, button) {
  const ask = `Forget schedule ${name}? Its next tick is over a minute overdue, so no `
    + 'running worker seems to declare it. The tasks its ticks made stay.';
  if (!window.confirm(ask)) return;
  button.disabled = true;
  try {
    const { ok, status, body } = await postJSON(
      `api/schedules/${q(name)}/forget?queue=${q(panel.queue)}`);
    toast(ok ? body.message : `Forget refused: ${body.error || status}`, ok, 'forget-result');
  } catch (err) {
    toast(`Forget failed: ${err.message}`, false, 'forget-result');
  }
  reloadSoon();
}

function forgetCell(s, nowMs) {
  if (s.next_tick_ms == null || s.next_tick_ms > nowMs - FORGET_AFTER_MS) {
    return el('td', {});
  }
  const button = el('button', { type: 'button', class: 'row-action cancel',
    'data-testid': 'forget-schedule', title: 'Take this schedule out of Redis: no running '
      + 'worker has fired it for over a minute past its tick' }, 'Forget');
  button.addEventListener('click', () => forget(s.name, button));
  return el('td', {}, button);
}

function row(s, nowMs) {
  const note = DEFINITION_NOTE[s.definition];
  const policy = s.policy ? [
    s.policy === 'skip' && s.grace_ms != null ? `grace ${s.grace_ms / 1000}s` : '',
    s.max_retries != null ? `max retries ${s.max_retries}` : '',
  ].filter(Boolean).join(', ') : '';
  return el('tr', { 'data-testid': 'schedule-row', 'data-schedule': s.name,
    'data-definition': s.definition },
  el('td', { class: 'schedule-name', title: `${s.name} · version ${s.version}` },
    el('code', {}, s.name),
    note ? el('span', { class: 'badge definition-note', 'data-testid': 'definition-note',
      title: note[1] }, note[0]) : null),
  el('td', { class: 'name', title: s.task }, s.task || '—'),
  el('td', { class: 'when mono', title: s.when }, s.when || '—'),
  el('td', { class: 'policy', title: policy }, s.policy || '—'),
  el('td', { class: 'since', 'data-testid': 'last-tick', 'data-since': s.last_tick_ms,
    title: new Date(s.last_tick_ms).toLocaleString() }),
  s.next_tick_ms == null ? el('td', { class: 'none' }, '—') : el('td', {}, el('div', {
    class: 'countdown', 'data-testid': 'next-tick', 'data-kind': 'tick',
    'data-deadline': s.next_tick_ms, 'data-at': new Date(s.next_tick_ms).toLocaleString(),
  }, el('span', { class: 'left' }))),
  forgetCell(s, nowMs));
}
