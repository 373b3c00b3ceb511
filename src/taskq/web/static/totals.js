// The lifetime totals strip: tasks enqueued, completed, failed, dead and cancelled over
// the queue's life. The log is trimmed, so only the server's counters (GET /api/totals)
// know them: the strip reloads them, never counting locally, when an event that a total
// counts arrives (a burst is answered by one reload), after a gap and at each resync.

import { getJSON } from './http.js';

// Events within this long are answered by one reload.
const RELOAD_MS = 300;
// Event types some total counts (see taskq.web.totals): the rest change none.
const COUNTED = new Set(['enqueued', 'completed', 'failed', 'reaped', 'released', 'cancelled']);

const $ = (id) => document.getElementById(id);
const q = encodeURIComponent;

const strip = {
  queue: '',
  loadId: 0, // a newer load (or another queue) supersedes an older one
  busy: false,
  again: false, // asked while loading: load once more after
  soon: 0, // the RELOAD_MS timer
};

export function loadTotals(queue) {
  if (queue !== strip.queue) {
    clearTimeout(strip.soon);
    Object.assign(strip, { queue, busy: false, again: false, soon: 0 });
    strip.loadId += 1;
    for (const node of document.querySelectorAll('#totals output[data-total]')) node.textContent = '–';
  }
  load();
}

export function totalsEvent(data) {
  if (COUNTED.has(data.type)) reloadTotals();
}

export function reloadTotals() {
  if (strip.soon) return;
  strip.soon = setTimeout(() => {
    strip.soon = 0;
    load();
  }, RELOAD_MS);
}

async function load() {
  if (strip.busy) {
    strip.again = true;
    return;
  }
  const loadId = strip.loadId;
  strip.busy = true;
  try {
    const body = await getJSON(`api/totals?queue=${q(strip.queue)}`);
    if (loadId === strip.loadId) draw(body.totals);
  } catch (err) {
    if (loadId === strip.loadId) $('totals').title = `could not load the totals: ${err.message}`;
  } finally {
    if (loadId === strip.loadId) {
      strip.busy = false;
      if (strip.again) {
        strip.again = false;
        load();
      }
    }
  }
}

function draw(totals) {
  for (const node of document.querySelectorAll('#totals output[data-total]')) {
    const n = totals[node.dataset.total];
    node.textContent = n == null ? '–' : n.toLocaleString();
  }
  $('totals').title = 'over the queue\'s whole life, from the server\'s counters';
}
