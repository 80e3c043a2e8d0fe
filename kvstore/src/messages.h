// Private to kvstore/: the kvstore's msgpack messages (docs/kvstore.md, "Messages").
// One msgpack map per message, in the last ZeroMQ frame, with `v`, `type`, `id` like every
// protocol v1 message (common/protocol.h). Unknown keys are ignored. Blobs travel as msgpack
// `bin` in the `blob` field.
//
// decode_* never throw and never abort: bad bytes -> kMalformedMessage, wrong version ->
// kProtocolMismatch, missing/mistyped field -> kInvalidArgument naming it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/kvstore/key.h"

namespace tessera::kvstore::wire {

inline constexpr int64_t kVersion = 1;
inline constexpr uint32_t kMaxTtlSeconds = 365u * 24 * 3600;
inline constexpr size_t kMaxGetMany = 256;  // hashes in one get_many

// kGetMany (added after the others, so older servers answer it `invalid_argument` "unknown
// type"): the blobs of several hashes of one (fingerprint, user), one reply.
enum class Op : uint8_t { kPut, kGet, kExists, kDelete, kInvalidateUser, kClear, kStats, kGetMany };
inline constexpr int kNumOps = 8;
// "put", "get", "exists", "delete", "invalidate_user", "clear", "stats", "get_many"
const char* op_name(Op op);

struct Request {
  uint64_t id = 0;
  Op op = Op::kStats;
  BlobKey key;           // put/get/exists/delete (user alone for invalidate_user)
  std::string_view blob; // put: a view into the decoded buffer (valid while it lives)
  uint32_t ttl_s = 0;    // put: 0 = the service default
  std::vector<std::string> hashes;  // get_many (key.fingerprint and key.user name the rest)
};

// `body` must outlive the returned Request (blob is a view into it).
Result<Request> decode_request(std::string_view body);
std::string encode_request(const Request& r);
// Best effort id of an undecodable request (0 when unreadable).
uint64_t peek_id(std::string_view body);

// One hash's answer in a get_many_reply, in the request's order.
struct ManyEntry {
  bool found = false;
  std::string tier;
  std::string blob;            // decoded replies own their blob
  std::string_view blob_view;  // encode: used instead of `blob` when non-empty (no copy)
};

struct Reply {
  uint64_t id = 0;
  std::string type;  // "<op>_reply" or "error"
  // error
  ErrorCode code = ErrorCode::kOk;  // an integer on the wire (`code`), its name in `error`
  std::string message;
  // get/exists
  bool found = false;
  std::string tier;
  std::string blob;            // decoded replies own their blob
  std::string_view blob_view;  // encode: used instead of `blob` when non-empty (no copy)
  // get_many
  std::vector<ManyEntry> results;
  // put
  bool stored_l1 = false, stored_l2 = false;
  std::string note;
  // delete
  bool removed = false;
  // invalidate_user/clear
  uint64_t removed_l1 = 0, removed_l2 = 0;
  // stats
  std::string metrics;
  bool redis_configured = false, redis_up = false;
  uint64_t l1_entries = 0, l1_bytes = 0;
};

std::string encode_reply(const Reply& r);  // writes only the fields of its type
std::string encode_error(uint64_t id, ErrorCode code, std::string_view message);
Result<Reply> decode_reply(std::string_view body);

}  // namespace tessera::kvstore::wire
