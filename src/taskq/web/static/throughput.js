// The last minute's rates beside the lifetime totals: tasks completed and attempts
// failed per minute, counted by the server from the newest end of the queue's event
// log (GET /api/throughput). Reloaded every few seconds, not on each event: a reading
// scans the log, and a rate moves slowly anyway.

import { Reloader } from './reloader.js';

const MINUTE_MS = 60000;

const $ = (id) => document.getElementById(id);
const q = encodeURIComponent;

const rates = new Reloader((queue) => `api/throughput?queue=${q(queue)}`, draw,
  (message) => { $('rates').title = message; });

export function loadThroughput(queue) {
  if (rates.switchTo(queue)) {
    for (const node of document.querySelectorAll('#rates output')) node.textContent = '–';
  }
  rates.load();
}

export function reloadThroughput() {
  rates.load();
}

export function perMinute(rate) {
  return rate < 10 ? rate.toFixed(1) : Math.round(rate).toLocaleString();
}

function span(ms) {
  if (ms >= MINUTE_MS) return 'minute';
  return ms >= 1000 ? `${(ms / 1000).toFixed(0)} s` : `${ms} ms`;
}

function draw(body) {
  // Shorter than a minute when the log does not reach back that far (a busy queue's
  // minute past the scan's bound, or a log trimmed within it).
  $('rates-label').textContent = `Last ${span(body.window_ms)}`;
  for (const kind of ['completed', 'failed']) {
    const node = document.querySelector(`#rates [data-rate="${kind}"]`);
    node.textContent = `${perMinute(body[`${kind}_per_min`])}/min`;
    node.title = `${body[kind].toLocaleString()} in the last ${span(body.window_ms)}`;
  }
  $('rates').title = 'counted from the newest events of the queue\'s log';
}
