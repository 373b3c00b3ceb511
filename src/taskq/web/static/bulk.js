// The DLQ's bulk actions: Retry all sends every dead task back to ready, Delete all takes
// them out of the DLQ for good (they end cancelled). Each asks first, naming how many;
// the server acts on at most PER_CALL a press, each task with its own event, which moves
// its row as any other change; the answer says what was done and what is left.

import { postJSON } from './http.js';
import { view } from './model.js';
import { toast } from './render.js';

// Dead tasks one press acts on at most (taskq.bulk's BULK_LIMIT default).
const PER_CALL = 1000;

const $ = (id) => document.getElementById(id);
const q = encodeURIComponent;

const tasks = (n) => `${n.toLocaleString()} task${n === 1 ? '' : 's'}`;

const ACTIONS = {
  retry: {
    path: 'retry-all', button: 'dlq-retry-all', label: 'Retry all', doing: 'Retrying…',
    ask: (which) => `Send ${which} back to ready, their retries reset?`,
    did: (n) => `Sent ${tasks(n)} back to ready`,
  },
  cancel: {
    path: 'cancel-all', button: 'dlq-cancel-all', label: 'Delete all', doing: 'Deleting…',
    ask: (which) => `Delete ${which} from the dead letter queue for good? `
      + 'They end cancelled: this cannot be undone.',
    did: (n) => `Deleted ${tasks(n)} from the dead letter queue`,
  },
};

let busy = ''; // the action sent and not yet answered
// Reads the queue afresh: the page holds the first rows of a large DLQ only, and those
// left after a press are past them.
let refill = () => {};

// The dead tasks a press acts on, in words.
function which(dead) {
  if (dead > PER_CALL) {
    return `the first ${PER_CALL.toLocaleString()} of ${dead.toLocaleString()} dead tasks`;
  }
  return dead === 1 ? 'the 1 dead task' : `all ${dead.toLocaleString()} dead tasks`;
}

function outcome(action, { done, missed, left }) {
  return [
    action.did(done.length),
    missed.length ? `${tasks(missed.length)} had left it already` : '',
    left > 0 ? `${left.toLocaleString()} left: press again` : '',
  ].filter(Boolean).join(' · ');
}

async function run(kind) {
  const action = ACTIONS[kind];
  // A dismissed question sends nothing.
  if (busy || !window.confirm(action.ask(which(view.counts.dead)))) return;
  busy = kind;
  drawBulk();
  try {
    const { ok, status, body } = await postJSON(`api/dlq/${action.path}?queue=${q(view.queue)}`);
    if (ok) {
      toast(outcome(action, body), true, 'bulk-result');
      if (body.left > 0) refill();
    } else {
      toast(`${action.label} refused: ${body.error || status}`, false, 'bulk-result');
    }
  } catch (err) {
    toast(`${action.label} failed: ${err.message}`, false, 'bulk-result');
  } finally {
    busy = '';
    drawBulk();
  }
}

// The buttons, off while the DLQ is empty or an action is on its way.
export function drawBulk() {
  for (const [kind, action] of Object.entries(ACTIONS)) {
    const button = $(action.button);
    button.disabled = Boolean(busy) || view.counts.dead === 0;
    button.textContent = busy === kind ? action.doing : action.label;
  }
}

// `reload()` reads the queue afresh.
export function initBulk(reload) {
  refill = reload;
  for (const [kind, action] of Object.entries(ACTIONS)) {
    $(action.button).addEventListener('click', () => run(kind));
  }
  drawBulk();
}
