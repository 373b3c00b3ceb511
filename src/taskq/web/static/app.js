// The taskq dashboard: load a snapshot of the queue, then follow its resumable event
// feed from the snapshot's position, applying each event to the view as it comes.

const EVENT_TYPES = ['enqueued', 'leased', 'heartbeat', 'completed', 'failed', 'released',
  'reaped', 'promoted', 'revived'];
// Each event type moves a task out of one state; the event's `state` is where it lands.
// The scripts emit exactly these transitions, so counts follow from the events alone.
const FROM = {
  enqueued: null, leased: 'pending', heartbeat: 'running', completed: 'running',
  failed: 'running', released: 'running', reaped: 'running', promoted: 'delayed',
  revived: 'dead',
};
const BUCKET = { pending: 'ready', running: 'leased', delayed: 'delayed', dead: 'dead' };
const LIST = { running: 'leased', delayed: 'delayed', dead: 'dead' };
const MAX_EVENTS = 200;
const MAX_ROWS = 100;
const MAX_KEPT = 1000; // rows kept per table beyond those shown; a resync refills them
const MAX_NAMES = 10000;
const RESYNC_MS = 30000;
const TICK_MS = 250;
const REOPEN_MS = 2000;

const $ = (id) => document.getElementById(id);
const q = encodeURIComponent;

const view = {
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
  retrying: new Set(),
  retried: new Set(),
  source: null,
  lastId: '',
  loadId: 0,
  loading: false,
  stale: false,
  buffer: [], // events received while a snapshot is loading
  newRows: [],
  seen: [], // arrival times, for the rate
  dirty: new Set(),
  frame: 0,
};

// ---------------------------------------------------------------- fetching

async function getJSON(url) {
  const response = await fetch(url, { credentials: 'same-origin', cache: 'no-store' });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const hint = response.status === 401 ? ' (open /?token=<token> once to sign in)' : '';
    throw new Error(`${body.error || response.statusText || response.status}${hint}`);
  }
  return body;
}

async function loadQueues() {
  const select = $('queue');
  let names = [];
  try {
    names = (await getJSON('api/queues')).queues.map((item) => item.name);
  } catch (err) {
    showError(`Could not list queues: ${err.message}`);
  }
  if (view.queue && !names.includes(view.queue)) names.push(view.queue);
  const current = [...select.options].map((o) => o.value);
  if (current.join('\n') !== names.join('\n')) {
    select.replaceChildren(...names.map((name) => new Option(name, name)));
  }
  return names;
}

// Newer loads supersede older ones; events that arrive meanwhile wait in the buffer
// and are applied once the newest snapshot is in, minus those it already reflects.
async function loadSnapshot() {
  const id = ++view.loadId;
  view.loading = true;
  let snap = null;
  let mid = 0;
  try {
    const before = Date.now();
    snap = await getJSON(`api/snapshot?queue=${q(view.queue)}&limit=${MAX_ROWS}`);
    mid = (before + Date.now()) / 2;
  } catch (err) {
    if (id === view.loadId) showError(`Could not load the snapshot: ${err.message}`);
  }
  if (id !== view.loadId) return null;
  if (snap) {
    applySnapshot(snap, mid);
    hideError();
  }
  view.stale = !snap;
  view.loading = false;
  const buffered = view.buffer;
  view.buffer = [];
  buffered.forEach(applyIfNew);
  render();
  return snap;
}

function applySnapshot(snap, clientMid) {
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
      attempt: l.attempt, expires: l.expires_at, total }];
  }));
  view.delayed = new Map(snap.delayed.map((d) => {
    remember(d.task_id, d.name);
    return [d.task_id, { id: d.task_id, name: d.name, retries: d.retries, runAt: d.run_at,
      error: d.last_error }];
  }));
  view.dead = new Map(snap.dead.map((d) => {
    remember(d.task_id, d.name);
    return [d.task_id, { id: d.task_id, name: d.name, retries: d.retries, deadAt: d.dead_at,
      error: d.last_error }];
  }));
  for (const part of ['counts', 'leased', 'delayed', 'dead', 'footer']) view.dirty.add(part);
}

// ---------------------------------------------------------------- the feed

function openStream(lastId) {
  closeStream();
  view.lastId = lastId;
  const url = `events?queue=${q(view.queue)}` + (lastId ? `&last_event_id=${q(lastId)}` : '');
  const source = new EventSource(url);
  view.source = source;
  setConn('connecting');
  renderFooter();
  source.onopen = () => {
    if (view.source !== source) return;
    setConn('live');
    if (view.stale) loadSnapshot();
  };
  source.onerror = () => {
    if (view.source !== source) return;
    setConn('reconnecting');
    // The browser retries by itself (sending Last-Event-ID) unless the stream failed
    // for good; then open a new one from the last id we hold.
    if (source.readyState === EventSource.CLOSED) {
      setTimeout(() => { if (view.source === source) openStream(view.lastId); }, REOPEN_MS);
    }
  };
  for (const type of EVENT_TYPES) source.addEventListener(type, onEvent);
  source.addEventListener('gap', onGap);
}

function closeStream() {
  if (view.source) view.source.close();
  view.source = null;
}

function onEvent(message) {
  if (message.target !== view.source) return;
  const data = JSON.parse(message.data);
  view.lastId = message.lastEventId || view.lastId;
  view.newRows.push(data);
  view.seen.push(performance.now());
  if (view.loading) view.buffer.push(data);
  else applyIfNew(data);
  schedule();
}

function onGap(message) {
  if (message.target !== view.source) return;
  const gap = JSON.parse(message.data);
  view.lastId = message.lastEventId || gap.resume_id || view.lastId;
  showGap(gap);
  view.newRows.push({ gap });
  schedule();
  loadSnapshot();
}

function epochOf(data) {
  return String(data.id || '').split('.')[0];
}

function applyIfNew(data) {
  if (epochOf(data) === view.epoch && data.seq <= view.floor) return;
  applyEvent(data);
}

function applyEvent(d) {
  const from = FROM[d.type];
  const to = d.state;
  if (from === undefined || !to) return;
  remember(d.task, d.name);
  const name = view.names.get(d.task) || '';
  if (from !== to) {
    bump(BUCKET[from], -1);
    bump(BUCKET[to], +1);
    if (LIST[from]) view[LIST[from]].delete(d.task);
    view.dirty.add(LIST[from] || 'counts');
  }
  if (to === 'running') {
    const prev = view.leased.get(d.task) || {};
    if (d.at && d.ts) view.leaseMs = d.at - d.ts;
    view.leased.set(d.task, { id: d.task, name, worker: d.worker || prev.worker || '',
      token: d.token ?? prev.token, attempt: d.retries != null ? d.retries + 1 : prev.attempt,
      expires: d.at, total: d.at - d.ts });
  } else if (to === 'delayed') {
    view.delayed.set(d.task, { id: d.task, name, retries: d.retries ?? 0, runAt: d.at,
      error: d.error || '' });
  } else if (to === 'dead') {
    view.dead.set(d.task, { id: d.task, name, retries: d.retries ?? 0, deadAt: d.ts,
      error: d.error || '' });
  }
  if (LIST[to]) view.dirty.add(LIST[to]);
  view.dirty.add('counts');
}

function bump(bucket, delta) {
  if (bucket) view.counts[bucket] = Math.max(0, view.counts[bucket] + delta);
}

// Events after `enqueued` carry no task name: look the few on screen up, once each.
const names = { asked: new Set(), waiting: [], busy: 0 };

function nameOf(task) {
  const known = view.names.get(task);
  if (known || names.asked.has(task)) return known || '';
  if (names.asked.size > MAX_NAMES) names.asked.clear();
  names.asked.add(task);
  names.waiting.push(task);
  pumpNames();
  return '';
}

function pumpNames() {
  while (names.busy < 3 && names.waiting.length) {
    const task = names.waiting.shift();
    const queue = view.queue;
    names.busy += 1;
    getJSON(`api/tasks/${q(task)}?queue=${q(queue)}`)
      .then((record) => {
        if (queue !== view.queue || !record.name) return;
        remember(task, record.name);
        for (const list of ['leased', 'delayed', 'dead']) {
          const row = view[list].get(task);
          if (row) { row.name = record.name; view.dirty.add(list); }
        }
        schedule();
      })
      .catch(() => {})
      .finally(() => { names.busy -= 1; pumpNames(); });
  }
}

function remember(task, name) {
  if (!name) return;
  view.names.delete(task);
  view.names.set(task, name);
  if (view.names.size > MAX_NAMES) view.names.delete(view.names.keys().next().value);
}

// ---------------------------------------------------------------- rendering

function schedule() {
  if (view.frame) return;
  const run = () => { view.frame = 0; render(); };
  // requestAnimationFrame batches bursts; the timeout keeps a hidden tab current.
  const raf = requestAnimationFrame(() => { clearTimeout(timer); run(); });
  const timer = setTimeout(() => { cancelAnimationFrame(raf); run(); }, 200);
  view.frame = raf;
}

function render() {
  const dirty = view.dirty;
  if (dirty.has('counts')) renderCounts();
  if (dirty.has('leased')) renderLeased();
  if (dirty.has('delayed')) renderDelayed();
  if (dirty.has('dead')) renderDead();
  dirty.clear();
  renderEvents();
  renderFooter();
  tick();
}

function renderCounts() {
  const total = Object.values(view.counts).reduce((a, b) => a + b, 0);
  for (const [kind, n] of Object.entries(view.counts)) {
    $(`count-${kind}`).textContent = n.toLocaleString();
    const bar = document.querySelector(`#mix [data-kind="${kind}"]`);
    bar.style.flexGrow = String(n);
    bar.title = `${kind}: ${n}`;
    bar.hidden = n === 0;
  }
  $('mix').classList.toggle('empty', total === 0);
  document.title = `taskq · ${view.queue} · ${view.counts.ready} ready`;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value == null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  node.append(...children.filter((c) => c != null));
  return node;
}

function idCell(id) {
  return el('td', { class: 'id', title: id }, el('code', {}, id));
}

function errorCell(error) {
  return error ? el('td', { class: 'error', title: error }, el('span', {}, error)) : el('td', { class: 'none' }, '—');
}

function emptyRow(span, text) {
  return el('tr', { class: 'empty-row' }, el('td', { colspan: span }, text));
}

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

function renderLeased() {
  const rows = top(view.leased, (a, b) => a.expires - b.expires);
  $('leased-body').replaceChildren(...(rows.length ? rows.map((l) => el('tr',
    { 'data-testid': 'leased-row', 'data-task-id': l.id },
    idCell(l.id), el('td', { class: 'name' }, l.name || nameOf(l.id) || '—'),
    el('td', { class: 'worker', title: l.worker }, l.worker || '—'),
    el('td', { class: 'num' }, String(l.attempt ?? '—')),
    el('td', { class: 'num mono' }, String(l.token ?? '—')),
    el('td', {},
      el('div', { class: 'countdown', 'data-testid': 'lease-countdown', 'data-deadline': l.expires,
        'data-total': l.total || '', 'data-kind': 'lease' },
      el('span', { class: 'left' }), el('span', { class: 'track' }, el('span', { class: 'fill' }))))))
    : [emptyRow(6, 'No task is leased right now.')]));
  meta('leased-meta', rows.length, Math.max(view.counts.leased, rows.length));
}

function renderDelayed() {
  const rows = top(view.delayed, (a, b) => a.runAt - b.runAt);
  $('delayed-body').replaceChildren(...(rows.length ? rows.map((d) => el('tr',
    { 'data-testid': 'delayed-row', 'data-task-id': d.id },
    idCell(d.id), el('td', { class: 'name' }, d.name || nameOf(d.id) || '—'),
    el('td', { class: 'num' }, String(d.retries)),
    errorCell(d.error),
    el('td', {},
      el('div', { class: 'countdown', 'data-testid': 'runat-countdown', 'data-deadline': d.runAt,
        'data-kind': 'runat', title: new Date(d.runAt).toLocaleString() },
      el('span', { class: 'left' })))))
    : [emptyRow(5, 'Nothing is scheduled.')]));
  meta('delayed-meta', rows.length, Math.max(view.counts.delayed, rows.length));
}

function renderDead() {
  const rows = top(view.dead, (a, b) => b.deadAt - a.deadAt);
  $('dlq-body').replaceChildren(...(rows.length ? rows.map((d) => {
    const busy = view.retrying.has(d.id);
    const sent = view.retried.has(d.id);
    return el('tr', { 'data-testid': 'dlq-row', 'data-task-id': d.id },
      idCell(d.id), el('td', { class: 'name' }, d.name || nameOf(d.id) || '—'),
      el('td', { class: 'num' }, String(d.retries)),
      el('td', { class: 'since', 'data-since': d.deadAt, title: new Date(d.deadAt).toLocaleString() }),
      errorCell(d.error),
      el('td', { class: 'action' }, el('button', {
        type: 'button', class: 'retry', 'data-testid': 'retry-button', disabled: busy || sent,
        onclick: (e) => retry(d.id, e.currentTarget),
      }, sent ? 'Sent' : busy ? 'Retrying…' : 'Retry')));
  }) : [emptyRow(6, 'The dead letter queue is empty.')]));
  meta('dlq-meta', rows.length, Math.max(view.counts.dead, rows.length));
}

function renderEvents() {
  const list = $('events');
  if (view.newRows.length) {
    const fresh = view.newRows.splice(0).slice(-MAX_EVENTS).reverse().map(eventRow);
    list.prepend(...fresh);
    while (list.childElementCount > MAX_EVENTS) list.lastElementChild.remove();
  }
  $('events-empty').hidden = list.childElementCount > 0;
  const now = performance.now();
  while (view.seen.length && now - view.seen[0] > 10000) view.seen.shift();
  const rate = view.seen.length / 10;
  $('events-meta').textContent = rate ? `${rate.toFixed(rate < 10 ? 1 : 0)}/s` : '';
}

function eventRow(d) {
  if (d.gap) {
    return el('li', { class: 'gap-row', 'data-testid': 'gap-row' },
      el('span', {}, `missed events (${d.gap.reason}) · snapshot reloaded`));
  }
  const attempt = d.type === 'leased' && d.retries ? ` · attempt ${d.retries + 1}` : '';
  const detail = d.error || (d.worker ? `by ${d.worker}${attempt}` : '') || d.name || '';
  return el('li', {
    class: `event${d.error ? ' has-error' : ''}`, 'data-testid': 'event-row',
    'data-seq': d.seq, 'data-epoch': epochOf(d), 'data-type': d.type, 'data-task-id': d.task,
  },
  el('time', { datetime: new Date(d.ts).toISOString() }, clockTime(d.ts)),
  el('span', { class: `badge type-${d.type}` }, d.type),
  el('code', { class: 'task', title: d.task }, d.task),
  el('span', { class: `state state-${d.state}`, 'data-testid': 'event-state' }, d.state),
  el('span', { class: `detail${d.error ? ' error' : ''}`, title: detail }, detail));
}

function renderFooter() {
  $('position').textContent = view.lastId ? `feed at ${view.lastId.split('.')[1] ?? ''}` +
    ` · epoch ${view.lastId.split('.')[0]}` : 'feed at the start';
  const off = Math.round(view.offset);
  $('clock').textContent = `server clock ${off >= 0 ? '+' : '−'}${Math.abs(off)} ms`;
}

function clockTime(ms) {
  const t = new Date(ms);
  const two = (n) => String(n).padStart(2, '0');
  return `${two(t.getHours())}:${two(t.getMinutes())}:${two(t.getSeconds())}` +
    `.${String(t.getMilliseconds()).padStart(3, '0')}`;
}

function seconds(ms) {
  const s = ms / 1000;
  const two = (n) => String(Math.floor(n)).padStart(2, '0');
  if (s < 60) return `${s.toFixed(1)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${two(s % 60)}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${two((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${two((s % 86400) / 3600)}h`;
}

// Countdowns run on the server's clock: this browser's clock plus the measured offset.
function tick() {
  const now = Date.now() + view.offset;
  for (const node of document.querySelectorAll('[data-deadline]')) {
    const left = Number(node.dataset.deadline) - now;
    const label = node.querySelector('.left');
    if (node.dataset.kind === 'lease') {
      label.textContent = left > 0 ? seconds(left) : 'expired';
      const total = Number(node.dataset.total) || Math.max(left, 1);
      if (!node.dataset.total) node.dataset.total = String(total);
      const fraction = Math.max(0, Math.min(1, left / total));
      node.querySelector('.fill').style.width = `${(fraction * 100).toFixed(1)}%`;
      node.dataset.urgency = left <= 0 ? 'expired' : fraction < 0.25 ? 'low' : 'ok';
    } else {
      label.textContent = left > 0 ? `in ${seconds(left)}` : 'due now';
      node.dataset.urgency = left > 0 ? 'ok' : 'due';
    }
  }
  for (const node of document.querySelectorAll('[data-since]')) {
    const ago = now - Number(node.dataset.since);
    node.textContent = Number(node.dataset.since) ? `${seconds(Math.max(0, ago))} ago` : '—';
  }
}

// ---------------------------------------------------------------- notices and actions

function setConn(state) {
  const node = $('conn');
  node.dataset.state = state;
  node.textContent = state;
}

function showGap(gap) {
  const seq = /^\d+\.(\d+)\.\d+$/.exec(gap.requested || '');
  const asked = seq ? `after #${seq[1]}` : gap.requested ? `from ${gap.requested}` : 'from the start';
  const kept = gap.first_available > gap.head ? 'the log is empty'
    : `the log keeps #${gap.first_available}–#${gap.head}`;
  $('gap-text').replaceChildren(
    el('strong', {}, `missed events: ${gap.reason} — reloaded a fresh snapshot`),
    el('span', { class: 'notice-detail' }, ` · asked ${asked}; ${kept}`));
  $('gap-notice').hidden = false;
}

function showError(text) {
  const node = $('error-notice');
  node.textContent = text;
  node.hidden = false;
}

function hideError() {
  $('error-notice').hidden = true;
}

function toast(text, ok) {
  const node = el('div', { class: `toast ${ok ? 'ok' : 'bad'}`, 'data-testid': 'retry-result',
    'data-ok': ok ? 'true' : 'false', role: 'status' }, text);
  $('toasts').append(node);
  setTimeout(() => node.classList.add('leaving'), 4000);
  setTimeout(() => node.remove(), 4400);
}

async function retry(id, button) {
  view.retrying.add(id);
  button.disabled = true;
  button.textContent = 'Retrying…';
  try {
    const response = await fetch(`api/dlq/${q(id)}/retry?queue=${q(view.queue)}`, {
      method: 'POST', credentials: 'same-origin', headers: { 'X-Taskq-Request': '1' },
    });
    const body = await response.json().catch(() => ({}));
    if (response.ok) {
      view.retried.add(id);
      toast(`Sent ${id} back to ready`, true);
    } else {
      toast(`Retry of ${id} refused: ${body.error || response.status}`, false);
    }
  } catch (err) {
    toast(`Retry of ${id} failed: ${err.message}`, false);
  } finally {
    view.retrying.delete(id);
    view.dirty.add('dead');
    schedule();
  }
}

// ---------------------------------------------------------------- start

async function start(queue) {
  closeStream();
  view.queue = queue;
  view.loadId++;
  Object.assign(view, { epoch: '', floor: 0, buffer: [], newRows: [], seen: [], stale: false });
  view.leased.clear(); view.delayed.clear(); view.dead.clear();
  view.retried.clear();
  $('events').replaceChildren();
  $('gap-notice').hidden = true;
  $('queue').value = queue;
  const url = new URL(window.location.href);
  url.searchParams.set('queue', queue);
  window.history.replaceState(null, '', url);
  const snap = await loadSnapshot();
  if (view.queue !== queue) return;
  openStream(snap ? snap.position : '');
}

async function main() {
  const wanted = new URLSearchParams(window.location.search).get('queue');
  if (wanted) view.queue = wanted;
  const names = await loadQueues();
  $('queue').addEventListener('change', (e) => start(e.target.value));
  $('gap-close').addEventListener('click', () => { $('gap-notice').hidden = true; });
  setInterval(tick, TICK_MS);
  setInterval(() => { if (!view.loading) { loadSnapshot(); loadQueues(); } }, RESYNC_MS);
  await start(wanted || names[0] || 'default');
}

main();
