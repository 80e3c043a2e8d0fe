// Protocol v1: the K/V offload fields of step_plan and step_result (step_plan.h: KvSpill,
// KvReload, ReloadResult). Kept apart from protocol_encode/decode.cpp; they call these once.
// Every field is omitted when empty, so peers that predate offload see the same messages.
#include <cstring>

#include "msgpack_io.h"
#include "protocol_offload.h"

namespace tessera::protocol::detail {
namespace {

// An optional bin of whole tags; kInvalidArgument naming the field when its size is not a multiple.
Status read_tags(const MapView& m, const char* key, std::vector<KvTag>* out) {
  const msgpack::object* o = m.find(key);
  if (o == nullptr || o->type == msgpack::type::NIL) return ok_status();
  std::string_view b;
  TS_TRY(msgpack_io::read_bytes(*o, m.field(key), /*allow_bin=*/true, &b));
  if (b.size() % sizeof(KvTag) != 0) {
    return make_error(ErrorCode::kInvalidArgument, m.field(key) + " has " + std::to_string(b.size()) +
                                                       " bytes, not a multiple of " + std::to_string(sizeof(KvTag)));
  }
  out->resize(b.size() / sizeof(KvTag));
  if (!b.empty()) std::memcpy(out->data(), b.data(), b.size());
  return ok_status();
}

}  // namespace

void write_plan_offload(Writer& w, const StepPlan& p) {
  if (!p.spills.empty()) {
    w.key("spills");
    w.begin_array(static_cast<uint32_t>(p.spills.size()));
    for (const KvSpill& s : p.spills) {
      w.begin_map();
      w.key("page");
      w.i64(s.page);
      w.key("hash");
      w.u64(s.hash);
      w.key("ns_hash");
      w.u64(s.ns_hash);
      if (s.tag != KvTag{}) {
        w.key("tag");
        w.bin(std::string_view(reinterpret_cast<const char*>(s.tag.data()), s.tag.size()));
      }
      w.end_map();
    }
  }
  if (!p.reloads.empty()) {
    w.key("reloads");
    w.begin_array(static_cast<uint32_t>(p.reloads.size()));
    for (const KvReload& r : p.reloads) {
      w.begin_map();
      w.key("request_id");
      w.u64(r.request_id);
      w.key("ns_hash");
      w.u64(r.ns_hash);
      w.key("pages");
      w.i32s(r.pages);
      w.key("hashes");
      w.u64s(r.hashes);
      if (!r.tags.empty()) {  // one bin: the tags concatenated
        w.key("tags");
        w.bin(std::string_view(reinterpret_cast<const char*>(r.tags.data()), r.tags.size() * sizeof(KvTag)));
      }
      w.end_map();
    }
  }
}

Status read_plan_offload(const MapView& m, StepPlan* p) {
  auto read_spill = [&](const msgpack::object& o, const std::string& path) -> Status {
    TS_ASSIGN_OR_RETURN(MapView s, as_map(o, path));
    KvSpill k;
    TS_TRY(req(s, "page", &k.page));
    TS_TRY(req(s, "hash", &k.hash));
    TS_TRY(opt(s, "ns_hash", &k.ns_hash));
    std::vector<KvTag> tag;
    TS_TRY(read_tags(s, "tag", &tag));
    if (tag.size() > 1) return make_error(ErrorCode::kInvalidArgument, path + ".tag holds more than one tag");
    if (!tag.empty()) k.tag = tag.front();
    if (k.page < 0) return make_error(ErrorCode::kOutOfRange, path + ".page holds a negative page id (" + std::to_string(k.page) + ")");
    p->spills.push_back(k);
    return ok_status();
  };
  TS_TRY(opt_array(m, "spills", read_spill));
  auto read_reload = [&](const msgpack::object& o, const std::string& path) -> Status {
    TS_ASSIGN_OR_RETURN(MapView s, as_map(o, path));
    KvReload r;
    TS_TRY(req(s, "request_id", &r.request_id));
    TS_TRY(opt(s, "ns_hash", &r.ns_hash));
    TS_TRY(req(s, "pages", &r.pages));
    TS_TRY(req(s, "hashes", &r.hashes));
    TS_TRY(read_tags(s, "tags", &r.tags));
    if (!r.tags.empty() && r.tags.size() != r.pages.size()) {
      return make_error(ErrorCode::kInvalidArgument, path + " has " + std::to_string(r.pages.size()) + " pages for " +
                                                         std::to_string(r.tags.size()) + " tags");
    }
    if (r.pages.size() != r.hashes.size()) {
      return make_error(ErrorCode::kInvalidArgument, path + " has " + std::to_string(r.pages.size()) + " pages for " +
                                                         std::to_string(r.hashes.size()) + " hashes");
    }
    for (int32_t page : r.pages)
      if (page < 0) return make_error(ErrorCode::kOutOfRange, path + ".pages holds a negative page id (" + std::to_string(page) + ")");
    p->reloads.push_back(std::move(r));
    return ok_status();
  };
  return opt_array(m, "reloads", read_reload);
}

void write_result_offload(Writer& w, const StepResult& r) {
  if (!r.reloads.empty()) {
    w.key("reloads");
    w.begin_array(static_cast<uint32_t>(r.reloads.size()));
    for (const ReloadResult& x : r.reloads) {
      w.begin_map();
      w.key("request_id");
      w.u64(x.request_id);
      w.key("pages");
      w.i64(x.pages);
      w.key("kv_bytes");
      w.i64(x.kv_bytes);
      w.key("transfer_ms");
      w.f64(x.transfer_ms);
      w.end_map();
    }
  }
  if (!r.offloaded.empty()) {
    w.key("offloaded");
    w.u64s(r.offloaded);
  }
}

Status read_result_offload(const MapView& m, StepResult* r) {
  auto read_reload = [&](const msgpack::object& o, const std::string& path) -> Status {
    TS_ASSIGN_OR_RETURN(MapView s, as_map(o, path));
    ReloadResult x;
    TS_TRY(req(s, "request_id", &x.request_id));
    TS_TRY(req(s, "pages", &x.pages));
    TS_TRY(opt(s, "kv_bytes", &x.kv_bytes));
    TS_TRY(opt(s, "transfer_ms", &x.transfer_ms));
    if (x.pages < 0) return make_error(ErrorCode::kOutOfRange, path + ".pages must be >= 0 (got " + std::to_string(x.pages) + ")");
    r->reloads.push_back(x);
    return ok_status();
  };
  TS_TRY(opt_array(m, "reloads", read_reload));
  return opt(m, "offloaded", &r->offloaded);
}

}  // namespace tessera::protocol::detail
