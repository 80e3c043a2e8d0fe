#include "tessera/client/errors.h"

#include <utility>

#include "core.h"

namespace tessera::client {

const char* error_code_name(int code) {
  switch (code) {
    case 100: return "invalid_argument";
    case 101: return "malformed_message";
    case 102: return "unsupported";
    case 103: return "out_of_range";
    case 104: return "not_found";
    case 105: return "too_large";
    case 106: return "permission_denied";
    case 200: return "resource_exhausted";
    case 201: return "overloaded";
    case 202: return "cancelled";
    case 203: return "deadline_exceeded";
    case 300: return "io_error";
    case 301: return "corrupt_file";
    case 302: return "truncated_file";
    case 400: return "unavailable";
    case 401: return "peer_dead";
    case 402: return "protocol_mismatch";
    case 500: return "internal";
    default: return "unknown";
  }
}

namespace {
std::string what_text(int code, const std::string& name, const std::string& message) {
  return code != 0 ? std::to_string(code) + " " + name + ": " + message : message;
}

template <class F>
auto with_type(int code, F f) {
  switch (code) {
    case 100: case 101: case 102: case 103: case 105: case 402: return f.template operator()<BadRequest>();
    case 104: return f.template operator()<NotFound>();
    case 106: return f.template operator()<PermissionDenied>();
    case 200: case 201: return f.template operator()<Overloaded>();
    case 202: return f.template operator()<Cancelled>();
    case 203: return f.template operator()<Timeout>();
    case 300: case 301: case 302: case 500: return f.template operator()<InternalError>();
    case 400: return f.template operator()<Unavailable>();
    case 401: return f.template operator()<PeerDead>();
    case 0: return f.template operator()<ClientClosed>();
    default: return f.template operator()<Error>();
  }
}
}  // namespace

Error::Error(int code, std::string name, std::string message, uint64_t request_id)
    : std::runtime_error(what_text(code, name, message)),
      code_(code),
      name_(std::move(name)),
      message_(std::move(message)),
      request_id_(request_id) {}

void throw_error(int code, const std::string& name, const std::string& message, uint64_t request_id) {
  with_type(code, [&]<class E>() -> int { throw E(code, name, message, request_id); });
  throw Error(code, name, message, request_id);  // not reached
}

namespace detail {

std::exception_ptr make_error(int code, std::string message, uint64_t request_id, std::string name) {
  if (name.empty()) name = error_code_name(code);
  return with_type(code, [&]<class E>() { return std::make_exception_ptr(E(code, name, message, request_id)); });
}

}  // namespace detail
}  // namespace tessera::client
