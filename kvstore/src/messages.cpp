#include "messages.h"

#include "tessera/common/msgpack_io.h"

namespace tessera::kvstore::wire {
namespace {

using msgpack_io::MapView;
using msgpack_io::Writer;

// The top level must be a map (kMalformedMessage otherwise, as for undecodable bytes).
Result<MapView> fields_of(const msgpack::object& o) {
  if (o.type != msgpack::type::MAP) return make_error(ErrorCode::kMalformedMessage, "message is not a msgpack map");
  return MapView(o, "");
}

Result<uint64_t> get_u64(const MapView& m, std::string_view key, bool required) {
  uint64_t v = 0;
  TS_TRY(required ? msgpack_io::req(m, key, &v) : msgpack_io::opt(m, key, &v));
  return v;
}

Result<std::string_view> get_bytes(const MapView& m, std::string_view key, bool required, bool allow_bin) {
  const msgpack::object* o = m.find(key);
  if (o == nullptr) {
    if (required) return make_error(ErrorCode::kInvalidArgument, "missing required field '" + std::string(key) + "'");
    return std::string_view();
  }
  std::string_view v;
  TS_TRY(msgpack_io::read_bytes(*o, std::string(key), allow_bin, &v));
  return v;
}

bool get_bool(const MapView& m, std::string_view key) {
  const msgpack::object* o = m.find(key);
  return o != nullptr && o->type == msgpack::type::BOOLEAN && o->via.boolean;
}

// Without copying str/bin payloads (they stay views into `body`).
Result<msgpack::object_handle> unpack(std::string_view body) {
  static const msgpack::unpack_limit kLimit(/*array=*/1024, /*map=*/256, /*str=*/1u << 20, /*bin=*/0xFFFFFFFFu,
                                            /*ext=*/1024, /*depth=*/16);
  return msgpack_io::unpack(body, kLimit, /*zero_copy=*/true);
}

// get_many: `fingerprint` and `hashes`, an array of 1..kMaxGetMany str/bin, each a valid key hash.
Status decode_hashes(const MapView& f, Request* r) {
  TS_ASSIGN_OR_RETURN(r->key.fingerprint, get_u64(f, "fingerprint", true));
  const msgpack::object* h = f.find("hashes");
  if (h == nullptr) return make_error(ErrorCode::kInvalidArgument, "missing required field 'hashes'");
  if (h->type != msgpack::type::ARRAY || h->via.array.size == 0 || h->via.array.size > kMaxGetMany)
    return make_error(ErrorCode::kInvalidArgument,
                      "hashes must be an array of 1.." + std::to_string(kMaxGetMany) + " strings");
  for (uint32_t i = 0; i < h->via.array.size; ++i) {
    std::string_view v;
    TS_TRY(msgpack_io::read_bytes(h->via.array.ptr[i], "hashes[" + std::to_string(i) + "]", true, &v));
    r->hashes.emplace_back(v);
    TS_TRY(validate_key(BlobKey{r->key.fingerprint, r->key.user, r->hashes.back()}));
  }
  return ok_status();
}

// get_many_reply's `results`: an array of {found, tier, blob (when found)} maps.
Status decode_results(const MapView& f, Reply* r) {
  const msgpack::object* a = f.find("results");
  if (a == nullptr) return ok_status();
  if (a->type != msgpack::type::ARRAY) return make_error(ErrorCode::kMalformedMessage, "results must be an array");
  for (uint32_t i = 0; i < a->via.array.size; ++i) {
    TS_ASSIGN_OR_RETURN(MapView e, fields_of(a->via.array.ptr[i]));
    ManyEntry m;
    m.found = get_bool(e, "found");
    TS_ASSIGN_OR_RETURN(std::string_view tier, get_bytes(e, "tier", false, false));
    m.tier = std::string(tier);
    TS_ASSIGN_OR_RETURN(std::string_view blob, get_bytes(e, "blob", false, true));
    m.blob = std::string(blob);
    r->results.push_back(std::move(m));
  }
  return ok_status();
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
    case Op::kGetMany: return "get_many";
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
  TS_ASSIGN_OR_RETURN(MapView f, fields_of(oh.get()));
  const msgpack::object* v = f.find("v");
  if (v == nullptr) return make_error(ErrorCode::kInvalidArgument, "v (protocol version) is required");
  if (v->type != msgpack::type::POSITIVE_INTEGER || v->via.u64 != static_cast<uint64_t>(kVersion)) {
    return make_error(ErrorCode::kProtocolMismatch, "protocol version must be 1");
  }
  Request r;
  TS_ASSIGN_OR_RETURN(r.id, get_u64(f, "id", true));
  TS_ASSIGN_OR_RETURN(std::string_view type, get_bytes(f, "type", true, false));
  bool known = false;
  for (Op op : {Op::kPut, Op::kGet, Op::kExists, Op::kDelete, Op::kInvalidateUser, Op::kClear, Op::kStats, Op::kGetMany}) {
    if (type == op_name(op)) {
      r.op = op;
      known = true;
    }
  }
  if (!known) {
    return make_error(ErrorCode::kInvalidArgument,
                      "unknown type '" + std::string(type.substr(0, 64)) +
                          "' (expected put, get, get_many, exists, delete, invalidate_user, clear or stats)");
  }
  const bool keyed = r.op == Op::kPut || r.op == Op::kGet || r.op == Op::kExists || r.op == Op::kDelete;
  if (keyed || r.op == Op::kInvalidateUser || r.op == Op::kGetMany) {
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
  if (r.op == Op::kGetMany) TS_TRY(decode_hashes(f, &r));
  if (r.op == Op::kPut) {
    TS_ASSIGN_OR_RETURN(r.blob, get_bytes(f, "blob", true, true));
    TS_ASSIGN_OR_RETURN(uint64_t ttl, get_u64(f, "ttl_s", false));
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
  Writer w;
  w.reserve(256 + r.blob.size());
  const bool keyed = r.op == Op::kPut || r.op == Op::kGet || r.op == Op::kExists || r.op == Op::kDelete;
  w.begin_map();
  w.key("v");
  w.i64(kVersion);
  w.key("type");
  w.str(op_name(r.op));
  w.key("id");
  w.u64(r.id);
  if (keyed || r.op == Op::kInvalidateUser || r.op == Op::kGetMany) {
    w.key("user");
    w.str(r.key.user);
  }
  if (r.op == Op::kGetMany) {
    w.key("fingerprint");
    w.u64(r.key.fingerprint);
    w.key("hashes");
    w.strs(r.hashes);
  }
  if (keyed) {
    w.key("fingerprint");
    w.u64(r.key.fingerprint);
    w.key("hash");
    w.str(r.key.hash);
  }
  if (r.op == Op::kPut) {
    w.key("ttl_s");
    w.u64(r.ttl_s);
    w.key("blob");
    w.bin(r.blob);
  }
  w.end_map();
  return w.take();
}

std::string encode_reply(const Reply& r) {
  Writer w;
  size_t many = 0;
  for (const auto& e : r.results) many += 32 + e.blob.size() + e.blob_view.size();
  w.reserve(256 + r.blob.size() + r.blob_view.size() + r.metrics.size() + many);
  const std::string& t = r.type;
  w.begin_map();
  w.key("v");
  w.i64(kVersion);
  w.key("type");
  w.str(t);
  w.key("id");
  w.u64(r.id);
  if (t == "error") {
    w.key("code");
    w.i64(static_cast<int32_t>(r.code));
    w.key("error");
    w.str(error_code_name(r.code));
    w.key("message");
    w.str(r.message);
  } else if (t == "get_reply" || t == "exists_reply") {
    w.key("found");
    w.boolean(r.found);
    w.key("tier");
    w.str(r.tier);
    if (t == "get_reply" && r.found) {
      w.key("blob");
      w.bin(r.blob_view.empty() ? std::string_view(r.blob) : r.blob_view);
    }
  } else if (t == "get_many_reply") {
    w.key("results");
    w.begin_array(static_cast<uint32_t>(r.results.size()));
    for (const auto& e : r.results) {
      w.begin_map();
      w.key("found");
      w.boolean(e.found);
      w.key("tier");
      w.str(e.tier);
      if (e.found) {
        w.key("blob");
        w.bin(e.blob_view.empty() ? std::string_view(e.blob) : e.blob_view);
      }
      w.end_map();
    }
  } else if (t == "put_reply") {
    w.key("stored_l1");
    w.boolean(r.stored_l1);
    w.key("stored_l2");
    w.boolean(r.stored_l2);
    w.key("note");
    w.str(r.note);
  } else if (t == "delete_reply") {
    w.key("removed");
    w.boolean(r.removed);
  } else if (t == "invalidate_user_reply" || t == "clear_reply") {
    w.key("removed_l1");
    w.u64(r.removed_l1);
    w.key("removed_l2");
    w.u64(r.removed_l2);
  } else if (t == "stats_reply") {
    w.key("metrics");
    w.str(r.metrics);
    w.key("redis_configured");
    w.boolean(r.redis_configured);
    w.key("redis_up");
    w.boolean(r.redis_up);
    w.key("l1_entries");
    w.u64(r.l1_entries);
    w.key("l1_bytes");
    w.u64(r.l1_bytes);
  }
  w.end_map();
  return w.take();
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
  TS_ASSIGN_OR_RETURN(MapView f, fields_of(oh.get()));
  Reply r;
  TS_ASSIGN_OR_RETURN(r.id, get_u64(f, "id", false));
  TS_ASSIGN_OR_RETURN(std::string_view type, get_bytes(f, "type", true, false));
  r.type = std::string(type);
  if (const msgpack::object* c = f.find("code"); c != nullptr) {
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
  TS_TRY(decode_results(f, &r));
  return r;
}

}  // namespace tessera::kvstore::wire
