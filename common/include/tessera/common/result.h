// Result<T>: the error type that crosses module and process boundaries.
//
// One policy per layer (STYLE.md habit 5): functions that can fail because of input, files,
// peers or resources return Result<T> (or Status = Result<void>). Broken internal invariants
// are not errors: they are TS_CHECK failures (check.h) and abort.
//
// Error codes are grouped by numeric range so a code says which layer it came from; the
// same numbers travel on the wire (docs/protocol.md) and map to HTTP statuses in the frontend.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "tessera/common/check.h"

namespace tessera {

enum class ErrorCode : int32_t {
  kOk = 0,
  // 1xx — the caller's input is wrong.
  kInvalidArgument = 100,   // a field has a wrong value or type
  kMalformedMessage = 101,  // bytes that do not decode (JSON, msgpack, framing)
  kUnsupported = 102,       // valid but not supported (dtype, architecture, version)
  kOutOfRange = 103,        // a number outside its allowed range
  kNotFound = 104,          // unknown model, user, request id, key
  kTooLarge = 105,          // prompt, body or blob over a configured limit
  kPermissionDenied = 106,  // bad admin token, bad MAC, cross-user access
  // 2xx — resources and scheduling.
  kResourceExhausted = 200,  // out of pages, memory
  kOverloaded = 201,         // queue or concurrency limit reached (HTTP 429)
  kCancelled = 202,          // the client or an operator cancelled
  kDeadlineExceeded = 203,   // a bounded wait ran out
  // 3xx — files and storage.
  kIoError = 300,        // open/read/write/mmap failed
  kCorruptFile = 301,    // the file's content contradicts its format
  kTruncatedFile = 302,  // the file ends before its declared content
  // 4xx — peers and services.
  kUnavailable = 400,       // no scheduler/worker/kvstore/redis answers
  kPeerDead = 401,          // a peer stopped heartbeating with work in flight
  kProtocolMismatch = 402,  // wrong protocol version
  // 5xx — bugs that were caught at a boundary.
  kInternal = 500,
};

// Stable lower_snake name of a code ("invalid_argument"), used in logs and on the wire.
std::string_view error_code_name(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;  // human-readable; names what is wrong (file, field, key, value)

  std::string to_string() const;  // "invalid_argument: max_tokens must be >= 1 (got 0)"
};

inline Error make_error(ErrorCode code, std::string message) { return Error{code, std::move(message)}; }

// A value or an Error. Accessing the wrong alternative is a programming error and aborts.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT(implicit)
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT(implicit)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { TS_CHECK(ok()) << error().to_string(); return std::get<0>(v_); }
  const T& value() const& { TS_CHECK(ok()) << error().to_string(); return std::get<0>(v_); }
  T&& value() && { TS_CHECK(ok()) << error().to_string(); return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { TS_CHECK(!ok()); return std::get<1>(v_); }
  Error&& take_error() { TS_CHECK(!ok()); return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT(implicit)

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { TS_CHECK(!ok_); return error_; }
  Error&& take_error() { TS_CHECK(!ok_); return std::move(error_); }

 private:
  Error error_{ErrorCode::kOk, {}};
  bool ok_ = true;
};

using Status = Result<void>;
inline Status ok_status() { return {}; }

}  // namespace tessera

// Propagate an error: TS_TRY(expr) for Status; TS_ASSIGN_OR_RETURN(lhs, expr) for Result<T>.
#define TS_TRY(expr)                                              \
  do {                                                            \
    auto ts_try_status_ = (expr);                                 \
    if (!ts_try_status_.ok()) return ts_try_status_.take_error(); \
  } while (0)

#define TS_CONCAT_INNER_(a, b) a##b
#define TS_CONCAT_(a, b) TS_CONCAT_INNER_(a, b)
#define TS_ASSIGN_OR_RETURN(lhs, expr) TS_ASSIGN_OR_RETURN_IMPL_(TS_CONCAT_(ts_result_, __LINE__), lhs, expr)
#define TS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.take_error();         \
  lhs = std::move(tmp).value()
