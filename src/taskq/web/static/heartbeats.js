// The event list's heartbeat filter. A heartbeat only says a running task's lease was
// renewed, a few times a lease for every running task: shown, heartbeats would crowd
// out the events that change something. They are hidden unless asked for, and the
// choice is kept in this browser.

const KEY = 'taskq.showHeartbeats';

const $ = (id) => document.getElementById(id);

// Storage can be off (a private window, a policy): the filter then lasts for the page.
function stored() {
  try {
    return localStorage.getItem(KEY) !== '1';
  } catch {
    return true;
  }
}

function store(hide) {
  try {
    localStorage.setItem(KEY, hide ? '0' : '1');
  } catch {
    // Kept for this page only.
  }
}

export function hidingHeartbeats() {
  return $('events').classList.contains('hide-heartbeats');
}

// `changed()` is called when the user turns the filter on or off.
export function initHeartbeatFilter(changed) {
  const box = $('hide-heartbeats');
  box.checked = stored();
  $('events').classList.toggle('hide-heartbeats', box.checked);
  box.addEventListener('change', () => {
    store(box.checked);
    $('events').classList.toggle('hide-heartbeats', box.checked);
    changed();
  });
}
