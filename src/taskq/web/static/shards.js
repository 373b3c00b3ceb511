// The shards panel, shown for a sharded queue or one of its shards: each shard's slot,
// counts and feed, and one live event list merged from the shards' own feeds. Each feed
// is an EventSource of its own, opened at the position GET /api/shards read with the
// shard's counts and resumed by the browser from that shard's last id, so a gap on one
// shard (its log trimmed past the id it holds) marks that shard's row alone. The counts
// reload from the server, never counted locally: on events that change one (a burst is
// answered by one reload), after a gap, and at each resync. For a plain queue the page
// asks once and the panel stays hidden.

import { getJSON } from './http.js';
import { EVENT_TYPES, MAX_ROWS, epochOf } from './model.js';
import { Reloader } from './reloader.js';
import {
  NOTICES, NOTICE_LABELS, clockTime, el, isoTime, typeBadge,
} from './render.js';
import { shown } from './shown.js';

// A browser opens at most six connections to one server over HTTP/1.1 and each feed
// holds one for as long as the page is open: with the page's own feed beside these,
// two are left for the API's requests. The shards after these show counts only.
const MAX_FEEDS = 3;
// Event types that move no task between states, so change no count.
const UNCOUNTED = new Set(['heartbeat', 'cancel_requested', 'progress']);
const REOPEN_MS = 2000;
// Events within this long are listed in one draw.
const DRAW_MS = 100;
// Each shard's colour, by its place in the layout, cycles through this many.
const COLOURS = 6;
const COUNTS = ['ready', 'leased', 'delayed', 'dead'];
const FEED_LABELS = {
  off: 'not followed', connecting: 'connecting', live: 'live', reconnecting: 'reconnecting',
  ...NOTICE_LABELS, paused: 'paused while hidden',
};

const $ = (id) => document.getElementById(id);
const q = encodeURIComponent;

const panel = {
  queue: '', // the sharded queue shown; '' while the panel is hidden
  current: '', // the shard the page's main view shows
  loadId: 0, // a newer question (or another queue) supersedes an older one
  retry: '', // a queue whose shards could not be read: asked again at the next resync
  shards: new Map(), // name -> { name, index, source, lastId, state, gap, row, cells }
  newRows: [], // events and gaps not yet listed
  drawing: 0, // the DRAW_MS timer
};
// Shows a shard in the page's main view, and a task of it when given.
let pick = () => {};

const counts = new Reloader((queue) => `api/shards?queue=${q(queue)}`, drawCounts,
  (message) => { $('shards-meta').textContent = message; });

export function initShards(onPick) {
  pick = onPick;
}

// Shows the panel if `queue` is a sharded queue or one of its shards, else hides it.
// Resolves to the queue the main view should show: `queue`, or for a sharded queue's
// own name, which holds no tasks, its first shard.
export async function showShards(queue) {
  const id = ++panel.loadId;
  if (panel.queue && (queue === panel.queue || panel.shards.has(queue))) {
    return markCurrent(queue === panel.queue ? panel.shards.keys().next().value : queue);
  }
  let body = null;
  try {
    body = await getJSON(`api/shards?queue=${q(queue)}`);
  } catch {
    // The page works on without the panel; the next resync asks again.
  }
  if (id !== panel.loadId) return queue;
  if (!body || !body.shards.length) {
    hide();
    panel.retry = body ? '' : queue;
    return queue;
  }
  build(body);
  return markCurrent(body.queue === queue ? body.shards[0].name : queue);
}

// The sharded queue the panel shows ('' for none): a task of it is asked of the server
// by this name, which finds the shard holding it.
export function shardedQueue() {
  return panel.queue;
}

export function reloadShardsSoon() {
  if (panel.queue) {
    counts.soonAgain();
  } else if (panel.retry) {
    const queue = panel.retry;
    showShards(queue).then((shown) => { if (shown !== queue) pick(shown); });
  }
}

function hide() {
  closeFeeds();
  Object.assign(panel, { queue: '', current: '', retry: '', shards: new Map(), newRows: [] });
  counts.switchTo('');
  $('shards-panel').hidden = true;
}

function build(body) {
  closeFeeds();
  Object.assign(panel, { queue: body.queue, retry: '', newRows: [] });
  panel.shards = new Map(body.shards.map((s, index) => [s.name, {
    name: s.name, index, source: null, lastId: s.position, gap: null,
    state: index < MAX_FEEDS ? 'connecting' : 'off', row: null, cells: null,
  }]));
  $('shards-queue').textContent = shown(body.queue);
  $('shards-body').replaceChildren(...body.shards.map(shardRow));
  $('shard-events').replaceChildren();
  $('shards-panel').hidden = false;
  counts.switchTo(body.queue);
  drawCounts(body);
  drawEvents();
  for (const shard of panel.shards.values()) {
    if (shard.state !== 'off') follow(shard);
  }
}

function closeFeeds() {
  for (const shard of panel.shards.values()) {
    if (shard.source) shard.source.close();
    shard.source = null;
  }
}

function markCurrent(name) {
  panel.current = name;
  for (const shard of panel.shards.values()) {
    const current = shard.name === name;
    shard.row.classList.toggle('current', current);
    if (current) shard.row.setAttribute('aria-current', 'true');
    else shard.row.removeAttribute('aria-current');
  }
  return name;
}

// A hidden page lets go of its feeds (see app.js's openStream) and, shown again, resumes
// each followed shard's from the last id it received.
export function feedsVisibility() {
  for (const shard of panel.shards.values()) {
    if (document.hidden && shard.source) follow(shard);
    else if (!document.hidden && shard.state === 'paused') follow(shard);
  }
}

// The browser resumes a dropped stream by itself, sending its Last-Event-ID; a stream
// that failed for good is opened again from the last id received.
function follow(shard) {
  if (shard.source) shard.source.close();
  shard.source = null;
  if (document.hidden) {
    setState(shard, 'paused');
    return;
  }
  if (shard.state === 'paused') setState(shard, 'connecting');
  const url = `events?queue=${q(shard.name)}`
    + (shard.lastId ? `&last_event_id=${q(shard.lastId)}` : '');
  const source = new EventSource(url);
  shard.source = source;
  const mine = (message) => message.target === shard.source;
  source.onopen = () => {
    if (source === shard.source) setState(shard, 'live');
  };
  source.onerror = () => {
    if (source !== shard.source) return;
    if (!NOTICES.includes(shard.state)) setState(shard, 'reconnecting');
    if (source.readyState === EventSource.CLOSED) {
      setTimeout(() => { if (shard.source === source) follow(shard); }, REOPEN_MS);
    }
  };
  for (const type of EVENT_TYPES) {
    source.addEventListener(type, (message) => { if (mine(message)) onEvent(shard, message); });
  }
  source.addEventListener('gap', (message) => { if (mine(message)) onGap(shard, message); });
  for (const notice of NOTICES) {
    source.addEventListener(notice, (message) => { if (mine(message)) setState(shard, notice); });
  }
}

function onEvent(shard, message) {
  const data = JSON.parse(message.data);
  shard.lastId = message.lastEventId || shard.lastId;
  if (shard.state !== 'live') setState(shard, 'live');
  panel.newRows.push({ shard, data });
  if (!UNCOUNTED.has(data.type)) counts.soonAgain();
  drawSoon();
}

// Events the shard's feed never delivered are gone from the list for good: its row
// says so until the panel is built again, and its counts are read afresh.
function onGap(shard, message) {
  const gap = JSON.parse(message.data);
  shard.lastId = message.lastEventId || gap.resume_id || shard.lastId;
  shard.gap = { reason: gap.reason, at: Date.now() };
  drawFeed(shard);
  panel.newRows.push({ shard, gap });
  counts.soonAgain();
  drawSoon();
}

function setState(shard, state) {
  shard.state = state;
  drawFeed(shard);
}

function shardRow(s) {
  const shard = panel.shards.get(s.name);
  const count = (kind) => el('td', { class: 'num', 'data-testid': `shard-${kind}` }, '–');
  shard.cells = Object.fromEntries(COUNTS.map((kind) => [kind, count(kind)]));
  shard.cells.feed = el('td', { class: 'feed', 'data-testid': 'shard-feed' });
  shard.row = el('tr', {
    'data-testid': 'shard-row', 'data-shard': s.name, tabindex: 0,
    title: `show ${s.name}`,
    onclick: () => show(s.name),
    onkeydown: (e) => {
      if (e.key !== 'Enter' && e.key !== ' ') return;
      e.preventDefault();
      show(s.name);
    },
  },
  el('td', { class: 'name' }, el('span', { class: `shard-dot ${colour(shard)}` }),
    el('code', {}, s.name)),
  el('td', { class: 'num mono', 'data-testid': 'shard-slot' }, String(s.slot)),
  ...COUNTS.map((kind) => shard.cells[kind]), shard.cells.feed);
  drawFeed(shard);
  return shard.row;
}

function show(name) {
  if (name !== panel.current) pick(name);
}

const colour = (shard) => `shard-c${shard.index % COLOURS}`;

function drawCounts(body) {
  if (body.queue !== panel.queue) return;
  for (const s of body.shards) {
    const shard = panel.shards.get(s.name);
    if (!shard) continue;
    // A shard whose keys hold what taskq never writes there cannot be counted: '?',
    // and the error as the cells' title.
    for (const kind of COUNTS) {
      shard.cells[kind].textContent = s.error ? '?' : s[kind].toLocaleString();
      shard.cells[kind].title = s.error || '';
    }
  }
  const n = panel.shards.size;
  $('shards-meta').textContent = n > MAX_FEEDS
    ? `${n} shards · the first ${MAX_FEEDS} followed live` : `${n} shards, each followed live`;
}

function drawFeed(shard) {
  const { row } = shard;
  if (!row) return;
  row.dataset.state = shard.state;
  const state = el('span', { class: 'feed-state', 'data-state': shard.state,
    title: shard.state === 'off' ? `the page follows at most ${MAX_FEEDS} shards' feeds: `
      + 'a browser holds few connections to one server' : null },
  FEED_LABELS[shard.state] || shard.state);
  let gap = null;
  if (shard.gap) {
    row.dataset.gap = shard.gap.reason;
    gap = el('span', { class: 'badge shard-gap', 'data-testid': 'shard-gap',
      title: `missed events at ${clockTime(shard.gap.at)} (${shard.gap.reason}); `
        + 'its counts were read afresh' }, `gap · ${shard.gap.reason}`);
  }
  shard.cells.feed.replaceChildren(...[state, gap].filter(Boolean));
}

function drawSoon() {
  if (panel.drawing) return;
  panel.drawing = setTimeout(() => {
    panel.drawing = 0;
    drawEvents();
  }, DRAW_MS);
}

function drawEvents() {
  const list = $('shard-events');
  if (panel.newRows.length) {
    list.prepend(...panel.newRows.splice(0).slice(-MAX_ROWS).reverse().map(eventRow));
    while (list.childElementCount > MAX_ROWS) list.lastElementChild.remove();
  }
  $('shard-events-empty').hidden = list.childElementCount > 0;
}

function eventRow({ shard, data, gap }) {
  if (gap) {
    return el('li', { class: 'gap-row', 'data-testid': 'shard-gap-row', 'data-shard': shard.name },
      el('span', {}, `${shard.name} missed events · ${gap.reason}`));
  }
  return el('li', {
    class: 'event shard-event', 'data-testid': 'shard-event', 'data-shard': shard.name,
    'data-seq': data.seq, 'data-epoch': epochOf(data), 'data-type': data.type,
    'data-task-id': data.task,
  },
  el('time', { datetime: isoTime(data.ts) }, clockTime(data.ts)),
  el('span', { class: `shard-tag ${colour(shard)}`, 'data-testid': 'shard-tag',
    title: shard.name }, shard.name),
  typeBadge(data.type),
  el('code', { class: 'task', title: data.task }, taskLink(shard.name, data.task)),
  el('span', { class: `state state-${data.state}` }, data.state));
}

// A task of the shard the main view shows opens as any task link does; one of another
// shard switches the main view to its shard first, where its view can find it.
const taskLink = (name, id) => el('a', {
  class: 'task-link', href: `#task=${q(id)}`, 'data-testid': 'task-link',
  onclick: (e) => {
    if (name === panel.current) return;
    e.preventDefault();
    pick(name, id);
  },
}, id);
