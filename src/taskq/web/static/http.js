// The server's JSON API: reads and writes, same-origin, never cached, given up on after
// a while.

// A request that hangs would hold the page back; give up and try again later.
const FETCH_TIMEOUT_MS = 10000;

export async function getJSON(url) {
  const response = await fetch(url, {
    credentials: 'same-origin', cache: 'no-store', signal: AbortSignal.timeout(FETCH_TIMEOUT_MS),
  });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const hint = response.status === 401 ? ' (open /?token=<token> once to sign in)' : '';
    throw new Error(`${body.error || response.statusText || response.status}${hint}`);
  }
  return body;
}

// A write: the X-Taskq-Request header, which no cross-site form can send, tells the
// server a script of this page sent it. Resolves to the status and the JSON body.
export async function postJSON(url) {
  const response = await fetch(url, {
    method: 'POST',
    credentials: 'same-origin',
    headers: { 'X-Taskq-Request': '1' },
    signal: AbortSignal.timeout(FETCH_TIMEOUT_MS),
  });
  const body = await response.json().catch(() => ({}));
  return { ok: response.ok, status: response.status, body };
}
