// A run's progress as the page shows it: a bar with its percent and what the run said it
// is doing, and the event list's folding of a run's reports into one row.

import { shown } from './shown.js';

// How far, from the thousandths the server keeps: rounded down, so a run at 99.9% does
// not read as done.
export const percent = (permille) => `${Math.floor(permille / 10)}%`;

function span(className, testid = '') {
  const node = document.createElement('span');
  node.className = className;
  if (testid) node.dataset.testid = testid;
  return node;
}

// Draws into `box` the bar of a run at `permille` (0 to 1000) saying `message`, or '—'
// for a run that has said nothing (null). An existing bar is moved, not drawn again, so
// its width glides from one report to the next.
export function drawProgress(box, permille, message) {
  box.dataset.permille = permille == null ? '' : String(permille);
  if (permille == null) {
    box.replaceChildren('—');
    box.removeAttribute('title');
    return;
  }
  let bar = box.querySelector('.progress');
  if (!bar) {
    bar = span('progress', 'progress');
    const line = span('progress-line');
    const track = span('track');
    track.append(span('fill'));
    line.append(track, span('pct', 'progress-percent'));
    bar.append(line, span('progress-message', 'progress-message'));
    bar.setAttribute('role', 'progressbar');
    bar.setAttribute('aria-valuemin', '0');
    bar.setAttribute('aria-valuemax', '100');
    box.replaceChildren(bar);
  }
  // Through the CSSOM: the page's CSP allows no style attribute.
  bar.querySelector('.fill').style.width = `${permille / 10}%`;
  bar.querySelector('.pct').textContent = percent(permille);
  bar.setAttribute('aria-valuenow', String(Math.floor(permille / 10)));
  const said = bar.querySelector('.progress-message');
  said.textContent = shown(message ?? '');
  said.hidden = !message;
  box.title = message ? `${percent(permille)} · ${shown(message)}` : percent(permille);
}

// A run reports up to four times a second: listed one by one, a few running tasks'
// reports would push every other event off the list. So a report takes the place of its
// run's previous one if no other event of the task (heartbeats aside) nor a gap came
// between, counting the reports it stands for (`reports`).

// `rows` (oldest first) with each run's reports in a row folded into the last of them.
export function foldReports(rows) {
  const kept = [];
  const latest = new Map(); // task -> the index in `kept` of its latest event but heartbeats
  for (const d of rows) {
    if (d.gap) latest.clear();
    if (d.gap || d.type === 'heartbeat') {
      kept.push(d);
      continue;
    }
    const at = latest.get(d.task);
    const prev = at === undefined ? null : kept[at];
    if (d.type === 'progress' && prev && prev.type === 'progress' && prev.token === d.token) {
      kept[at] = null;
      kept.push({ ...d, reports: (prev.reports || 1) + 1 });
    } else {
      kept.push(d);
    }
    latest.set(d.task, kept.length - 1);
  }
  return kept.filter(Boolean);
}

// The mark of a row that stands for `reports` reports, hidden while it stands for one.
export function foldedMark(reports = 1) {
  const mark = span('badge folded', 'folded');
  setFolded(mark, reports);
  return mark;
}

function setFolded(mark, reports) {
  mark.textContent = reports > 1 ? `×${reports}` : '';
  mark.title = `${reports} reports of this run in a row; the latest shown`;
  mark.hidden = reports < 2;
  mark.closest('[data-type]')?.setAttribute('data-folded', String(reports));
}

// Folds the report `row` (not yet in `list`, which is newest first) into the run's
// previous report listed, as `foldReports` does within one batch.
export function foldProgress(list, row) {
  const task = CSS.escape(row.dataset.taskId);
  const before = list.querySelector(
    `:scope > [data-task-id="${task}"]:not([data-type=heartbeat]), :scope > .gap-row`);
  if (!before || before.dataset.type !== 'progress' || before.dataset.token !== row.dataset.token) {
    return;
  }
  before.remove();
  const reports = Number(before.dataset.folded || 1) + Number(row.dataset.folded || 1);
  setFolded(row.querySelector('.folded'), reports);
}
