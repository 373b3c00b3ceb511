// The workflows the page has seen, and the Workflows panel that lists them. A workflow
// is seen in an event that names it (`flow`: a step enqueued, triggered or skipped),
// among the events listed at load or in the live feed; its status is read once (GET
// /api/flows/<id>), then each event of one of its steps (task id `<flow>.<stage>.<index>`)
// moves that step at once. A step's end is when the workflow's own record can change
// (its stage, its end, why it failed), so each one reads the status again; so does a
// gap. Events that come while a status is read are applied again on top of it, so the
// read, older than they are, cannot undo them.

import { getJSON } from './http.js';
import { el, replaceKeepingFocus, tick } from './render.js';

// Workflows listed at most: the newest seen.
const MAX_FLOWS = 20;
// Reads asked for within this long are one.
const RELOAD_MS = 150;
// Drawing batches the events of this long.
const DRAW_MS = 50;
export const ENDED = new Set(['completed', 'dead', 'cancelled']);
// Whether a step, as a workflow's status gives it, has ended: a step with no state is
// one whose record expired, which a record does only once its task has ended.
const stepEnded = (state) => !state || ENDED.has(state);
const STEP_ID = /^([A-Za-z0-9_-]{1,100})\.([0-9]+)\.([0-9]+)$/;

const $ = (id) => document.getElementById(id);
const q = encodeURIComponent;

const seen = {
  queue: '',
  flows: new Map(), // flow id -> its entry (see track)
  pinned: '', // the workflow the view shows, kept when the list drops it
  generation: 0, // a newer queue supersedes older reads
  drawing: 0,
  loading: 0, // the RELOAD_MS timer of loadNewSoon
};

// What the workflow view needs told when a workflow it may show changes.
export const flowHooks = { changed: () => {} };

export function resetFlows(queue) {
  seen.generation += 1;
  for (const entry of seen.flows.values()) clearTimeout(entry.soon);
  clearTimeout(seen.loading);
  Object.assign(seen, { queue, pinned: '', loading: 0 });
  seen.flows.clear();
  $('flows-meta').textContent = '';
  drawSoon();
}

// The workflow of a step's task id ('' for any other task).
export function flowOfTask(task) {
  const found = STEP_ID.exec(task || '');
  return found ? found[1] : '';
}

// Starts following workflow `id` (the view shows it), listed or not.
export function watchFlow(id) {
  seen.pinned = id;
  const entry = track(id, 0);
  if (!entry.busy && !entry.status) load(entry);
  return entry;
}

// The view of workflow `id` closed: it is followed no more for the view's sake, and
// one that could not be read (a link to a workflow that does not exist, or no longer
// does) leaves the list rather than be asked for again at every resync.
export function unwatchFlow(id) {
  if (seen.pinned === id) seen.pinned = '';
  const entry = seen.flows.get(id);
  if (entry && !entry.status && !entry.named) {
    seen.flows.delete(id);
    drawSoon();
  }
}

// Events listed at load, from before it: they name workflows to list, which their
// status (read after them) already reflects.
export function flowsFromRecent(rows) {
  for (const d of rows) if (d.flow) track(d.flow, d.ts);
}

// An event of the feed: a workflow it names is listed; a step of one listed moves.
export function flowEvent(d) {
  if (d.flow) track(d.flow, d.ts);
  const entry = seen.flows.get(flowOfTask(d.task));
  if (!entry || d.state == null) return;
  if (entry.busy) entry.buffer.push(d);
  if (entry.status) {
    applyStep(entry, d);
    if (mayHaveEnded(entry, d)) reloadSoon(entry);
    changed(entry);
  }
}

// Whether event `d` of a step may have changed the workflow's own record, which only
// a read of the whole workflow shows: a step that ended without completing (it may fail
// the workflow), the last step of the last stage to end (it may complete it), or a
// cancel request (it may be the whole workflow's, whose running steps end only as their
// workers hear it). Any other step's event moves the view by itself: a read at each of
// thousands of ends kept a server thread reading the workflow for as long as it ran.
function mayHaveEnded(entry, d) {
  if (d.type === 'cancel_requested') return true;
  if (!ENDED.has(d.state)) return false;
  return d.state !== 'completed' || !entry.steps.has(d.task) || entry.lastOpen === 0;
}

// After a gap, or at a resync: every workflow followed is read again.
export function reloadFlows() {
  for (const entry of seen.flows.values()) reloadSoon(entry);
}

// `ts`: the time of the event that names it (0: the view asked for it, from a link).
function track(id, ts) {
  let entry = seen.flows.get(id);
  if (entry && ts) entry.named = true;
  if (!entry) {
    entry = { id, firstTs: ts || Date.now(), status: null, steps: new Map(), error: '',
      busy: false, again: false, buffer: [], soon: 0, named: Boolean(ts), lastOpen: 0 };
    seen.flows.set(id, entry);
    forgetOldest();
    loadNewSoon();
    drawSoon();
  }
  return entry;
}

// Workflows seen for the first time are read together, once the burst that named them
// is in: of a thousand started at once, only the MAX_FLOWS listed are asked for.
function loadNewSoon() {
  if (seen.loading) return;
  seen.loading = setTimeout(() => {
    seen.loading = 0;
    for (const entry of seen.flows.values()) {
      if (!entry.status && !entry.busy && !entry.error) load(entry);
    }
  }, RELOAD_MS);
}

function forgetOldest() {
  const listed = [...seen.flows.values()].sort(newestFirst);
  for (const entry of listed.slice(MAX_FLOWS)) {
    if (entry.id === seen.pinned) continue;
    clearTimeout(entry.soon);
    seen.flows.delete(entry.id);
  }
}

const startedAt = (entry) => (entry.status ? entry.status.created_at_ms : entry.firstTs);
const newestFirst = (a, b) => startedAt(b) - startedAt(a) || b.id.localeCompare(a.id);

function reloadSoon(entry) {
  if (entry.soon) return;
  entry.soon = setTimeout(() => {
    entry.soon = 0;
    load(entry);
  }, RELOAD_MS);
}

async function load(entry) {
  if (entry.busy) {
    entry.again = true;
    return;
  }
  const { generation } = seen;
  Object.assign(entry, { busy: true, buffer: [] });
  try {
    const status = await getJSON(`api/flows/${q(entry.id)}?queue=${q(seen.queue)}`);
    if (generation !== seen.generation) return;
    setStatus(entry, status);
  } catch (err) {
    if (generation !== seen.generation) return;
    entry.error = err.message;
  } finally {
    if (generation === seen.generation) {
      entry.busy = false;
      entry.buffer = [];
      if (entry.again) {
        entry.again = false;
        load(entry);
      }
      changed(entry);
    }
  }
}

function setStatus(entry, status) {
  Object.assign(entry, { status, error: '' });
  entry.steps = new Map(status.steps.map((s) => [s.task_id, { ...s,
    // Its record names the step that failed the workflow: it never ran.
    skipped: s.state === 'cancelled' && Boolean(s.upstream) }]));
  // The steps of the last stage that have not ended, kept by applyStep.
  entry.lastOpen = status.steps.filter((s) => s.stage === status.stages
    && !stepEnded(s.state)).length;
  for (const d of entry.buffer) applyStep(entry, d);
}

function applyStep(entry, d) {
  const step = entry.steps.get(d.task);
  if (!step) return;
  if (step.stage === entry.status.stages && stepEnded(step.state) !== ENDED.has(d.state)) {
    entry.lastOpen += ENDED.has(d.state) ? -1 : 1;
  }
  step.state = d.state;
  if (d.type === 'cancelled' && d.from === 'waiting' && d.upstream) step.skipped = true;
  if (d.type === 'leased' && d.retries != null) step.retries = d.retries;
  // A stage's steps are triggered by the end of the stage before: it is current now.
  if (d.type === 'triggered') entry.status.stage = Math.max(entry.status.stage, step.stage);
}

function changed(entry) {
  drawSoon();
  flowHooks.changed(entry);
}

// How far a workflow is: its steps ended, of all of them.
export function progressOf(entry) {
  const steps = [...entry.steps.values()];
  return { ended: steps.filter((s) => stepEnded(s.state)).length, total: steps.length };
}

function drawSoon() {
  if (seen.drawing) return;
  seen.drawing = setTimeout(() => {
    seen.drawing = 0;
    draw();
  }, DRAW_MS);
}

function draw() {
  const listed = [...seen.flows.values()].sort(newestFirst).slice(0, MAX_FLOWS);
  replaceKeepingFocus($('flows-body'), listed.length ? listed.map(row)
    : [el('tr', { class: 'empty-row' }, el('td', { colspan: 5 },
      'No workflow in the recent events.'))]);
  const running = listed.filter((e) => e.status && e.status.state === 'running').length;
  $('flows-meta').textContent = listed.length ? `${listed.length} seen · ${running} running` : '';
  tick();
}

// The bar of `ended` steps of `total`, and the count.
export function progressBar({ ended, total }, testid) {
  const fill = el('span', { class: 'fill' });
  // Through the CSSOM: the page's CSP allows no style attribute.
  fill.style.width = `${total ? Math.round((ended / total) * 100) : 0}%`;
  return el('div', { class: 'flow-progress', 'data-testid': testid,
    title: `${ended} of ${total} steps ended` },
  el('span', { class: 'track' }, fill), el('span', { class: 'mono' }, `${ended} / ${total}`));
}

function row(entry) {
  const { status } = entry;
  const state = status ? status.state : entry.error ? 'unknown' : 'loading';
  return el('tr', { 'data-testid': 'flow-row', 'data-flow-id': entry.id, 'data-state': state },
    el('td', { class: 'id', title: entry.id }, el('code', {}, el('a', {
      class: 'task-link', href: `#flow=${q(entry.id)}`, 'data-testid': 'flow-link',
    }, entry.id))),
    el('td', { title: entry.error || state }, el('span', {
      class: `state state-${state}`, 'data-testid': 'flow-state' }, state)),
    el('td', { class: 'num', 'data-testid': 'flow-row-stage' },
      status ? `${status.stage} of ${status.stages}` : '—'),
    el('td', {}, status ? progressBar(progressOf(entry), 'flow-progress') : '—'),
    el('td', { class: 'since', 'data-since': startedAt(entry),
      title: new Date(startedAt(entry)).toLocaleString() }));
}
