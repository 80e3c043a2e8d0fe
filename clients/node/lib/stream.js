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
    this._resultGiven = false; // the Completion was handed out by the iterator
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

  // The next iterator result: {value: TokenEvent | Completion, done: false}, then {done: true};
  // rejects with the request's TesseraError. One promise per event (no async-generator hops).
  _nextResult() {
    if (this._ended) return Promise.resolve(this._error !== null ? { value: undefined, done: true } : this._last());
    if (this._head < this._queue.length) {
      const ev = this._queue[this._head];
      this._queue[this._head++] = undefined;
      if (this._head === this._queue.length) {
        this._queue.length = 0;
        this._head = 0;
      }
      try {
        return Promise.resolve(this._accept(ev));
      } catch (e) {
        return Promise.reject(e);
      }
    }
    return new Promise((resolve, reject) => {
      this._waiter = (ev) => {
        try {
          resolve(this._accept(ev));
        } catch (e) {
          reject(e);
        }
      };
    });
  }

  // After the terminal event: the Completion once, then done.
  _last() {
    if (this._resultGiven) return { value: undefined, done: true };
    this._resultGiven = true;
    return { value: this._result, done: false };
  }

  _accept(ev) {
    if (ev instanceof Error) {
      this._ended = true;
      this._error = ev;
      throw ev;
    }
    if (ev.type === "token") {
      const te = tokenEvent(ev);
      this._events.push(te);
      return { value: te, done: false };
    }
    this._ended = true;
    this._result = completionFrom(ev, this._events);
    return this._last();
  }

  /** TokenEvents, then the Completion. Leaving the loop early (break, throw) cancels the
   *  request so the server frees it. */
  [Symbol.asyncIterator]() {
    return {
      next: () => this._nextResult(),
      return: () => {
        if (!this._ended) this.cancel();
        this._resultGiven = true;
        return Promise.resolve({ value: undefined, done: true });
      },
      [Symbol.asyncIterator]() {
        return this;
      },
    };
  }

  /** Consumes the rest of the stream and resolves to its Completion. */
  async result() {
    while (!this._ended) await this._nextResult();
    if (this._error !== null) throw this._error;
    return this._result;
  }

  /** Asks the server to stop the request; the stream then ends with a Completion whose
   *  finish_reason is "cancelled" (or its normal end if it finished first). */
  cancel() {
    this._client.cancel(this.requestId);
  }
}
