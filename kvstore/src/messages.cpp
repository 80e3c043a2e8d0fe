#include "messages.h"

#define MSGPACK_NO_BOOST 1
#include <msgpack.hpp>

#include <map>

namespace tessera::kvstore::wire {
namespace {

// msgpack output straight into a std::string (no second copy of large blobs).
struct StringBuffer {
  std::string s;
  void write(const char* data, size_t n) { s.append(data, n); }
};
using Packer = msgpack::packer<StringBuffer>;

void pack_str(Packer& p, std::string_view s) {
  p.pack_str(static_cast<uint32_t>(s.size()));
  p.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}
void pack_bin(Packer& p, std::string_view s) {
  p.pack_bin(static_cast<uint32_t>(s.size()));
  p.pack_bin_body(s.data(), static_cast<uint32_t>(s.size()));
}

// Keys of a msgpack map, by name (first occurrence wins; non-string keys are ignored).
using Fields = std::map<std::string_view, const msgpack::object*>;

Result<Fields> fields_of(const msgpack::object& o) {
  if (o.type != msgpack::type::MAP) return make_error(ErrorCode::kMalformedMessage, "message is not a msgpack map");
  Fields f;
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    const auto& kv = o.via.map.ptr[i];
    if (kv.key.type != msgpack::type::STR) continue;
    f.emplace(std::string_view(kv.key.via.str.ptr, kv.key.via.str.size), &kv.val);
  }
  return f;
}

const msgpack::object* find(const Fields& f, std::string_view key) {
  auto it = f.find(key);
  return it == f.end() || it->second->type == msgpack::type::NIL ? nullptr : it->second;
}

Result<uint64_t> get_u64(const Fields& f, std::string_view key, bool required, uint64_t dflt = 0) {
  const msgpack::object* o = find(f, key);
  if (o == nullptr) {
    if (required) return make_error(ErrorCode::kInvalidArgument, std::string(key) + " is required");
    return dflt;
  }
  if (o->type == msgpack::type::POSITIVE_INTEGER) return o->via.u64;
  if (o->type == msgpack::type::NEGATIVE_INTEGER) {
    return make_error(ErrorCode::kOutOfRange, std::string(key) + " must be >= 0 (got " + std::to_string(o->via.i64) + ")");
  }
  return make_error(ErrorCode::kInvalidArgument, std::string(key) + " must be an unsigned integer");
}

Result<std::string_view> get_bytes(const Fields& f, std::string_view key, bool required, bool allow_bin) {
  const msgpack::object* o = find(f, key);
  if (o == nullptr) {
    if (required) return make_error(ErrorCode::kInvalidArgument, std::string(key) + " is required");
    return std::string_view();
  }
  if (o->type == msgpack::type::STR) return std::string_view(o->via.str.ptr, o->via.str.size);
  if (allow_bin && o->type == msgpack::type::BIN) return std::string_view(o->via.bin.ptr, o->via.bin.size);
  return make_error(ErrorCode::kInvalidArgument,
                    std::string(key) + (allow_bin ? " must be bin or str" : " must be a string"));
}

bool get_bool(const Fields& f, std::string_view key) {
  const msgpack::object* o = find(f, key);
  return o != nullptr && o->type == msgpack::type::BOOLEAN && o->via.boolean;
}

// Unpacks without copying str/bin payloads (they stay views into `body`).
Result<msgpack::object_handle> unpack(std::string_view body) {
  try {
    auto no_copy = [](msgpack::type::object_type, size_t, void*) { return true; };
    msgpack::unpack_limit limit(/*array=*/1024, /*map=*/256, /*str=*/1u << 20, /*bin=*/0xFFFFFFFFu,
                                /*ext=*/1024, /*depth=*/16);
    std::size_t off = 0;
    msgpack::object_handle oh = msgpack::unpack(body.data(), body.size(), off, no_copy, nullptr, limit);
    if (off != body.size()) return make_error(ErrorCode::kMalformedMessage, "trailing bytes after the msgpack map");
    return oh;
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kMalformedMessage, std::string("not msgpack: ") + e.what());
  }
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::kPut: return "put";
    case Op::kGet: return "get";
    case Op::kExists: return "exists";
    case Op::kDelete: return "delete";
    case Op::kInvalidateUser: return "invalidate_user";
    case Op::kClear: return "clear";
    case Op::kStats: return "stats";
  }
  return "?";
}

uint64_t peek_id(std::string_view body) {
  auto oh = unpack(body);
  if (!oh.ok()) return 0;
  auto f = fields_of(oh->get());
  if (!f.ok()) return 0;
  auto id = get_u64(*f, "id", false);
  return id.ok() ? *id : 0;
}

Result<Request> decode_request(std::string_view body) {
  TS_ASSIGN_OR_RETURN(msgpack::object_handle oh, unpack(body));
  TS_ASSIGN_OR_RETURN(Fields f, fields_of(oh.get()));
  const msgpack::object* v = find(f, "v");
  if (v == nullptr) return make_error(ErrorCode::kInvalidArgument, "v (protocol version) is required");
  if (v->type != msgpack::type::POSITIVE_INTEGER || v->via.u64 != static_cast<uint64_t>(kVersion)) {
    return make_error(ErrorCode::kProtocolMismatch, "protocol version must be 1");
  }
  Request r;
  TS_ASSIGN_OR_RETURN(r.id, get_u64(f, "id", true));
  TS_ASSIGN_OR_RETURN(std::string_view type, get_bytes(f, "type", true, false));
  bool known = false;
  for (Op op : {Op::kPut, Op::kGet, Op::kExists, Op::kDelete, Op::kInvalidateUser, Op::kClear, Op::kStats}) {
    if (type == op_name(op)) {
      r.op = op;
      known = true;
    }
  }
  if (!known) {
    return make_error(ErrorCode::kInvalidArgument,
                      "unknown type '" + std::string(type.substr(0, 64)) +
                          "' (expected put, get, exists, delete, invalidate_user, clear or stats)");
  }
  const bool keyed = r.op == Op::kPut || r.op == Op::kGet || r.op == Op::kExists || r.op == Op::kDelete;
  if (keyed || r.op == Op::kInvalidateUser) {
    TS_ASSIGN_OR_RETURN(std::string_view user, get_bytes(f, "user", true, true));
    r.key.user = std::string(user);
    if (std::string problem = validate_user(user); !problem.empty()) {
      return make_error(ErrorCode::kInvalidArgument, std::move(problem));
    }
  }
  if (keyed) {
    TS_ASSIGN_OR_RETURN(r.key.fingerprint, get_u64(f, "fingerprint", true));
    TS_ASSIGN_OR_RETURN(std::string_view hash, get_bytes(f, "hash", true, true));
    r.key.hash = std::string(hash);
    TS_TRY(validate_key(r.key));
  }
  if (r.op == Op::kPut) {
    TS_ASSIGN_OR_RETURN(r.blob, get_bytes(f, "blob", true, true));
    TS_ASSIGN_OR_RETURN(uint64_t ttl, get_u64(f, "ttl_s", false, 0));
    if (ttl > kMaxTtlSeconds) {
      return make_error(ErrorCode::kOutOfRange, "ttl_s must be <= " + std::to_string(kMaxTtlSeconds) + " (got " +
                                                    std::to_string(ttl) + ")");
    }
    r.ttl_s = static_cast<uint32_t>(ttl);
  }
  // The blob view points into `body`, which the caller keeps alive; the handle's zone only holds
  // the map structure, so it can go.
  return r;
}

std::string encode_request(const Request& r) {
  StringBuffer buf;
  buf.s.reserve(256 + r.blob.size());
  Packer p(buf);
  const bool keyed = r.op == Op::kPut || r.op == Op::kGet || r.op == Op::kExists || r.op == Op::kDelete;
  uint32_t n = 3 + (keyed ? 3 : 0) + (r.op == Op::kInvalidateUser ? 1 : 0) + (r.op == Op::kPut ? 2 : 0);
  p.pack_map(n);
  pack_str(p, "v");
  p.pack(kVersion);
  pack_str(p, "type");
  pack_str(p, op_name(r.op));
  pack_str(p, "id");
  p.pack(r.id);
  if (keyed || r.op == Op::kInvalidateUser) {
    pack_str(p, "user");
    pack_str(p, r.key.user);
  }
  if (keyed) {
    pack_str(p, "fingerprint");
    p.pack(r.key.fingerprint);
    pack_str(p, "hash");
    pack_str(p, r.key.hash);
  }
  if (r.op == Op::kPut) {
    pack_str(p, "ttl_s");
    p.pack(r.ttl_s);
    pack_str(p, "blob");
    pack_bin(p, r.blob);
  }
  return std::move(buf.s);
}

std::string encode_reply(const Reply& r) {
  StringBuffer buf;
  buf.s.reserve(256 + r.blob.size() + r.blob_view.size() + r.metrics.size());
  Packer p(buf);
  // Count fields first (msgpack maps carry their size up front).
  uint32_t n = 3;
  const std::string& t = r.type;
  if (t == "error") n += 3;
  if (t == "get_reply") n += r.found ? 3 : 2;
  if (t == "exists_reply") n += 2;
  if (t == "put_reply") n += 3;
  if (t == "delete_reply") n += 1;
  if (t == "invalidate_user_reply" || t == "clear_reply") n += 2;
  if (t == "stats_reply") n += 5;
  p.pack_map(n);
  pack_str(p, "v");
  p.pack(kVersion);
  pack_str(p, "type");
  pack_str(p, t);
  pack_str(p, "id");
  p.pack(r.id);
  if (t == "error") {
    pack_str(p, "code");
    p.pack(static_cast<int32_t>(r.code));
    pack_str(p, "error");
    pack_str(p, error_code_name(r.code));
    pack_str(p, "message");
    pack_str(p, r.message);
  } else if (t == "get_reply" || t == "exists_reply") {
    pack_str(p, "found");
    p.pack(r.found);
    pack_str(p, "tier");
    pack_str(p, r.tier);
    if (t == "get_reply" && r.found) {
      pack_str(p, "blob");
      pack_bin(p, r.blob_view.empty() ? std::string_view(r.blob) : r.blob_view);
    }
  } else if (t == "put_reply") {
    pack_str(p, "stored_l1");
    p.pack(r.stored_l1);
    pack_str(p, "stored_l2");
    p.pack(r.stored_l2);
    pack_str(p, "note");
    pack_str(p, r.note);
  } else if (t == "delete_reply") {
    pack_str(p, "removed");
    p.pack(r.removed);
  } else if (t == "invalidate_user_reply" || t == "clear_reply") {
    pack_str(p, "removed_l1");
    p.pack(r.removed_l1);
    pack_str(p, "removed_l2");
    p.pack(r.removed_l2);
  } else if (t == "stats_reply") {
    pack_str(p, "metrics");
    pack_str(p, r.metrics);
    pack_str(p, "redis_configured");
    p.pack(r.redis_configured);
    pack_str(p, "redis_up");
    p.pack(r.redis_up);
    pack_str(p, "l1_entries");
    p.pack(r.l1_entries);
    pack_str(p, "l1_bytes");
    p.pack(r.l1_bytes);
  }
  return std::move(buf.s);
}

std::string encode_error(uint64_t id, ErrorCode code, std::string_view message) {
  Reply r;
  r.id = id;
  r.type = "error";
  r.code = code;
  r.message = std::string(message);
  return encode_reply(r);
}

Result<Reply> decode_reply(std::string_view body) {
  TS_ASSIGN_OR_RETURN(msgpack::object_handle oh, unpack(body));
  TS_ASSIGN_OR_RETURN(Fields f, fields_of(oh.get()));
  Reply r;
  TS_ASSIGN_OR_RETURN(r.id, get_u64(f, "id", false));
  TS_ASSIGN_OR_RETURN(std::string_view type, get_bytes(f, "type", true, false));
  r.type = std::string(type);
  if (const msgpack::object* c = find(f, "code"); c != nullptr) {
    if (c->type == msgpack::type::POSITIVE_INTEGER) r.code = static_cast<ErrorCode>(static_cast<int32_t>(c->via.u64));
    if (c->type == msgpack::type::NEGATIVE_INTEGER) r.code = static_cast<ErrorCode>(static_cast<int32_t>(c->via.i64));
  }
  TS_ASSIGN_OR_RETURN(std::string_view message, get_bytes(f, "message", false, false));
  r.message = std::string(message);
  r.found = get_bool(f, "found");
  TS_ASSIGN_OR_RETURN(std::string_view tier, get_bytes(f, "tier", false, false));
  r.tier = std::string(tier);
  TS_ASSIGN_OR_RETURN(std::string_view blob, get_bytes(f, "blob", false, true));
  r.blob = std::string(blob);
  r.stored_l1 = get_bool(f, "stored_l1");
  r.stored_l2 = get_bool(f, "stored_l2");
  TS_ASSIGN_OR_RETURN(std::string_view note, get_bytes(f, "note", false, false));
  r.note = std::string(note);
  r.removed = get_bool(f, "removed");
  TS_ASSIGN_OR_RETURN(r.removed_l1, get_u64(f, "removed_l1", false));
  TS_ASSIGN_OR_RETURN(r.removed_l2, get_u64(f, "removed_l2", false));
  TS_ASSIGN_OR_RETURN(std::string_view metrics, get_bytes(f, "metrics", false, false));
  r.metrics = std::string(metrics);
  r.redis_configured = get_bool(f, "redis_configured");
  r.redis_up = get_bool(f, "redis_up");
  TS_ASSIGN_OR_RETURN(r.l1_entries, get_u64(f, "l1_entries", false));
  TS_ASSIGN_OR_RETURN(r.l1_bytes, get_u64(f, "l1_bytes", false));
  return r;
}

}  // namespace tessera::kvstore::wire
