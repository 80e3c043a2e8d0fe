// tessera-client: Node.js client for Tessera's ZeroMQ API (docs/protocol.md).
export { Client, OPTION_KEYS, DEFAULT_HEARTBEAT_INTERVAL_MS, DEFAULT_DEAD_AFTER_MS } from "./lib/client.js";
export { Stream } from "./lib/stream.js";
export { TokenEvent, Completion } from "./lib/types.js";
export { AdminClient } from "./lib/admin.js";
export { streamingPolicy, h2oPolicy, fullAttention, kvPolicyWire } from "./lib/kv_policy.js";
export {
  TesseraError, BadRequest, NotFound, PermissionDenied, Overloaded, Cancelled, Timeout,
  Unavailable, PeerDead, InternalError, ClientClosed, CODE_NAMES, errorFor,
} from "./lib/errors.js";
export const VERSION = "0.1.0";
