// Results and events of the client API (docs/protocol.md "token", "final", "heartbeat").
// Data fields keep the protocol's names (snake_case), as the Python client does.

/** One `token` event: new token ids and the text that became visible with them (may be ""). */
export class TokenEvent {
  constructor(requestId, tokens, text, logprobs, topLogprobs) {
    this.type = "token";
    this.request_id = requestId;
    this.tokens = tokens;
    this.text = text;
    this.logprobs = logprobs;          // number[] | null (null unless asked)
    this.top_logprobs = topLogprobs;   // {token, logprob}[][] | null
  }
}

/** The outcome of a completion or chat. For a stream, text/tokens/logprobs are the
 *  concatenation of its token events, so streamed and non-streamed results compare equal. */
export class Completion {
  constructor(requestId, text, tokens, finishReason, usage, timings, logprobs, topLogprobs) {
    this.type = "final";
    this.request_id = requestId;
    this.text = text;
    this.tokens = tokens;
    this.finish_reason = finishReason; // "stop" | "length" | "cancelled"
    this.usage = usage;
    this.timings = timings;
    this.logprobs = logprobs;
    this.top_logprobs = topLogprobs;
  }
}

function top(v) {
  if (v == null) return null;
  return v.map((alts) => alts.map((t) => ({ token: Number(t.token), logprob: Number(t.logprob) })));
}

function floats(v) {
  return v == null ? null : v.map(Number);
}

export function tokenEvent(msg) {
  return new TokenEvent(Number(msg.id ?? 0), msg.tokens ?? [], msg.text ?? "", floats(msg.logprobs),
                        top(msg.top_logprobs));
}

function usageFrom(u = {}) {
  return {
    prompt_tokens: Number(u.prompt_tokens ?? 0),
    completion_tokens: Number(u.completion_tokens ?? 0),
    cached_tokens: Number(u.cached_tokens ?? 0),
    // Preference provenance (docs/api.md "Preference injection"); null without a preference.
    preference_source: u.preference_source ?? null,
    preference_kv_bytes: u.preference_kv_bytes == null ? null : Number(u.preference_kv_bytes),
    preference_transfer_ms: u.preference_transfer_ms == null ? null : Number(u.preference_transfer_ms),
  };
}

function timingsFrom(t = {}) {
  return {
    queue_ms: Number(t.queue_ms ?? 0), ttft_ms: Number(t.ttft_ms ?? 0),
    decode_ms: Number(t.decode_ms ?? 0), total_ms: Number(t.total_ms ?? 0),
  };
}

/** A Completion from a `final`; with `events` (a stream) text/tokens/logprobs are theirs. */
export function completionFrom(msg, events = null) {
  const rid = Number(msg.id ?? 0);
  const reason = String(msg.finish_reason ?? "");
  const usage = usageFrom(msg.usage ?? undefined);
  const timings = timingsFrom(msg.timings ?? undefined);
  if (events === null) {
    return new Completion(rid, msg.text ?? "", msg.tokens ?? [], reason, usage, timings,
                          floats(msg.logprobs), top(msg.top_logprobs));
  }
  let text = "";
  const tokens = [];
  let lps = null;
  let tops = null;
  for (const e of events) {
    text += e.text;
    for (const t of e.tokens) tokens.push(t);
    if (e.logprobs !== null) lps = (lps ?? []).concat(e.logprobs);
    if (e.top_logprobs !== null) tops = (tops ?? []).concat(e.top_logprobs);
  }
  return new Completion(rid, text, tokens, reason, usage, timings, lps, tops);
}

/** What the frontend's heartbeat reply says about the served model (null: not reported yet). */
export function limitsFrom(msg, endpoint) {
  const opt = (k) => (msg[k] == null ? null : Number(msg[k]));
  return {
    model: String(msg.model ?? msg.name ?? ""),
    protocol_version: Number(msg.protocol_version ?? 1),
    context_length: opt("context_length"),
    page_size: opt("page_size"),
    max_prompt_tokens: opt("max_prompt_tokens"),
    vocab_size: opt("vocab_size"),
    default_max_tokens: opt("default_max_tokens"),
    live_workers: Number(msg.live_workers ?? 0),
    running: Number(msg.running ?? 0),
    waiting: Number(msg.waiting ?? 0),
    endpoint,
    raw: msg,
  };
}
