// The dashboard's picture of one queue: counts and task rows from a snapshot, kept
// current by applying the feed's events.

export const EVENT_TYPES = ['enqueued', 'leased', 'heartbeat', 'completed', 'failed',
  'released', 'reaped', 'promoted', 'throttled', 'rescheduled', 'parked', 'unparked',
  'revived', 'purged', 'cancel_requested', 'cancelled', 'progress', 'triggered'];
// Each event type moves a task out of one state (a `cancelled` event names it in `from`:
// pending, delayed, dead, running or waiting); the event's `state` is where it lands. The
// scripts emit exactly these transitions, so counts follow from the events alone. A
// workflow's step that waits for its stage (`waiting`) is in no count until `triggered`
// makes it pending.
const FROM = {
  enqueued: null, triggered: 'waiting', leased: 'pending', heartbeat: 'running', completed: 'running',
  failed: 'running', released: 'running', reaped: 'running', promoted: 'delayed',
  throttled: 'pending', rescheduled: 'delayed', parked: 'pending', unparked: 'pending',
  revived: 'dead',
  purged: 'dead', cancel_requested: 'running', progress: 'running',
};
const fromState = (d) => (d.type === 'cancelled' ? d.from : FROM[d.type]);
const BUCKET = { pending: 'ready', running: 'leased', delayed: 'delayed', dead: 'dead' };
const LIST = { running: 'leased', delayed: 'delayed', dead: 'dead' };
export const MAX_ROWS = 100;
const MAX_NAMES = 10000;

export const view = {
  queue: '',
  epoch: '', // the snapshot's log epoch and sequence number: events at or before
  floor: 0, //  it are already reflected in the counts
  offset: 0, // server clock minus this browser's clock, in ms
  leaseMs: 0, // the last lease length seen in an event
  counts: { ready: 0, leased: 0, delayed: 0, dead: 0 },
  leased: new Map(),
  delayed: new Map(),
  dead: new Map(),
  names: new Map(),
  busy: new Map(), // task id -> the action ('retry' or 'cancel') sent for it, unanswered
  sent: new Map(), //  task id -> the action done, until the task's event moves its row
  moved: new Set(), // leased rows whose progress alone changed: their bars are set again
  lastId: '', // the feed id of the last event or gap received
  newRows: [], // events (and gaps) not yet listed on screen
  seen: [], // arrival times, for the rate
  dirty: new Set(), // parts of the page to draw again
};

export function reset(queue) {
  Object.assign(view, { queue, epoch: '', floor: 0, lastId: '', newRows: [], seen: [] });
  for (const part of ['leased', 'delayed', 'dead', 'sent']) view[part].clear();
}

export function applySnapshot(snap, clientMid) {
  view.offset = snap.now_ms - clientMid;
  view.epoch = snap.epoch;
  view.floor = snap.seq;
  view.counts = { ...snap.counts };
  const old = view.leased;
  view.leased = new Map(snap.leased.map((l) => {
    const prev = old.get(l.task_id);
    const total = prev && prev.token === l.token ? prev.total : view.leaseMs;
    remember(l.task_id, l.name);
    return [l.task_id, { id: l.task_id, name: l.name, worker: l.worker, token: l.token,
      attempt: l.attempt, expires: l.expires_at, total,
      cancelRequested: l.cancel_requested_at > 0,
      permille: l.progress == null ? null : Math.round(l.progress * 1000),
      progressMessage: l.progress_message || '' }];
  }));
  view.delayed = new Map(snap.delayed.map((d) => {
    remember(d.task_id, d.name);
    return [d.task_id, { id: d.task_id, name: d.name, retries: d.retries, runAt: d.run_at,
      error: d.last_error, errorType: d.error_type, throttled: Boolean(d.throttled) }];
  }));
  view.dead = new Map(snap.dead.map((d) => {
    remember(d.task_id, d.name);
    return [d.task_id, { id: d.task_id, name: d.name, retries: d.retries, deadAt: d.dead_at,
      error: d.last_error, errorType: d.error_type }];
  }));
  view.sent.clear();
  for (const part of ['counts', 'leased', 'delayed', 'dead']) view.dirty.add(part);
}

// Events the snapshot reflects, listed before any the feed brings and never applied:
// its counts and rows hold them already.
export function listRecent(rows) {
  for (const d of rows) remember(d.task, d.name);
  view.newRows.unshift(...rows);
}

export function epochOf(data) {
  return String(data.id || '').split('.')[0];
}

// An event the snapshot already reflects would be counted twice.
export function applyIfNew(data) {
  if (epochOf(data) === view.epoch && data.seq <= view.floor) return;
  applyEvent(data);
}

function applyEvent(d) {
  const from = fromState(d);
  const to = d.state;
  if (from === undefined || !to) return;
  remember(d.task, d.name);
  const name = view.names.get(d.task) || '';
  if (d.type === 'progress') {
    // It moves no task: the run that holds the lease (its token) says how far it is.
    // A row of another run, as a page that missed events may hold, keeps its own.
    const row = view.leased.get(d.task);
    if (row && row.token === d.token) {
      row.permille = Number(d.progress);
      row.progressMessage = d.message || '';
      view.moved.add(d.task);
    }
    return;
  }
  if (d.type === 'cancel_requested') {
    // The task runs on under its lease until its worker hears of the cancel.
    const row = view.leased.get(d.task);
    if (row) row.cancelRequested = true;
    view.dirty.add('leased');
    return;
  }
  if (from !== to) {
    bump(BUCKET[from], -1);
    bump(BUCKET[to], +1);
    if (LIST[from]) {
      view[LIST[from]].delete(d.task);
      view.dirty.add(LIST[from]);
    }
  }
  if (to === 'running') {
    const prev = view.leased.get(d.task) || {};
    // Progress is a run's: a heartbeat of the same run keeps it, a new lease starts at none.
    const run = d.token != null && d.token === prev.token ? prev : {};
    if (d.at && d.ts) view.leaseMs = d.at - d.ts;
    view.leased.set(d.task, { id: d.task, name, worker: d.worker || prev.worker || '',
      token: d.token ?? prev.token, attempt: d.retries != null ? d.retries + 1 : prev.attempt,
      expires: d.at, total: d.at - d.ts,
      cancelRequested: d.type === 'heartbeat' && Boolean(prev.cancelRequested),
      permille: run.permille ?? null, progressMessage: run.progressMessage || '' });
  } else if (d.type === 'rescheduled') {
    // A released rate-limit line: the same throttled task, due sooner.
    const prev = view.delayed.get(d.task) || { id: d.task, name, retries: 0, error: '',
      errorType: '' };
    view.delayed.set(d.task, { ...prev, runAt: d.at, throttled: true });
  } else if (to === 'delayed') {
    view.delayed.set(d.task, { id: d.task, name, retries: d.retries ?? 0, runAt: d.at,
      error: d.error || '', errorType: d.error_type || '', throttled: d.type === 'throttled' });
  } else if (to === 'dead') {
    view.sent.delete(d.task);
    view.dead.set(d.task, { id: d.task, name, retries: d.retries ?? 0, deadAt: d.ts,
      error: d.error || '', errorType: d.error_type || '' });
  }
  if (LIST[to]) view.dirty.add(LIST[to]);
  view.dirty.add('counts');
}

function bump(bucket, delta) {
  if (bucket) view.counts[bucket] = Math.max(0, view.counts[bucket] + delta);
}

export function remember(task, name) {
  if (!name) return;
  view.names.delete(task);
  view.names.set(task, name);
  if (view.names.size > MAX_NAMES) view.names.delete(view.names.keys().next().value);
}

// A name looked up later: every row that shows the task gets it.
export function learnName(task, name) {
  remember(task, name);
  for (const list of ['leased', 'delayed', 'dead']) {
    const row = view[list].get(task);
    if (row) {
      row.name = name;
      view.dirty.add(list);
    }
  }
}
