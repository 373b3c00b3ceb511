// The history panel: the queue's recently ended tasks, newest first (GET /api/history),
// searched by how they ended, the start of their id and a part of their name. The server
// reads them from the event log, so the panel never adds a row itself: it reloads on a
// timer, and when the search changes (once typing pauses).

import { Reloader } from './reloader.js';
import { el, replaceKeepingFocus, taskLink, tick } from './render.js';

const STATES = ['completed', 'dead', 'cancelled'];
// Typing in a search box is answered once it pauses this long.
const TYPING_MS = 300;
// Tasks listed at most: the newest ones that match.
const LIMIT = 50;

const $ = (id) => document.getElementById(id);
const q = encodeURIComponent;

// What the search asks for, as the query it sends.
function query(queue) {
  const states = STATES.filter((state) => $(`history-${state}`).checked);
  return `queue=${q(queue)}&state=${states.join(',')}&prefix=${q($('history-prefix').value)}`
    + `&name=${q($('history-name').value)}&limit=${LIMIT}`;
}

// The query of the load in flight: an answer to an older search is not drawn, its
// newer one follows (Reloader loads once more after).
let asked = '';

const panel = new Reloader((queue) => {
  asked = query(queue);
  return `api/history?${asked}`;
}, draw, (message) => { $('history-meta').textContent = message; });
let typing = 0;

export function loadHistory(queue) {
  if (panel.switchTo(queue)) {
    $('history-body').replaceChildren();
    $('history-meta').textContent = '';
  }
  reloadHistory();
}

export function reloadHistory() {
  panel.load();
}

// At least one way of ending stays chosen: the one left cannot be unticked.
function keepOneState() {
  const ticked = STATES.filter((state) => $(`history-${state}`).checked);
  for (const state of STATES) {
    $(`history-${state}`).disabled = ticked.length === 1 && ticked[0] === state;
  }
}

export function initHistory() {
  for (const state of STATES) {
    $(`history-${state}`).addEventListener('change', () => {
      keepOneState();
      reloadHistory();
    });
  }
  for (const box of ['history-prefix', 'history-name']) {
    $(box).addEventListener('input', () => {
      clearTimeout(typing);
      typing = setTimeout(reloadHistory, TYPING_MS);
    });
  }
  // Enter searches at once rather than sending the form.
  $('history-search').addEventListener('submit', (e) => {
    e.preventDefault();
    clearTimeout(typing);
    reloadHistory();
  });
}

function draw(body) {
  if (asked !== query(panel.queue)) return;
  const searched = $('history-prefix').value || $('history-name').value
    || STATES.some((state) => !$(`history-${state}`).checked);
  replaceKeepingFocus($('history-body'), body.tasks.length ? body.tasks.map(row)
    : [el('tr', { class: 'empty-row' }, el('td', { colspan: 6 }, searched
      ? 'No ended task matches this search.' : 'No task has ended on this queue lately.'))]);
  const reach = body.complete ? 'the whole log'
    : `the newest ${body.scanned.toLocaleString()} events`;
  $('history-meta').textContent = `${body.tasks.length} found in ${reach}`;
  tick(); // fills the new rows' "ago" now rather than at the next tick
}

function row(t) {
  return el('tr', { 'data-testid': 'history-row', 'data-task-id': t.task_id,
    'data-state': t.state },
  el('td', { class: 'since', 'data-since': t.ended_at, title: new Date(t.ended_at).toLocaleString() }),
  el('td', { class: 'id', title: t.task_id }, el('code', {}, taskLink(t.task_id))),
  el('td', { class: 'name', title: t.name }, t.name || '—'),
  el('td', {}, el('span', { class: `state state-${t.state}`, 'data-testid': 'history-state' },
    t.state)),
  el('td', { class: 'num' }, String(t.retries)),
  t.last_error ? el('td', { class: 'error', title: t.last_error }, el('span', {}, t.last_error))
    : el('td', { class: 'none' }, '—'));
}
