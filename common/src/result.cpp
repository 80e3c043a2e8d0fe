#include "tessera/common/result.h"

namespace tessera {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kMalformedMessage: return "malformed_message";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kOutOfRange: return "out_of_range";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kTooLarge: return "too_large";
    case ErrorCode::kPermissionDenied: return "permission_denied";
    case ErrorCode::kResourceExhausted: return "resource_exhausted";
    case ErrorCode::kOverloaded: return "overloaded";
    case ErrorCode::kCancelled: return "cancelled";
    case ErrorCode::kDeadlineExceeded: return "deadline_exceeded";
    case ErrorCode::kIoError: return "io_error";
    case ErrorCode::kCorruptFile: return "corrupt_file";
    case ErrorCode::kTruncatedFile: return "truncated_file";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kPeerDead: return "peer_dead";
    case ErrorCode::kProtocolMismatch: return "protocol_mismatch";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Error::to_string() const {
  std::string out(error_code_name(code));
  out += ": ";
  out += message;
  return out;
}

}  // namespace tessera
