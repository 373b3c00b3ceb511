// A panel that shows what the server holds and reloads it, never counting locally: one
// load at a time (a reload asked for meanwhile runs once after), loads for another
// queue supersede older ones, and the reloads asked for within RELOAD_MS are one.

import { getJSON } from './http.js';

// Reloads asked for within this long are answered by one.
const RELOAD_MS = 150;

export class Reloader {
  // `path`: the API path, given the queue; `draw(body)` shows what came back;
  // `failed(message)` says a load failed.
  constructor(path, draw, failed) {
    Object.assign(this, { path, draw, failed });
    Object.assign(this, { queue: '', loadId: 0, busy: false, again: false, soon: 0 });
  }

  // Shows `queue` from now on: true when it is another queue than before.
  switchTo(queue) {
    if (queue === this.queue) return false;
    Object.assign(this, { queue, busy: false, again: false });
    this.loadId += 1;
    return true;
  }

  soonAgain() {
    if (this.soon) return;
    this.soon = setTimeout(() => {
      this.soon = 0;
      this.load();
    }, RELOAD_MS);
  }

  async load() {
    if (this.busy) {
      this.again = true;
      return;
    }
    const { loadId } = this;
    this.busy = true;
    try {
      const body = await getJSON(this.path(this.queue));
      if (loadId === this.loadId) this.draw(body);
    } catch (err) {
      if (loadId === this.loadId) this.failed(`could not load: ${err.message}`);
    } finally {
      if (loadId === this.loadId) {
        this.busy = false;
        if (this.again) {
          this.again = false;
          this.load();
        }
      }
    }
  }
}
