// TypeScript declarations of tessera-client (hand-written; the package is plain ESM JavaScript).
// Data fields keep the protocol's names (docs/protocol.md); methods and client options are camelCase.

export type Message = { role: "system" | "user" | "assistant"; content: string };

/** K/V retention (docs/kv.md). Omitted sinks / recent get the HTTP API's defaults (4, budget / 2). */
export type StreamingPolicy = { type: "streaming"; window: number; sinks?: number };
export type H2OPolicy = { type: "h2o"; budget: number; recent?: number };
export type FullAttention = { type: "none" };
export type KvPolicy = StreamingPolicy | H2OPolicy | FullAttention;
export function streamingPolicy(window: number, sinks?: number): Required<StreamingPolicy>;
export function h2oPolicy(budget: number, recent?: number): Required<H2OPolicy>;
export function fullAttention(): FullAttention;
/** The wire map sent for a kv_policy option (defaults filled; BadRequest 100 on a bad shape). */
export function kvPolicyWire(policy: KvPolicy): Required<StreamingPolicy> | Required<H2OPolicy> | FullAttention;

/** Every request field of the protocol (docs/protocol.md "completion and chat"). Defaults and
 *  checks are the server's; an unknown key is refused with BadRequest before anything is sent. */
export interface RequestOptions {
  model?: string;
  max_tokens?: number;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  min_p?: number;
  repetition_penalty?: number;
  presence_penalty?: number;
  frequency_penalty?: number;
  seed?: number | bigint;
  /** {token id: bias}, a Map, or the protocol's [{token, bias}] list. */
  logit_bias?: Record<number | string, number> | Map<number, number> | { token: number; bias: number }[];
  logprobs?: boolean;
  top_logprobs?: number;
  stop?: string[];
  stop_token_ids?: number[];
  ignore_eos?: boolean;
  user?: string;
  preference?: string;
  preference_alpha?: number;
  priority?: number;
  routing_key?: string;
  cache_salt?: string;
  /** StreamingLLM / H2O K/V retention; see streamingPolicy, h2oPolicy, fullAttention. */
  kv_policy?: KvPolicy;
  /** Overrides the client's apiKey for this request. */
  api_key?: string;
  /** Client side: this request's deadline in ms (the client's timeoutMs by default). Past it
   *  the client sends `cancel` and the request rejects with Timeout (code 203). */
  timeoutMs?: number | null;
  /** Client side: aborting sends `cancel`; the request then ends with finish_reason "cancelled". */
  signal?: AbortSignal;
}

export interface TopLogprob { token: number; logprob: number }

export declare class TokenEvent {
  readonly type: "token";
  request_id: number;
  tokens: number[];
  /** Text that became visible with these tokens (may be ""). */
  text: string;
  /** Present (non-null) only when `logprobs` was asked. */
  logprobs: number[] | null;
  top_logprobs: TopLogprob[][] | null;
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  /** Prompt tokens whose K/V came from the prefix cache (whole pages only). */
  cached_tokens: number;
  /** Preference provenance ("memory", "kvstore", "redis", "compute"); null without a preference. */
  preference_source: string | null;
  preference_kv_bytes: number | null;
  preference_transfer_ms: number | null;
}

export interface Timings { queue_ms: number; ttft_ms: number; decode_ms: number; total_ms: number }

export type FinishReason = "stop" | "length" | "cancelled";

export declare class Completion {
  readonly type: "final";
  request_id: number;
  text: string;
  tokens: number[];
  finish_reason: FinishReason;
  usage: Usage;
  timings: Timings;
  logprobs: number[] | null;
  top_logprobs: TopLogprob[][] | null;
}

export type StreamEvent = TokenEvent | Completion;

/** The frontend's heartbeat reply (null: not reported yet). */
export interface Limits {
  model: string;
  protocol_version: number;
  context_length: number | null;
  page_size: number | null;
  max_prompt_tokens: number | null;
  vocab_size: number | null;
  default_max_tokens: number | null;
  live_workers: number;
  running: number;
  waiting: number;
  endpoint: string;
  raw: Record<string, unknown>;
}

/** A streamed request: TokenEvents, then its Completion (the last item). Iterate it once;
 *  leaving the loop early cancels the request. */
export declare class Stream implements AsyncIterable<StreamEvent> {
  readonly requestId: number;
  [Symbol.asyncIterator](): AsyncIterator<StreamEvent>;
  /** Consumes the rest of the stream; resolves to its Completion or rejects with its error. */
  result(): Promise<Completion>;
  /** Asks the server to stop; the stream ends with finish_reason "cancelled". */
  cancel(): void;
}

export interface ClientOptions {
  /** Heartbeat period (500 ms). */
  heartbeatIntervalMs?: number;
  /** A frontend silent this long is dead (1500 ms); noticed within deadAfterMs + heartbeatIntervalMs. */
  deadAfterMs?: number;
  /** Default per-request deadline in ms (null: none). */
  timeoutMs?: number | null;
  /** Sent as `api_key` with every completion/chat (frontends with --api-key). */
  apiKey?: string | null;
  /** Messages queued toward an unreachable frontend before requests fail with Unavailable (1000). */
  sendHighWaterMark?: number;
}

export declare const OPTION_KEYS: readonly string[];
export declare const DEFAULT_HEARTBEAT_INTERVAL_MS: number;
export declare const DEFAULT_DEAD_AFTER_MS: number;
export declare const VERSION: string;

/** One DEALER connection to a frontend, with heartbeats, deadlines and failover. Lives on the
 *  event loop that created it; call close() to end it (its heartbeat timer keeps Node alive). */
export declare class Client {
  constructor(endpoints: string | string[], options?: ClientOptions);
  readonly endpoints: string[];
  /** The endpoint in use now (it changes on failover). */
  readonly endpoint: string;
  /** How many times a dead frontend made the client move to the next endpoint. */
  readonly failovers: number;
  /** Requests in flight. */
  readonly inFlight: number;
  limits(timeoutMs?: number): Promise<Limits>;
  complete(prompt: string | number[], options?: RequestOptions): Promise<Completion>;
  chat(messages: Message[], options?: RequestOptions): Promise<Completion>;
  streamComplete(prompt: string | number[], options?: RequestOptions): Stream;
  streamChat(messages: Message[], options?: RequestOptions): Stream;
  cancel(requestId: number): void;
  close(): Promise<void>;
}

/** Admin operations over the frontend's HTTP port (docs/api.md "Admin"). */
export declare class AdminClient {
  constructor(baseUrl: string, options?: { token?: string; timeoutMs?: number });
  setPreference(user: string, preference: string, alpha?: number):
    Promise<{ user: string; preference: string; alpha: number; stored: { l1: boolean; l2: boolean } }>;
  getPreference(user: string): Promise<{ user: string; preference: string; alpha: number }>;
  deletePreference(user: string): Promise<{ user: string; deleted: boolean }>;
  invalidate(user: string): Promise<{ user: string; kvstore: { l1: unknown; l2: unknown }; schedulers_notified: number }>;
}

/** Base of every error: `code` is the protocol's number (0 when raised by the client without
 *  one), `codeName` its name, `message` the server's text, `requestId` the request's id. */
export declare class TesseraError extends Error {
  constructor(code: number, codeName: string, message: string, requestId?: number);
  code: number;
  codeName: string;
  requestId: number;
}
/** 100, 101, 102, 103, 105, 402 (and client-side argument errors, code 100). */
export declare class BadRequest extends TesseraError {}
/** 104 */
export declare class NotFound extends BadRequest {}
/** 106 */
export declare class PermissionDenied extends TesseraError {}
/** 200, 201 */
export declare class Overloaded extends TesseraError {}
/** 202 (an operator's cancel) */
export declare class Cancelled extends TesseraError {}
/** 203, and the client's own per-request deadline */
export declare class Timeout extends TesseraError {}
/** 400, no heartbeat reply for limits(), a full send queue */
export declare class Unavailable extends TesseraError {}
/** 401, and a frontend that stopped answering heartbeats */
export declare class PeerDead extends TesseraError {}
/** 300-302, 500 */
export declare class InternalError extends TesseraError {}
/** the client was closed (code 0) */
export declare class ClientClosed extends TesseraError {}
export declare const CODE_NAMES: Readonly<Record<number, string>>;
export declare function errorFor(code: number, message: string, codeName?: string, requestId?: number): TesseraError;
