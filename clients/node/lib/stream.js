// A streamed request: an async iterator of TokenEvents ending in the Completion.
//
// Threading: lives on the event loop of its Client, which pushes the request's events into it
// in order (`_push`, never blocking: events are buffered until read). Iterate it once.
import { completionFrom, tokenEvent } from "./types.js";

export class Stream {
  constructor(client, requestId) {
    this._client = client;
    /** The request's protocol id (what cancel() sends). */
    this.requestId = requestId;
    this._queue = [];
    this._head = 0;
    this._waiter = null;
    this._events = [];
    this._result = null;
    this._ended = false; // the terminal event (final or error) was read
    this._error = null;
  }

  _push(ev) {
    if (this._waiter !== null) {
      const w = this._waiter;
      this._waiter = null;
      w(ev);
    } else {
      this._queue.push(ev);
    }
  }

  _take() {
    if (this._head < this._queue.length) {
      const ev = this._queue[this._head];
      this._queue[this._head++] = undefined;
      if (this._head === this._queue.length) {
        this._queue.length = 0;
        this._head = 0;
      }
      return ev;
    }
    return new Promise((resolve) => { this._waiter = resolve; });
  }

  // The next item: a TokenEvent, or the Completion (then the stream is over); throws the
  // request's TesseraError.
  async _next() {
    const ev = await this._take();
    if (ev instanceof Error) {
      this._ended = true;
      this._error = ev;
      throw ev;
    }
    if (ev.type === "token") {
      const te = tokenEvent(ev);
      this._events.push(te);
      return te;
    }
    this._ended = true;
    this._result = completionFrom(ev, this._events);
    return this._result;
  }

  /** TokenEvents, then the Completion. Leaving the loop early (break, throw) cancels the
   *  request so the server frees it. */
  async *[Symbol.asyncIterator]() {
    try {
      while (!this._ended) yield await this._next();
    } finally {
      if (!this._ended) this.cancel();
    }
  }

  /** Consumes the rest of the stream and resolves to its Completion. */
  async result() {
    while (!this._ended) await this._next();
    if (this._error !== null) throw this._error;
    return this._result;
  }

  /** Asks the server to stop the request; the stream then ends with a Completion whose
   *  finish_reason is "cancelled" (or its normal end if it finished first). */
  cancel() {
    this._client.cancel(this.requestId);
  }
}
