// The task view: one task's record, its run's progress, its result or its failure with
// the traceback, and its events, with a Cancel button while the task can be cancelled. A
// #task=<id> link opens it; each feed event for the task reloads it, so what it shows is
// always one consistent read of the server, never a local guess. A progress report alone
// is drawn from its event (the bar is all it changes), the view reloaded less often.

import { getJSON } from './http.js';
import { drawProgress, foldReports, foldedMark } from './progress.js';
import {
  cancelRequestedBadge, clockTime, el, focusBackTo, hooks, isoTime, priorityBadge,
  progressText, timeLimitBadge, typeBadge,
} from './render.js';
import { shown } from './shown.js';

// States a cancel ends at once (a workflow's waiting step too: its end counts for its
// stage); a running task can be asked once.
const CANCELLABLE = new Set(['pending', 'delayed', 'dead', 'waiting']);

// A task's priority when it gives none (limits.PRIORITY's default).
const DEFAULT_PRIORITY = 5;

// Feed events for the open task within this long are answered by one reload.
const RELOAD_MS = 100;
// A run reports up to four times a second, each report changing the bar alone, which
// the event itself gives: the record and events are read again at most this often.
const PROGRESS_RELOAD_MS = 1000;

const $ = (id) => document.getElementById(id);
const q = encodeURIComponent;

const open = {
  id: '',
  queue: '',
  loadId: 0, // a newer load (or another task) supersedes an older one
  busy: false,
  again: false, // an event came while loading: load once more after
  timer: 0,
  due: 0, // when the timer fires (performance.now())
  run: null, // the token of the run the view shows running; null when it is not running
  cancelling: false, // its cancel is sent and not yet answered
  opener: null, // what had the focus when the view opened: it gets it back at the close
};

export function wantedId() {
  return new URLSearchParams(window.location.hash.slice(1)).get('task') || '';
}

export function openTaskFromHash(queue) {
  const id = wantedId();
  if (!id) {
    hide();
    return;
  }
  if (!open.id) open.opener = document.activeElement;
  Object.assign(open, { id, queue, busy: false, again: false, run: null, cancelling: false });
  open.loadId += 1;
  $('task-cancel-result').hidden = true;
  $('task-id').textContent = shown(id);
  $('task-id').title = id;
  $('task-view').dataset.taskId = id;
  $('task-view').hidden = false;
  $('task-view').focus();
  showMessage('Loading…');
  load();
}

// Closing drops the hash without a new history entry, so Back does not reopen it.
export function closeTask() {
  if (window.location.hash) {
    window.history.replaceState(null, '', window.location.pathname + window.location.search);
  }
  hide();
}

function hide() {
  const wasOpen = Boolean(open.id);
  open.id = '';
  open.loadId += 1;
  clearTimeout(open.timer);
  open.timer = 0;
  $('task-view').hidden = true;
  if (wasOpen) focusBackTo(open.opener);
}

// A feed event for `task` (null: events may have been missed) reloads the open view.
export function taskChanged(task) {
  if (open.id && (task === null || task === open.id)) reloadIn(RELOAD_MS);
}

// A `progress` event: the bar of the run shown moves now, the rest follows later.
export function taskProgress(data) {
  if (!open.id || data.task !== open.id) return;
  if (data.token === open.run) drawBar(Number(data.progress), data.message || '', 'running');
  reloadIn(PROGRESS_RELOAD_MS);
}

// Loads within `ms`, or sooner if a load is due sooner already.
function reloadIn(ms) {
  const at = performance.now() + ms;
  if (open.timer && open.due <= at) return;
  clearTimeout(open.timer);
  open.due = at;
  open.timer = setTimeout(() => {
    open.timer = 0;
    load();
  }, ms);
}

async function load() {
  if (open.busy) {
    open.again = true;
    return;
  }
  const loadId = open.loadId;
  open.busy = true;
  try {
    const body = await getJSON(`api/tasks/${q(open.id)}?queue=${q(open.queue)}`);
    if (loadId === open.loadId) draw(body);
  } catch (err) {
    if (loadId === open.loadId) showMessage(err.message);
  } finally {
    if (loadId === open.loadId) {
      open.busy = false;
      if (open.again) {
        open.again = false;
        load();
      }
    }
  }
}

function showMessage(text) {
  $('task-message').textContent = shown(text);
  $('task-message').hidden = false;
  open.run = null;
  for (const part of ['task-state', 'task-cancel-requested', 'task-cancel', 'task-flow',
    'task-record',
    'task-progress-part', 'task-result-part', 'task-error-part', 'task-events-part']) {
    $(part).hidden = true;
  }
}

function draw(t) {
  $('task-message').hidden = true;
  const state = $('task-state');
  state.textContent = t.state;
  state.className = `state state-${t.state}`;
  state.hidden = false;
  $('task-view').dataset.state = t.state;
  const requested = t.state === 'running' && t.cancel_requested_at > 0;
  $('task-cancel-requested').replaceChildren(...(requested ? [cancelRequestedBadge()] : []));
  $('task-cancel-requested').hidden = !requested;
  const button = $('task-cancel');
  button.hidden = !(CANCELLABLE.has(t.state) || (t.state === 'running' && !requested));
  button.disabled = open.cancelling;
  open.run = t.state === 'running' ? t.fencing_token : null;
  drawBar(t.progress == null ? null : Math.round(t.progress * 1000), t.progress_message,
    t.state);
  drawFlow(t.task_id, t.extra || {});
  drawRecord(t);
  drawResult(t);
  drawError(t.error);
  drawEvents(t);
}

// A workflow's step (its record names its `flow`) links to its workflow's view; one
// skipped names the step that failed the workflow.
function drawFlow(taskId, { flow, upstream }) {
  const node = $('task-flow');
  node.hidden = !flow;
  if (!flow) return;
  // The step's place is in its id: <flow>.<stage>.<index>.
  node.replaceChildren(`Step ${taskId.slice(flow.length + 1)} of workflow `,
    el('a', { class: 'task-link', href: `#flow=${q(flow)}`, 'data-testid': 'task-flow-link' },
      el('code', {}, flow)),
    upstream ? ` · skipped: ${upstream} did not complete` : '');
}

function drawRecord(t) {
  const rows = [
    ['Name', t.name],
    // Shown for every task, the default too: why a task waits is the first thing asked.
    ['Priority', t.priority === DEFAULT_PRIORITY ? `${t.priority} (default)` : String(t.priority)],
    ['Attempts', `${t.attempts} (retries ${t.retries} of ${t.max_retries})`],
    ['Token', t.fencing_token ? String(t.fencing_token) : ''],
    ['Worker', t.worker],
    ['Idempotency key', t.idempotency_key],
    ['Created', iso(t.created_at)],
    ['Run at', iso(t.run_at)],
    ['Leased', iso(t.leased_at)],
    ['Heartbeat', iso(t.heartbeat_at)],
    ['Completed', iso(t.completed_at)],
    ['Dead', iso(t.dead_at)],
    ['Cancel requested', iso(t.cancel_requested_at)],
    ['Cancelled', iso(t.cancelled_at)],
    ['Payload', t.payload && t.payload !== '{}' ? t.payload : ''],
  ].filter(([, value]) => value);
  $('task-record').replaceChildren(...rows.flatMap(([label, value]) => [
    el('dt', {}, label), el('dd', { title: value }, value)]));
  $('task-record').hidden = false;
}

// The bar of the task's latest run, if it said how far it got: live while it runs,
// where it stopped once it has ended or waits to run again.
function drawBar(permille, message, state) {
  $('task-progress-part').hidden = permille == null;
  $('task-progress-title').textContent = state === 'running' ? 'Progress'
    : 'Progress of the last run';
  drawProgress($('task-progress'), permille, message);
}

function drawResult(t) {
  const kept = t.result_bytes != null;
  $('task-result-part').hidden = !kept && t.state !== 'completed';
  $('task-result-meta').textContent = kept ? `${t.result_bytes.toLocaleString()} bytes` : '';
  $('task-result').hidden = !kept;
  // textContent only: a result is whatever a handler returned.
  $('task-result').textContent = !kept ? ''
    : shown(t.result_error ? `${t.result}\n\n(${t.result_error})` : t.result_json);
  $('task-no-result').hidden = kept;
}

function drawError(error) {
  $('task-error-part').hidden = !error;
  if (!error) return;
  $('task-error-kind').replaceChildren(...[timeLimitBadge(error.type)].filter(Boolean));
  // An exception with no message is named by its type alone.
  $('task-error').textContent = shown([error.type, error.message].filter(Boolean).join(': '));
  $('task-traceback').textContent = shown(error.traceback ?? '');
  $('task-traceback').hidden = !error.traceback;
}

function drawEvents(t) {
  const scan = t.events_scan;
  let note = `${t.events.length} in the log`;
  if (!scan.complete) {
    note += ` · the scan stopped after ${scan.read.toLocaleString()} entries: older events may remain`;
  } else if (scan.end === 'log_start' && t.events.length) {
    note += ' · earlier ones were trimmed';
  }
  $('task-events-meta').textContent = note;
  // A long run reports many times: its reports in a row are one item, as in the event list.
  $('task-events').replaceChildren(...foldReports(t.events).map(eventItem));
  $('task-events-part').hidden = false;
}

function eventItem(e) {
  const detail = [
    e.from ? `from ${e.from}` : '',
    e.upstream ? `skipped: ${e.upstream} did not complete` : '',
    e.token != null ? `token ${e.token}` : '',
    e.worker ? `by ${e.worker}` : '',
    e.error || '',
    e.result != null ? `result ${e.result}` : '',
    e.result_bytes != null ? `result of ${e.result_bytes} bytes` : '',
    progressText(e),
  ].filter(Boolean).join(' · ');
  return el('li', { class: 'event', 'data-testid': 'task-event', 'data-type': e.type,
    'data-seq': e.seq, 'data-folded': e.reports },
  el('time', { datetime: iso(e.ts), title: iso(e.ts) }, clockTime(e.ts)),
  typeBadge(e.type),
  el('code', { class: 'task' }, `#${e.seq}`),
  el('span', { class: `state state-${e.state}` }, e.state),
  el('span', { class: `detail${e.error ? ' error' : ''}`, title: detail },
    timeLimitBadge(e.error_type), priorityBadge(e.priority),
    e.type === 'progress' ? foldedMark(e.reports) : null, detail));
}

function iso(ms) {
  return (ms && isoTime(ms)) || '';
}

// The answer is shown in the view; the view itself changes with the task's events.
async function cancelOpen() {
  const { id } = open;
  const loadId = open.loadId;
  open.cancelling = true;
  $('task-cancel').disabled = true;
  const said = await hooks.cancel(id);
  if (loadId !== open.loadId) return;
  open.cancelling = false;
  $('task-cancel').disabled = false;
  const result = $('task-cancel-result');
  result.textContent = shown(said.text);
  result.dataset.ok = String(said.ok);
  result.hidden = false;
}

export function initTaskView() {
  $('task-close').addEventListener('click', closeTask);
  $('task-cancel').addEventListener('click', cancelOpen);
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && open.id) closeTask();
  });
}
