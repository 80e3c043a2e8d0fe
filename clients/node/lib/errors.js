// Typed errors carrying the protocol's error code (docs/protocol.md "Error codes").
// Every error this package throws or rejects with is a TesseraError subclass:
//   code      the protocol's number (0 when the client raised it without one)
//   codeName  its name ("out_of_range")
//   message   what is wrong, as the server said it (naming the field)
//   requestId the request's id (0 when none)

export class TesseraError extends Error {
  constructor(code, codeName, message, requestId = 0) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.codeName = codeName;
    this.requestId = requestId;
  }
}

/** 100 invalid_argument, 101 malformed_message, 102 unsupported, 103 out_of_range,
 *  105 too_large, 402 protocol_mismatch: the request is wrong; do not retry it as is. */
export class BadRequest extends TesseraError {}
/** 104 not_found (e.g. an unknown model name). */
export class NotFound extends BadRequest {}
/** 106 permission_denied (a missing or wrong API key, a user the key may not act for). */
export class PermissionDenied extends TesseraError {}
/** 200 resource_exhausted, 201 overloaded: retry later. */
export class Overloaded extends TesseraError {}
/** 202 cancelled by an operator (your own cancel ends with finish_reason "cancelled"). */
export class Cancelled extends TesseraError {}
/** 203 deadline_exceeded: the server's or the client's per-request deadline passed. */
export class Timeout extends TesseraError {}
/** 400 unavailable: no scheduler/worker ready, no heartbeat reply, or a full send queue. */
export class Unavailable extends TesseraError {}
/** 401 peer_dead: the frontend stopped answering heartbeats, or the scheduler/worker running
 *  the request died; the request is over and may be retried. */
export class PeerDead extends TesseraError {}
/** 300-302 file problems and 500 internal. */
export class InternalError extends TesseraError {}
/** The client was closed while the request was in flight (or before it was sent). */
export class ClientClosed extends TesseraError {}

const BY_CODE = new Map([
  [100, BadRequest], [101, BadRequest], [102, BadRequest], [103, BadRequest], [104, NotFound],
  [105, BadRequest], [106, PermissionDenied], [200, Overloaded], [201, Overloaded],
  [202, Cancelled], [203, Timeout], [300, InternalError], [301, InternalError],
  [302, InternalError], [400, Unavailable], [401, PeerDead], [402, BadRequest], [500, InternalError],
]);

export const CODE_NAMES = Object.freeze({
  100: "invalid_argument", 101: "malformed_message", 102: "unsupported", 103: "out_of_range",
  104: "not_found", 105: "too_large", 106: "permission_denied", 200: "resource_exhausted",
  201: "overloaded", 202: "cancelled", 203: "deadline_exceeded", 300: "io_error",
  301: "corrupt_file", 302: "truncated_file", 400: "unavailable", 401: "peer_dead",
  402: "protocol_mismatch", 500: "internal",
});

/** The typed error for a protocol `code` (unknown codes give a plain TesseraError). */
export function errorFor(code, message, codeName = "", requestId = 0) {
  const Cls = BY_CODE.get(code) ?? TesseraError;
  return new Cls(code, codeName || CODE_NAMES[code] || "unknown", message, requestId);
}
