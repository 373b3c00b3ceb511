// The workflow view: a workflow's stages left to right, each step a box with its name
// and state (a waiting step drawn apart, the step that failed the workflow marked, the
// steps it skipped said so), each box a link to its task's view. A #flow=<id> link
// opens it; flows.js keeps what it shows current from the feed.

import {
  ENDED, flowHooks, progressBar, progressOf, unwatchFlow, watchFlow,
} from './flows.js';
import { el, focusBackTo } from './render.js';
import { shown } from './shown.js';

const $ = (id) => document.getElementById(id);
const q = encodeURIComponent;

const open = { id: '', opener: null };
// Redraws of the open view are batched: a workflow of thousands of steps sends several
// events a step, and a redraw takes longer the more steps it has. The wait after a
// redraw is at least twice what it took, so the page is free most of the time.
const REDRAW_MS = 100;
const redraw = { entry: null, timer: 0, took: 0 };

function wantedId() {
  return new URLSearchParams(window.location.hash.slice(1)).get('flow') || '';
}

export function openFlowFromHash() {
  const id = wantedId();
  if (!id) {
    hide();
    return;
  }
  if (!open.id) open.opener = document.activeElement;
  open.id = id;
  $('flow-id').textContent = shown(id);
  $('flow-id').title = id;
  $('flow-view').dataset.flowId = id;
  $('flow-view').hidden = false;
  $('flow-view').focus();
  draw(watchFlow(id));
}

// Closing drops the hash without a new history entry, so Back does not reopen it.
export function closeFlow() {
  if (wantedId()) {
    window.history.replaceState(null, '', window.location.pathname + window.location.search);
  }
  hide();
}

function hide() {
  const wasOpen = Boolean(open.id);
  if (wasOpen) unwatchFlow(open.id);
  open.id = '';
  clearTimeout(redraw.timer);
  Object.assign(redraw, { entry: null, timer: 0 });
  $('flow-view').hidden = true;
  if (wasOpen) focusBackTo(open.opener);
}

function drawSoon(entry) {
  redraw.entry = entry;
  if (redraw.timer) return;
  redraw.timer = setTimeout(() => {
    const pending = redraw.entry;
    Object.assign(redraw, { entry: null, timer: 0 });
    if (pending && pending.id === open.id) draw(pending);
  }, Math.max(REDRAW_MS, 2 * redraw.took));
}

function draw(entry) {
  const started = performance.now();
  drawEntry(entry);
  redraw.took = performance.now() - started;
}

function drawEntry(entry) {
  const { status } = entry;
  const stateNode = $('flow-state');
  $('flow-message').hidden = Boolean(status);
  $('flow-body').hidden = !status;
  stateNode.hidden = !status;
  if (!status) {
    $('flow-message').textContent = shown(entry.error || 'Loading…');
    return;
  }
  stateNode.textContent = status.state;
  stateNode.className = `state state-${status.state}`;
  $('flow-view').dataset.state = status.state;
  const done = progressOf(entry);
  $('flow-summary').replaceChildren(
    el('span', { 'data-testid': 'flow-view-stage' }, `stage ${status.stage} of ${status.stages}`),
    progressBar(done, 'flow-view-progress'),
    el('span', { class: 'panel-meta' }, `started ${new Date(status.created_at_ms).toLocaleString()}`
      + (status.ended_at_ms ? ` · ended ${new Date(status.ended_at_ms).toLocaleString()}` : '')));
  $('flow-error').hidden = !status.upstream;
  $('flow-error').textContent = status.upstream ? shown(status.error_message) : '';
  const byStage = new Map();
  for (const s of entry.steps.values()) {
    if (!byStage.has(s.stage)) byStage.set(s.stage, []);
    byStage.get(s.stage).push(s);
  }
  const stages = [];
  for (let k = 1; k <= status.stages; k += 1) stages.push(stage(entry, k, byStage.get(k) || []));
  $('flow-stages').replaceChildren(...stages);
}

function stage(entry, k, steps) {
  const { status } = entry;
  const group = status.groups[k - 1];
  const kind = group ? `group of ${steps.length} · on failure: ${status.policies[k - 1]}`
    : 'step';
  const place = k < status.stage || steps.every((s) => ENDED.has(s.state)) ? 'done'
    : k === status.stage ? 'current' : 'later';
  return el('section', { class: 'flow-stage', 'data-testid': 'flow-stage', 'data-stage': k,
    'data-place': place },
  el('h4', {}, `Stage ${k}`, el('span', { class: 'panel-meta' }, kind)),
  el('ol', { class: 'flow-steps' }, ...steps.map((s) => step(status, s))));
}

function step(status, s) {
  const upstream = s.task_id === status.upstream;
  const shown = s.skipped ? 'skipped' : s.state || 'expired';
  return el('li', {}, el('a', {
    class: `flow-step state-${s.skipped ? 'skipped' : s.state}`, href: `#task=${q(s.task_id)}`,
    'data-testid': 'flow-step', 'data-task-id': s.task_id, 'data-state': s.state,
    'data-skipped': String(Boolean(s.skipped)), 'data-upstream': String(upstream),
    title: `${s.task_id}: ${shown}${s.retries ? `, ${s.retries} retries` : ''}`,
  },
  el('span', { class: 'flow-step-name' }, s.name || '—'),
  el('span', { class: 'flow-step-line' },
    el('code', {}, `${s.stage}.${s.index}`),
    el('span', { class: `state state-${s.skipped ? 'skipped' : s.state}`,
      'data-testid': 'flow-step-state' }, shown)),
  upstream ? el('span', { class: 'badge upstream', 'data-testid': 'upstream-badge' },
    'failed the workflow') : null,
  s.retries ? el('span', { class: 'flow-step-retries' }, `retries ${s.retries}`) : null));
}

export function initFlowView() {
  flowHooks.changed = (entry) => { if (entry.id === open.id) drawSoon(entry); };
  $('flow-close').addEventListener('click', closeFlow);
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && open.id) closeFlow();
  });
}
