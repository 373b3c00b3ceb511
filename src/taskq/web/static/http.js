// Reading the server's JSON API: same-origin, never cached, given up on after a while.

// A request that hangs would hold the page back; give up and try again later.
export const FETCH_TIMEOUT_MS = 10000;

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
