// The taskq dashboard: load a snapshot of the queue, with the last events it reflects to
// list, then follow its resumable event feed from the snapshot's position, applying each
// event to the view as it comes. A #task=<id> link opens one task's view, which the same
// feed keeps current, as it does the schedules panel, the lifetime totals and the
// workflows (a #flow=<id> link opens one's view); the last
// minute's rates, the live workers and the recently ended tasks reload on timers. On a sharded queue the main view
// shows one shard, and the shards panel all of them.

import {
  EVENT_TYPES, MAX_ROWS, applyIfNew, applySnapshot, learnName, listRecent, reset, view,
} from './model.js';
import {
  NOTICES, hideError, hooks, render, renderEvents, renderFooter, schedule, setConn, showError,
  showGap, tick, toast,
} from './render.js';
import { drawBulk, initBulk } from './bulk.js';
import { closeFlow, initFlowView, openFlowFromHash } from './flow-view.js';
import { flowEvent, flowsFromRecent, reloadFlows, resetFlows } from './flows.js';
import { initHeartbeatFilter } from './heartbeats.js';
import { initHistory, loadHistory, reloadHistory } from './history.js';
import { getJSON, postJSON } from './http.js';
import { limitsEvent, loadLimits, reloadLimitsSoon } from './limits.js';
import { loadSchedules, reloadSoon, scheduleEvent } from './schedules.js';
import {
  feedsVisibility, initShards, reloadShardsSoon, shardedQueue, showShards,
} from './shards.js';
import {
  closeTask, initTaskView, openTaskFromHash, taskChanged, taskProgress, wantedId,
} from './task.js';
import { loadThroughput, reloadThroughput } from './throughput.js';
import { loadTotals, reloadTotals, totalsEvent } from './totals.js';
import { loadWorkers, reloadWorkers } from './workers.js';

const RESYNC_MS = 30000;
// Events listed when the page opens on a queue, from before it opened.
const RECENT_EVENTS = 50;
const TICK_MS = 250;
const REOPEN_MS = 2000;
const THROUGHPUT_MS = 5000;
// A vanished worker's record expires a lease after its last beat; the panel shows that
// within one more reload.
const WORKERS_MS = 2000;
// The ended tasks are read from the log: a task that ends shows within this long.
const HISTORY_MS = 5000;

const $ = (id) => document.getElementById(id);
const q = encodeURIComponent;

// Each switch of the main view's queue; an older one still asking for its shards gives way.
let switches = 0;

const feed = {
  source: null,
  loadId: 0,
  loading: false,
  stale: false, // the last snapshot load failed
  buffer: [], // events received while a snapshot loads
};

// The queue the server was started on: the page's queue when its URL names none.
let serverQueue = '';

async function loadQueues() {
  const select = $('queue');
  let names = [];
  try {
    const listed = await getJSON('api/queues?names=1');
    names = listed.queues.map((item) => item.name);
    serverQueue = listed.default || serverQueue;
  } catch (err) {
    showError(`Could not list queues: ${err.message}`);
  }
  if (view.queue && !names.includes(view.queue)) names.push(view.queue);
  if ([...select.options].map((o) => o.value).join('\n') !== names.join('\n')) {
    select.replaceChildren(...names.map((name) => new Option(name, name)));
    select.value = view.queue;
  }
  return names;
}

// A newer load supersedes an older one. Events that arrive meanwhile wait in the
// buffer and are applied once the newest snapshot is in, minus those it reflects.
// `recent`: how many of the events it reflects to list.
async function loadSnapshot(recent = 0) {
  const id = ++feed.loadId;
  feed.loading = true;
  let snap = null;
  let mid = 0;
  try {
    const before = Date.now();
    snap = await getJSON(
      `api/snapshot?queue=${q(view.queue)}&limit=${MAX_ROWS}&events=${recent}`);
    mid = (before + Date.now()) / 2;
  } catch (err) {
    if (id === feed.loadId) showError(`Could not load the snapshot: ${err.message}`);
  }
  if (id !== feed.loadId) return null;
  if (snap) {
    applySnapshot(snap, mid);
    listRecent(snap.recent);
    flowsFromRecent(snap.recent);
    hideError();
  }
  feed.stale = !snap;
  feed.loading = false;
  feed.buffer.splice(0).forEach(applyIfNew);
  try {
    render();
  } catch (err) {
    // The snapshot is applied: the feed must still open from its position.
    showError(`Could not draw the page: ${err.message}`);
  }
  return snap;
}

// A browser opens at most six connections to one server over HTTP/1.1, and a page's feed
// holds one for as long as it is open, so a seventh page of the dashboard would wait for
// good. A hidden page therefore lets go of its feed and, shown again, resumes it from the
// last id it holds: the server replays what it missed, or says there is a gap.
function openStream(lastId) {
  closeStream();
  view.lastId = lastId;
  if (document.hidden) {
    setConn('paused');
    renderFooter();
    return;
  }
  const url = `events?queue=${q(view.queue)}` + (lastId ? `&last_event_id=${q(lastId)}` : '');
  const source = new EventSource(url);
  feed.source = source;
  setConn('connecting');
  renderFooter();
  source.onopen = () => {
    if (feed.source !== source) return;
    setConn('live');
    if (feed.stale) loadSnapshot();
  };
  source.onerror = () => {
    if (feed.source !== source) return;
    // A notice ended the stream: its badge stays while the browser waits its retry.
    if (!NOTICES.includes($('conn').dataset.state)) setConn('reconnecting');
    // The browser reconnects by itself, sending Last-Event-ID, unless the stream failed
    // for good (an error status); then open a new one from the last id we hold.
    if (source.readyState === EventSource.CLOSED) {
      setTimeout(() => { if (feed.source === source) openStream(view.lastId); }, REOPEN_MS);
    }
  };
  for (const type of EVENT_TYPES) source.addEventListener(type, onEvent);
  source.addEventListener('gap', onGap);
  for (const notice of NOTICES) {
    source.addEventListener(notice, (message) => {
      if (message.target !== feed.source) return;
      const body = JSON.parse(message.data);
      // Coming back cannot mend a name the server refused: the stream stays closed.
      if (notice === 'invalid') closeStream();
      setConn(notice, body.error || body.message || notice);
    });
  }
}

function closeStream() {
  if (feed.source) feed.source.close();
  feed.source = null;
}

function onVisibility() {
  if (document.hidden && feed.source) openStream(view.lastId);
  else if (!document.hidden && !feed.source && $('conn').dataset.state === 'paused') {
    openStream(view.lastId);
  }
}

function onEvent(message) {
  if (message.target !== feed.source) return;
  const data = JSON.parse(message.data);
  view.lastId = message.lastEventId || view.lastId;
  view.newRows.push(data);
  view.seen.push(performance.now());
  if (feed.loading) feed.buffer.push(data);
  else applyIfNew(data);
  if (data.type === 'progress') taskProgress(data);
  else taskChanged(data.task);
  scheduleEvent(data);
  limitsEvent(data, view.names.get(data.task) || data.name || '');
  totalsEvent(data);
  flowEvent(data);
  schedule();
}

// Rows the client never received are gone: the counts cannot be trusted any more, so
// say so and start again from a fresh snapshot. The feed goes on from the log's head.
function onGap(message) {
  if (message.target !== feed.source) return;
  const gap = JSON.parse(message.data);
  view.lastId = message.lastEventId || gap.resume_id || view.lastId;
  showGap(gap);
  view.newRows.push({ gap });
  schedule();
  loadSnapshot();
  taskChanged(null);
  reloadSoon();
  reloadLimitsSoon();
  reloadTotals();
  reloadFlows();
}

// Events after `enqueued` carry no task name: look up the few on screen, once each.
const lookups = { asked: new Set(), waiting: [], busy: 0 };

function nameOf(task) {
  const known = view.names.get(task);
  if (known || lookups.asked.has(task)) return known || '';
  if (lookups.asked.size > 10000) lookups.asked.clear();
  lookups.asked.add(task);
  lookups.waiting.push(task);
  pumpLookups();
  return '';
}

function pumpLookups() {
  while (lookups.busy < 3 && lookups.waiting.length) {
    const task = lookups.waiting.shift();
    const { queue } = view;
    lookups.busy += 1;
    getJSON(`api/tasks/${q(task)}?queue=${q(queue)}&scan=0`)
      .then((record) => {
        if (queue === view.queue && record.name) {
          learnName(task, record.name);
          schedule();
        }
      })
      .catch(() => {})
      .finally(() => { lookups.busy -= 1; pumpLookups(); });
  }
}

// One write for a task's row: its buttons wait while it is sent, and stay off once it
// is done until the task's event moves the row, as it does any other change.
async function act(id, action, url) {
  view.busy.set(id, action);
  view.dirty.add('dead');
  render();
  try {
    const reply = await postJSON(url);
    if (reply.ok) view.sent.set(id, action);
    return reply;
  } finally {
    view.busy.delete(id);
    view.dirty.add('dead');
    schedule();
  }
}

// The row leaves the DLQ when the `revived` event arrives.
async function retry(id) {
  try {
    const { ok, status, body } = await act(id, 'retry',
      `api/dlq/${q(id)}/retry?queue=${q(view.queue)}`);
    if (ok) toast(`Sent ${id} back to ready`, true);
    else toast(`Retry of ${id} refused: ${body.error || status}`, false);
  } catch (err) {
    toast(`Retry of ${id} failed: ${err.message}`, false);
  }
}

// What a cancel did, in words: `outcome` and the `state` the task was in.
function cancelOutcome({ outcome, state }) {
  if (outcome === 'cancelled') return 'cancelled';
  if (outcome === 'requested') return 'cancel requested: the worker stops it at its next heartbeat';
  if (state === 'running') return 'its cancel was requested already';
  return `nothing to cancel: it is ${state}`;
}

// The DLQ row's Cancel: only a task still dead is cancelled (one another operator has
// just sent back to ready is left running), and its row goes with its `cancelled` event.
async function cancelDead(id) {
  try {
    const { ok, status, body } = await act(id, 'cancel',
      `api/dlq/${q(id)}/cancel?queue=${q(view.queue)}`);
    if (ok) toast(`${id}: cancelled`, true, 'cancel-result');
    else toast(`Cancel of ${id} refused: ${body.error || status}`, false, 'cancel-result');
  } catch (err) {
    toast(`Cancel of ${id} failed: ${err.message}`, false, 'cancel-result');
  }
}

// Resolves to { ok, text } for the task view; the rows change with the task's
// `cancelled` or `cancel_requested` event.
async function cancel(id) {
  let said;
  try {
    const { ok, status, body } = await act(id, 'cancel',
      `api/tasks/${q(id)}/cancel?queue=${q(view.queue)}`);
    said = ok ? { ok: body.outcome !== 'unchanged', text: cancelOutcome(body) }
      : { ok: false, text: `refused: ${body.error || status}` };
  } catch (err) {
    said = { ok: false, text: `failed: ${err.message}` };
  }
  toast(`${id}: ${said.text}`, said.ok, 'cancel-result');
  return said;
}

async function start(queue) {
  closeStream();
  feed.loadId += 1;
  Object.assign(feed, { loading: false, stale: false, buffer: [] });
  reset(queue);
  resetFlows(queue);
  $('events').replaceChildren();
  $('gap-notice').hidden = true;
  $('queue').value = queue;
  const url = new URL(window.location.href);
  url.searchParams.set('queue', queue);
  window.history.replaceState(null, '', url);
  loadSchedules(queue);
  loadLimits(queue);
  loadTotals(queue);
  loadThroughput(queue);
  loadWorkers(queue);
  loadHistory(queue);
  const snap = await loadSnapshot(RECENT_EVENTS);
  if (view.queue === queue) openStream(snap ? snap.position : '');
}

// The main view's queue is switched by the picker, a shard's row, or the link to a task
// of another shard (`task`, whose view opens once its shard is shown).
async function switchTo(queue, task = '') {
  closeTask();
  closeFlow();
  const id = ++switches;
  const shown = await showShards(queue);
  if (id !== switches) return;
  start(shown);
  if (task) window.location.hash = `task=${q(task)}`;
}

// The shard of the sharded queue shown that holds `task`, or `queue` when none is shown
// (or the server cannot say): a link to a task may name the sharded queue or any of its
// shards, and only the shard holding the task shows it and follows its events.
async function shardHolding(queue, task) {
  const whole = shardedQueue();
  if (!task || !whole) return queue;
  try {
    const body = await getJSON(`api/tasks/${q(task)}?queue=${q(whole)}&scan=0`);
    return body.queue || queue;
  } catch {
    return queue; // not found: the task's view says so on the shard shown
  }
}

async function main() {
  Object.assign(hooks, { nameOf, retry, cancel, cancelDead, drawBulk });
  initShards(switchTo);
  const wanted = new URLSearchParams(window.location.search).get('queue');
  if (wanted) view.queue = await showShards(wanted);
  const held = await shardHolding(view.queue, wantedId());
  if (held !== view.queue) view.queue = await showShards(held);
  const names = await loadQueues();
  $('queue').addEventListener('change', (e) => switchTo(e.target.value));
  $('gap-close').addEventListener('click', () => { $('gap-notice').hidden = true; });
  initTaskView();
  initFlowView();
  initHeartbeatFilter(renderEvents);
  initHistory();
  initBulk(() => loadSnapshot());
  document.addEventListener('visibilitychange', () => {
    onVisibility();
    feedsVisibility();
  });
  window.addEventListener('hashchange', async () => {
    const task = wantedId();
    const held = await shardHolding(view.queue, task);
    if (held !== view.queue) {
      switchTo(held, task);
      return;
    }
    openTaskFromHash(view.queue);
    openFlowFromHash();
  });
  setInterval(tick, TICK_MS);
  setInterval(() => {
    if (!feed.loading) {
      loadSnapshot();
      loadQueues();
      reloadSoon();
      reloadLimitsSoon();
      reloadTotals();
      reloadShardsSoon();
      reloadFlows();
    }
  }, RESYNC_MS);
  // Not before the first queue is picked: asked with none, the server would answer for
  // its own, which may be a sharded queue's whole name (a 409).
  const picked = (reload) => () => { if (view.queue) reload(); };
  setInterval(picked(reloadThroughput), THROUGHPUT_MS);
  setInterval(picked(reloadWorkers), WORKERS_MS);
  setInterval(picked(reloadHistory), HISTORY_MS);
  await start(view.queue || await showShards(serverQueue || names[0] || 'default'));
  openTaskFromHash(view.queue);
  openFlowFromHash();
}

main();
