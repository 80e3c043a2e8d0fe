// Typed errors of the Tessera C++ client, carrying the protocol's error code, name and message
// (docs/protocol.md "Error codes"). The same classes, by the same names, as the Python and Node
// clients: BadRequest, NotFound, PermissionDenied, Overloaded, Cancelled, Timeout, Unavailable,
// PeerDead, InternalError, ClientClosed, all derived from Error.
//
//   try { client.complete("Once", {.max_tokens = 0}); }
//   catch (const tessera::client::BadRequest& e) { e.code(); /* 103 */ e.name(); /* "out_of_range" */ }
//
// Every failure of a request is thrown as one of these (from Client's blocking calls and from
// Stream::next/result); a callback request gets it as `const Error&`. Plain values, safe to copy
// and to throw from any thread.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace tessera::client {

// The protocol's error numbers (stable; docs/protocol.md). 0 = raised by the client itself
// without a protocol code (ClientClosed).
enum class ErrorCode : int {
  kNone = 0,
  kInvalidArgument = 100,
  kMalformedMessage = 101,
  kUnsupported = 102,
  kOutOfRange = 103,
  kNotFound = 104,
  kTooLarge = 105,
  kPermissionDenied = 106,
  kResourceExhausted = 200,
  kOverloaded = 201,
  kCancelled = 202,
  kDeadlineExceeded = 203,
  kIoError = 300,
  kCorruptFile = 301,
  kTruncatedFile = 302,
  kUnavailable = 400,
  kPeerDead = 401,
  kProtocolMismatch = 402,
  kInternal = 500,
};

// The protocol's name of a code ("out_of_range"); "unknown" for a number it does not list.
const char* error_code_name(int code);

class Error : public std::runtime_error {
 public:
  Error(int code, std::string name, std::string message, uint64_t request_id = 0);
  int code() const { return code_; }                      // the protocol's number (0: client-side)
  const std::string& name() const { return name_; }       // "out_of_range"
  const std::string& message() const { return message_; } // what is wrong, naming the field
  uint64_t request_id() const { return request_id_; }     // the request it ended (0: none)

 private:
  int code_;
  std::string name_;
  std::string message_;
  uint64_t request_id_;
};

// 100 invalid_argument, 101 malformed_message, 102 unsupported, 103 out_of_range, 105 too_large,
// 402 protocol_mismatch (and the client's own argument checks, code 100): do not retry as is.
class BadRequest : public Error { using Error::Error; };
// 104 not_found (e.g. an unknown model name).
class NotFound : public BadRequest { using BadRequest::BadRequest; };
// 106 permission_denied (invalid_api_key / user_not_allowed).
class PermissionDenied : public Error { using Error::Error; };
// 200 resource_exhausted, 201 overloaded: retry later.
class Overloaded : public Error { using Error::Error; };
// 202 cancelled by an operator (your own cancel() ends with finish_reason "cancelled" instead).
class Cancelled : public Error { using Error::Error; };
// 203 deadline_exceeded: the server's, or the client's own per-request deadline (the request was
// cancelled at the server).
class Timeout : public Error { using Error::Error; };
// 400 unavailable: no scheduler/worker ready; also no heartbeat reply for limits(), or a full
// send queue.
class Unavailable : public Error { using Error::Error; };
// 401 peer_dead: the frontend stopped answering heartbeats (client side), or the scheduler or
// worker running the request died. The request is over; it may be retried.
class PeerDead : public Error { using Error::Error; };
// 300-302 file problems, 500 internal.
class InternalError : public Error { using Error::Error; };
// The client was closed while the request was in flight or before it was sent (code 0).
class ClientClosed : public Error { using Error::Error; };

// Throws the typed error for `code` (unknown codes: Error itself).
[[noreturn]] void throw_error(int code, const std::string& name, const std::string& message,
                              uint64_t request_id = 0);

}  // namespace tessera::client
