// Client over one DEALER connection to a Tessera frontend (docs/protocol.md "Client API").
//
// Ownership and threading: a Client owns one zeromq Dealer socket (replaced on failover) and
// lives on the Node.js event loop that created it; all its callbacks run there. Any number of
// requests may be in flight at once; replies are matched by `id`. Invariants: every request
// submitted ends with exactly one terminal delivery — its `final`, an `error` from the frontend,
// its deadline (Timeout, after a `cancel` was sent), a dead frontend (PeerDead), a full send
// queue (Unavailable) or close() (ClientClosed) — so no promise and no stream hangs.
import * as zmq from "zeromq";
import { Decoder, Encoder } from "@msgpack/msgpack";

import { BadRequest, ClientClosed, InternalError, PeerDead, Timeout, Unavailable, errorFor } from "./errors.js";
import { completionFrom, limitsFrom } from "./types.js";
import { Stream } from "./stream.js";
import { kvPolicyWire } from "./kv_policy.js";

/** Request fields a caller may set (docs/protocol.md "completion and chat"), besides
 *  prompt/prompt_tokens/messages. `logit_bias` may also be a {token: bias} object or a Map;
 *  `kv_policy` is normalized by kvPolicyWire (kv_policy.js: the HTTP API's defaults filled in). */
export const OPTION_KEYS = Object.freeze([
  "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
  "presence_penalty", "frequency_penalty", "seed", "logit_bias", "logprobs", "top_logprobs",
  "stop", "stop_token_ids", "ignore_eos", "user", "preference", "preference_alpha",
  "priority", "routing_key", "cache_salt", "api_key", "kv_policy",
]);
const OPTION_SET = new Set(OPTION_KEYS);
/** Client-side per-request options (never sent). */
const LOCAL_KEYS = new Set(["timeoutMs", "signal"]);

export const DEFAULT_HEARTBEAT_INTERVAL_MS = 500;
export const DEFAULT_DEAD_AFTER_MS = 1500;

const encoder = new Encoder({ ignoreUndefined: true, useBigInt64: true });
const decoder = new Decoder();

function closedError(rid = 0) {
  return new ClientClosed(0, "closed", "the client is closed", rid);
}

function logitBias(v) {
  if (Array.isArray(v)) return v;
  const entries = v instanceof Map ? [...v.entries()] : Object.entries(v);
  return entries.map(([t, b]) => ({ token: Number(t), bias: Number(b) }));
}

export class Client {
  /**
   * @param endpoints one "tcp://host:port" or a list tried in order (failover on a dead frontend)
   * @param options heartbeatIntervalMs (500), deadAfterMs (1500), timeoutMs (default per-request
   *   deadline; null = none), apiKey (sent as `api_key` with every completion/chat),
   *   sendHighWaterMark (1000 messages queued toward an unreachable frontend before Unavailable)
   */
  constructor(endpoints, options = {}) {
    this.endpoints = typeof endpoints === "string" ? [endpoints] : [...endpoints];
    if (this.endpoints.length === 0) throw new BadRequest(100, "invalid_argument", "at least one endpoint is needed");
    for (const e of this.endpoints) {
      if (typeof e !== "string" || !/^(tcp|ipc|inproc):\/\/.+/.test(e)) {
        throw new BadRequest(100, "invalid_argument", `endpoint ${JSON.stringify(e)} is not tcp://host:port (or ipc://, inproc://)`);
      }
    }
    this.heartbeatIntervalMs = options.heartbeatIntervalMs ?? DEFAULT_HEARTBEAT_INTERVAL_MS;
    this.deadAfterMs = options.deadAfterMs ?? DEFAULT_DEAD_AFTER_MS;
    if (!(this.heartbeatIntervalMs > 0 && this.deadAfterMs > this.heartbeatIntervalMs)) {
      throw new BadRequest(100, "invalid_argument", "need 0 < heartbeatIntervalMs < deadAfterMs");
    }
    this.timeoutMs = options.timeoutMs ?? null;
    this.apiKey = options.apiKey ?? null;
    this._hwm = options.sendHighWaterMark ?? 1000;
    this._nextId = 1; // id 0 is reserved by the protocol
    this._pending = new Map(); // id -> {sink, timer, done}
    this._closed = false;
    this._index = 0;
    this._limits = null;
    this._limitsWaiters = [];
    /** How many times a dead frontend made the client move to the next endpoint. */
    this.failovers = 0;
    this._connect();
    this._timer = setInterval(() => this._tick(), this.heartbeatIntervalMs);
  }

  /** The endpoint in use now (it changes on failover). */
  get endpoint() {
    return this.endpoints[this._index];
  }

  /** The number of requests in flight. */
  get inFlight() {
    return this._pending.size;
  }

  /** The served model's limits from the frontend's heartbeat reply (waits for one). */
  limits(timeoutMs = 5000) {
    if (this._closed) return Promise.reject(closedError());
    if (this._limits) return Promise.resolve(limitsFrom(this._limits, this.endpoint));
    return new Promise((resolve, reject) => {
      const w = { resolve, reject };
      w.timer = setTimeout(() => {
        this._limitsWaiters = this._limitsWaiters.filter((x) => x !== w);
        reject(new Unavailable(400, "unavailable",
                               `no heartbeat reply from ${this.endpoints.join(", ")} within ${timeoutMs} ms`));
      }, timeoutMs);
      this._limitsWaiters.push(w);
    });
  }

  /** A completion of `prompt` (text, or an array of token ids), waited for. */
  async complete(prompt, options = {}) {
    return this._result("completion", completionFields(prompt), options);
  }

  /** A chat completion of `messages` ({role, content} objects), waited for. */
  async chat(messages, options = {}) {
    return this._result("chat", chatFields(messages), options);
  }

  /** A streamed completion: `for await (const ev of stream)` gives TokenEvents, then the Completion. */
  streamComplete(prompt, options = {}) {
    return this._stream("completion", completionFields(prompt), options);
  }

  /** A streamed chat completion. */
  streamChat(messages, options = {}) {
    return this._stream("chat", chatFields(messages), options);
  }

  /** Cancels a request in flight (unknown or finished ids are ignored). Its outcome is a
   *  Completion with finish_reason "cancelled". */
  cancel(requestId) {
    if (this._pending.has(requestId)) this._sendRaw({ v: 1, type: "cancel", id: requestId });
  }

  /** Ends every request in flight with ClientClosed and closes the socket. */
  async close() {
    if (this._closed) return;
    this._closed = true;
    clearInterval(this._timer);
    this._failAll((rid) => closedError(rid));
    for (const w of this._limitsWaiters.splice(0)) {
      clearTimeout(w.timer);
      w.reject(closedError());
    }
    this._sock.close();
  }

  async [Symbol.asyncDispose ?? Symbol.for("Symbol.asyncDispose")]() {
    await this.close();
  }

  // ---- requests ----

  _body(kind, rid, stream, fields, options) {
    const body = { v: 1, type: kind, id: rid, stream, ...fields };
    for (const [k, v] of Object.entries(options)) {
      if (LOCAL_KEYS.has(k)) continue;
      if (!OPTION_SET.has(k)) throw new BadRequest(100, "invalid_argument", `unknown request option: ${k}`);
      if (v === undefined || v === null) continue;
      body[k] = k === "logit_bias" ? logitBias(v) : k === "kv_policy" ? kvPolicyWire(v) : v;
    }
    if (this.apiKey !== null && body.api_key === undefined) body.api_key = this.apiKey;
    return body;
  }

  _result(kind, fields, options) {
    const rid = this._nextId++;
    const body = this._body(kind, rid, false, fields, options);
    return new Promise((resolve, reject) => {
      this._submit(rid, body, (ev) => (ev instanceof Error ? reject(ev) : ev.type === "final" && resolve(completionFrom(ev))),
                   options);
    });
  }

  _stream(kind, fields, options) {
    const rid = this._nextId++;
    const body = this._body(kind, rid, true, fields, options);
    const s = new Stream(this, rid);
    this._submit(rid, body, (ev) => s._push(ev), options);
    return s;
  }

  // Sends `body` and routes the request's events to `sink` until its terminal one.
  _submit(rid, body, sink, options) {
    if (this._closed) {
      queueMicrotask(() => sink(closedError(rid)));
      return;
    }
    const p = { sink, timer: null, signal: options.signal ?? null, onAbort: null };
    this._pending.set(rid, p);
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    if (timeoutMs !== null && timeoutMs !== undefined) p.timer = setTimeout(() => this._expire(rid), timeoutMs);
    this._sendRaw(body, rid);
    if (p.signal) {
      p.onAbort = () => this.cancel(rid);
      if (p.signal.aborted) p.onAbort(); // a cancel right behind its request always applies
      else p.signal.addEventListener("abort", p.onAbort, { once: true });
    }
  }

  // Ends request `rid` with `ev` (a final or an error) if it is still pending.
  _finish(rid, ev) {
    const p = this._pending.get(rid);
    if (p === undefined) return;
    this._pending.delete(rid);
    if (p.timer !== null) clearTimeout(p.timer);
    if (p.onAbort !== null) p.signal.removeEventListener("abort", p.onAbort);
    p.sink(ev);
  }

  _expire(rid) {
    if (!this._pending.has(rid)) return;
    this._sendRaw({ v: 1, type: "cancel", id: rid });
    this._finish(rid, new Timeout(203, "deadline_exceeded", `request ${rid} ran past its deadline`, rid));
  }

  _failAll(make) {
    for (const rid of [...this._pending.keys()]) this._finish(rid, make(rid));
  }

  // Never blocks: a message the socket cannot queue (high water mark toward an unreachable
  // frontend) ends request `rid` with Unavailable.
  _sendRaw(msg, rid = 0) {
    const endpoint = this.endpoint;
    const fail = () => {
      if (rid !== 0) {
        this._finish(rid, new Unavailable(400, "unavailable",
                                          `the send queue to ${endpoint} is full (frontend not reachable)`, rid));
      }
    };
    try {
      this._sock.send(encoder.encode(msg)).then(undefined, fail);
    } catch {
      fail();
    }
  }

  // ---- connection ----

  _connect() {
    const sock = new zmq.Dealer({
      linger: 0, sendTimeout: 0, sendHighWaterMark: this._hwm,
      reconnectInterval: 100, reconnectMaxInterval: 1000, // ZeroMQ reconnects with back-off up to 1 s
    });
    sock.connect(this.endpoint);
    this._sock = sock;
    this._lastRx = performance.now(); // a fresh connection gets deadAfterMs to answer
    this._recvLoop(sock);
    this._sendRaw({ v: 1, type: "heartbeat", id: this._nextId++ });
  }

  async _recvLoop(sock) {
    try {
      for await (const frames of sock) {
        if (sock !== this._sock) break;
        this._lastRx = performance.now();
        this._onMessage(frames[frames.length - 1]);
      }
    } catch {
      // the socket was closed (failover or close()): nothing waits on this loop
    }
  }

  _tick() {
    if (this._closed) return;
    try {
      if (performance.now() - this._lastRx > this.deadAfterMs) {
        this._failover();
        return;
      }
      this._sendRaw({ v: 1, type: "heartbeat", id: this._nextId++ });
    } catch (e) {
      // e.g. no socket could be made (out of file descriptors): fail what waits, retry next tick
      this._failAll((rid) => new InternalError(500, "internal", `client connection failed: ${e?.message ?? e}`, rid));
    }
  }

  // The frontend is dead: fail what runs on it and move to the next endpoint.
  _failover() {
    const dead = this.endpoint;
    this._failAll((rid) => new PeerDead(401, "peer_dead",
                                        `frontend ${dead} did not answer heartbeats for ${this.deadAfterMs} ms`, rid));
    const old = this._sock;
    this._index = (this._index + 1) % this.endpoints.length;
    this._limits = null;
    this.failovers += 1;
    this._connect();
    old.close();
  }

  _onMessage(body) {
    let msg;
    try {
      msg = decoder.decode(body);
    } catch {
      return; // an undecodable reply is dropped, as the protocol does
    }
    if (msg === null || typeof msg !== "object") return;
    if (msg.type === "heartbeat") {
      this._limits = msg;
      for (const w of this._limitsWaiters.splice(0)) {
        clearTimeout(w.timer);
        w.resolve(limitsFrom(msg, this.endpoint));
      }
      return;
    }
    const rid = Number(msg.id ?? 0);
    if (msg.type === "token") {
      const p = this._pending.get(rid);
      if (p !== undefined) p.sink(msg);
    } else if (msg.type === "final") {
      this._finish(rid, msg);
    } else if (msg.type === "error") {
      this._finish(rid, errorFor(Number(msg.code ?? 0), String(msg.message ?? ""), String(msg.error ?? ""), rid));
    }
  }
}

function completionFields(prompt) {
  if (typeof prompt === "string") return { prompt };
  if (Array.isArray(prompt)) return { prompt_tokens: prompt.map(Number) };
  throw new BadRequest(100, "invalid_argument", "prompt must be a string or an array of token ids");
}

function chatFields(messages) {
  if (!Array.isArray(messages)) throw new BadRequest(100, "invalid_argument", "messages must be an array");
  return { messages: messages.map((m) => ({ role: m.role, content: m.content })) };
}
