// Protocol v1 encoder: every message becomes one msgpack map with `v`, `type`, `id` first.
#include "msgpack_io.h"
#include "protocol_offload.h"
#include "tessera/common/protocol.h"

namespace tessera::protocol {
namespace {

using detail::Writer;

void header(Writer& w, std::string_view type, uint64_t id) {
  w.key("v");
  w.i64(kProtocolVersion);
  w.key("type");
  w.str(type);
  w.key("id");
  w.u64(id);
}

void write_top(Writer& w, const std::vector<TokenLogprob>& top) {
  w.begin_array(static_cast<uint32_t>(top.size()));
  for (const auto& t : top) {
    w.begin_map();
    w.key("token");
    w.i64(t.token);
    w.key("logprob");
    w.f32(t.logprob);
    w.end_map();
  }
}

// `logprobs` and `top_logprobs`, each only when non-empty (asked for).
void write_logprobs(Writer& w, const std::vector<float>& logprobs, const std::vector<std::vector<TokenLogprob>>& top) {
  if (!logprobs.empty()) {
    w.key("logprobs");
    w.f32s(logprobs);
  }
  if (!top.empty()) {
    w.key("top_logprobs");
    w.begin_array(static_cast<uint32_t>(top.size()));
    for (const auto& t : top) write_top(w, t);
  }
}

// `prompt_logprobs` and `prompt_top_logprobs`, each only when non-empty (asked for).
void write_prompt_logprobs(Writer& w, const std::vector<float>& logprobs, const std::vector<std::vector<TokenLogprob>>& top) {
  if (!logprobs.empty()) {
    w.key("prompt_logprobs");
    w.f32s(logprobs);
  }
  if (!top.empty()) {
    w.key("prompt_top_logprobs");
    w.begin_array(static_cast<uint32_t>(top.size()));
    for (const auto& t : top) write_top(w, t);
  }
}

struct Encoder {
  Writer& w;

  void operator()(const GenerateRequest& r) {
    header(w, r.kind == RequestKind::kChat ? "chat" : "completion", r.id);
    w.key("model");
    w.str(r.model);
    if (r.kind == RequestKind::kChat) {
      w.key("messages");
      w.begin_array(static_cast<uint32_t>(r.messages.size()));
      for (const auto& m : r.messages) {
        w.begin_map();
        w.key("role");
        w.str(m.role);
        w.key("content");
        w.str(m.content);
        w.end_map();
      }
    } else {
      w.key("prompt");
      w.str(r.prompt);
    }
    w.key("prompt_tokens");
    w.i32s(r.prompt_tokens);
    detail::write_sampling(w, r.sampling);
    w.key("max_tokens");
    w.i64(r.max_tokens);
    w.key("stop");
    w.strs(r.stop);
    w.key("stop_token_ids");
    w.i32s(r.stop_token_ids);
    w.key("ignore_eos");
    w.boolean(r.ignore_eos);
    w.key("stream");
    w.boolean(r.stream);
    w.key("user");
    w.str(r.user);
    w.key("preference");
    w.str(r.preference);
    w.key("preference_tokens");
    w.i32s(r.preference_tokens);
    w.key("preference_alpha");
    w.f32(r.preference_alpha);
    w.key("priority");
    w.i64(r.priority);
    w.key("routing_key");
    w.str(r.routing_key);
    for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"api_key", &r.api_key},
                                     {"tenant", &r.tenant}, {"cache_salt", &r.cache_salt}})
      if (!value->empty()) {
        w.key(key);
        w.str(*value);
      }
    if (!r.documents.empty()) {
      w.key("documents");
      w.strs(r.documents);
    }
    if (!r.blend_chunks.empty()) {
      w.key("blend_chunks");  // flat [begin, length, ...]
      std::vector<int32_t> flat;
      for (const BlendChunk& c : r.blend_chunks) flat.insert(flat.end(), {c.begin, c.length});
      w.i32s(flat);
    }
    if (r.recompute_ratio >= 0.0f) {
      w.key("recompute_ratio");
      w.f32(r.recompute_ratio);
    }
    if (r.kv_policy.type != KvPolicyType::kNone) {
      const KvPolicy& k = r.kv_policy;
      w.key("kv_policy");
      w.begin_map();
      w.key("type");
      w.str(std::string(kv_policy_type_name(k.type)));
      const bool streaming = k.type == KvPolicyType::kStreaming;
      w.key(streaming ? "sinks" : "budget");
      w.i64(streaming ? k.sinks : k.budget);
      w.key(streaming ? "window" : "recent");
      w.i64(streaming ? k.window : k.recent);
      w.end_map();
    }
  }

  void operator()(const CancelRequest& r) { header(w, "cancel", r.id); }

  void operator()(const TokenEvent& e) {
    header(w, "token", e.id);
    w.key("tokens");
    w.i32s(e.tokens);
    w.key("text");
    w.str(e.text);
    write_logprobs(w, e.logprobs, e.top_logprobs);
    write_prompt_logprobs(w, e.prompt_logprobs, e.prompt_top_logprobs);
  }

  void operator()(const FinalEvent& e) {
    header(w, "final", e.id);
    w.key("finish_reason");
    w.str(e.finish_reason);
    w.key("text");
    w.str(e.text);
    w.key("tokens");
    w.i32s(e.tokens);
    write_logprobs(w, e.logprobs, e.top_logprobs);
    write_prompt_logprobs(w, e.prompt_logprobs, e.prompt_top_logprobs);
    w.key("usage");
    w.begin_map();
    w.key("prompt_tokens");
    w.i64(e.usage.prompt_tokens);
    w.key("completion_tokens");
    w.i64(e.usage.completion_tokens);
    w.key("cached_tokens");
    w.i64(e.usage.cached_tokens);
    if (e.usage.reused_tokens != 0) {
      w.key("reused_tokens");
      w.i64(e.usage.reused_tokens);
    }
    if (!e.usage.preference_source.empty()) {  // only when a preference was injected
      w.key("preference_source");
      w.str(e.usage.preference_source);
      w.key("preference_kv_bytes");
      w.i64(e.usage.preference_kv_bytes);
      w.key("preference_transfer_ms");
      w.f64(e.usage.preference_transfer_ms);
    }
    w.end_map();
    w.key("timings");
    w.begin_map();
    w.key("queue_ms");
    w.f64(e.timings.queue_ms);
    w.key("ttft_ms");
    w.f64(e.timings.ttft_ms);
    w.key("decode_ms");
    w.f64(e.timings.decode_ms);
    w.key("total_ms");
    w.f64(e.timings.total_ms);
    w.end_map();
  }

  void operator()(const ErrorEvent& e) {
    header(w, "error", e.id);
    w.key("code");
    w.i64(static_cast<int32_t>(e.code));
    w.key("error");
    w.str(error_code_name(e.code));
    w.key("message");
    w.str(e.message);
  }

  void operator()(const RegisterWorker& r) {
    header(w, "register", r.id);
    w.key("worker_name");
    w.str(r.worker_name);
    w.key("capabilities");
    w.strs(r.capabilities);
    w.key("model_fingerprint");
    w.u64(r.model_fingerprint);
    w.key("num_pages");
    w.i64(r.num_pages);
    w.key("page_size");
    w.i64(r.page_size);
    w.key("max_batch_tokens");
    w.i64(r.max_batch_tokens);
    w.key("max_seq_len");
    w.i64(r.max_seq_len);
    w.key("vocab_size");
    w.i64(r.vocab_size);
    w.key("eos_id");
    w.i64(r.eos_id);
  }

  void operator()(const RegisterAck& r) {
    header(w, "register_ack", r.id);
    w.key("accepted");
    w.boolean(r.accepted);
    w.key("reason");
    w.str(r.reason);
    w.key("heartbeat_ms");
    w.i64(r.heartbeat_ms);
    if (r.instance != 0) {
      w.key("instance");
      w.u64(r.instance);
    }
  }

  void operator()(const StepPlanMsg& m) {
    header(w, "step_plan", m.id);
    const StepPlan& p = m.plan;
    w.key("step_id");
    w.u64(p.step_id);
    w.key("copies");
    w.begin_array(static_cast<uint32_t>(p.copies.size()));
    for (const auto& c : p.copies) {
      w.begin_map();
      w.key("src");
      w.i64(c.src);
      w.key("dst");
      w.i64(c.dst);
      w.end_map();
    }
    w.key("fills");
    w.begin_array(static_cast<uint32_t>(p.fills.size()));
    for (const auto& f : p.fills) {
      w.begin_map();
      w.key("request_id");
      w.u64(f.request_id);
      w.key("blob_key");
      w.str(f.blob_key);
      w.key("pages");
      w.i32s(f.pages);
      w.key("num_tokens");
      w.i64(f.num_tokens);
      w.key("alpha");
      w.f32(f.alpha);
      w.key("tokens");
      w.i32s(f.tokens);
      w.end_map();
    }
    w.key("seqs");
    w.begin_array(static_cast<uint32_t>(p.seqs.size()));
    for (const auto& s : p.seqs) {
      w.begin_map();
      w.key("request_id");
      w.u64(s.request_id);
      w.key("tokens");
      w.i32s(s.tokens);
      w.key("start_pos");
      w.i64(s.start_pos);
      w.key("block_table");
      w.i32s(s.block_table);
      w.key("slot_mapping");
      w.i64s(s.slot_mapping);
      w.key("sample");
      w.boolean(s.sample);
      w.key("sampling");
      w.begin_map();
      detail::write_sampling(w, s.sampling);
      w.end_map();
      w.key("generated");
      w.i32s(s.generated);
      if (s.rope_offset != 0) {
        w.key("rope_offset");
        w.i64(s.rope_offset);
      }
      if (!s.moves.empty()) {
        w.key("moves");  // flat [src, dst, rope_delta, ...]
        std::vector<int32_t> flat;
        flat.reserve(s.moves.size() * 3);
        for (const KvMove& mv : s.moves) flat.insert(flat.end(), {mv.src, mv.dst, mv.rope_delta});
        w.i32s(flat);
      }
      if (s.h2o_recent >= 0) {
        w.key("h2o_recent");
        w.i64(s.h2o_recent);
        w.key("h2o_victims");
        w.i64(s.h2o_victims);
      }
      if (s.prompt_logprobs) {
        w.key("prompt_logprobs");
        w.boolean(true);
        w.key("next_token");
        w.i64(s.next_token);
      }
      if (!s.blend_chunks.empty()) {
        w.key("blend_chunks");  // flat [begin, length, ...]
        std::vector<int32_t> flat;
        for (const BlendChunk& c : s.blend_chunks) flat.insert(flat.end(), {c.begin, c.length});
        w.i32s(flat);
        w.key("blend_head");
        w.i32s(s.blend_head);
        if (!s.blend_tail.empty()) {
          w.key("blend_tail");
          w.i32s(s.blend_tail);
        }
        if (s.blend_head_from != 0) {
          w.key("blend_head_from");
          w.i64(s.blend_head_from);
        }
        w.key("blend_ratio");
        w.f32(s.blend_ratio);
        w.key("blend_salt");
        w.u64(s.blend_salt);
      }
      w.end_map();
    }
    w.key("released");
    w.u64s(p.released);
    detail::write_plan_offload(w, p);
  }

  void operator()(const StepResultMsg& m) {
    header(w, "step_result", m.id);
    const StepResult& r = m.result;
    w.key("step_id");
    w.u64(r.step_id);
    w.key("results");
    w.begin_array(static_cast<uint32_t>(r.results.size()));
    for (const auto& s : r.results) {
      w.begin_map();
      w.key("request_id");
      w.u64(s.request_id);
      w.key("token");
      w.i64(s.token);
      w.key("logprob");
      w.f32(s.logprob);
      w.key("top");
      write_top(w, s.top);
      if (!s.victims.empty()) {
        w.key("victims");
        w.i32s(s.victims);
      }
      if (s.reused_tokens != 0) {
        w.key("reused_tokens");
        w.i64(s.reused_tokens);
      }
      w.end_map();
    }
    w.key("error_code");
    w.i64(static_cast<int32_t>(r.error_code));
    w.key("error_message");
    w.str(r.error_message);
    w.key("compute_ms");
    w.f64(r.compute_ms);
    w.key("fills");
    w.begin_array(static_cast<uint32_t>(r.fills.size()));
    for (const auto& f : r.fills) {
      w.begin_map();
      w.key("request_id");
      w.u64(f.request_id);
      w.key("source");
      w.str(f.source);
      w.key("kv_bytes");
      w.i64(f.kv_bytes);
      w.key("transfer_ms");
      w.f64(f.transfer_ms);
      w.key("compute_ms");
      w.f64(f.compute_ms);
      w.end_map();
    }
    if (!r.prompt_logprobs.empty()) {
      w.key("prompt_logprobs");
      w.begin_array(static_cast<uint32_t>(r.prompt_logprobs.size()));
      for (const auto& p : r.prompt_logprobs) {
        w.begin_map();
        w.key("request_id");
        w.u64(p.request_id);
        w.key("first_pos");
        w.i64(p.first_pos);
        w.key("logprobs");
        w.f32s(p.logprobs);
        w.key("top");
        w.begin_array(static_cast<uint32_t>(p.top.size()));
        for (const auto& t : p.top) write_top(w, t);
        w.end_map();
      }
    }
    detail::write_result_offload(w, r);
  }

  void operator()(const Heartbeat& h) {
    header(w, "heartbeat", h.id);
    w.key("role");
    w.str(h.role);
    w.key("name");
    w.str(h.name);
    w.key("live_workers");
    w.i64(h.live_workers);
    w.key("running");
    w.i64(h.running);
    w.key("waiting");
    w.i64(h.waiting);
    w.key("free_pages");
    w.i64(h.free_pages);
    w.key("unix_ms");
    w.i64(h.unix_ms);
    if (h.instance != 0) {
      w.key("instance");
      w.u64(h.instance);
    }
    if (h.draining) {
      w.key("draining");
      w.boolean(true);
    }
    if (!h.model.empty()) {
      w.key("model");
      w.str(h.model);
    }
    const std::pair<const char*, int32_t> limits[] = {{"protocol_version", h.protocol_version}, {"context_length", h.context_length},
                                                      {"page_size", h.page_size}, {"max_prompt_tokens", h.max_prompt_tokens},
                                                      {"vocab_size", h.vocab_size}, {"default_max_tokens", h.default_max_tokens}};
    for (const auto& [key, value] : limits) {
      if (value == 0) continue;
      w.key(key);
      w.i64(value);
    }
    w.key("workers");
    w.begin_array(static_cast<uint32_t>(h.workers.size()));
    for (const auto& ws : h.workers) {
      w.begin_map();
      w.key("name");
      w.str(ws.name);
      w.key("free_pages");
      w.i64(ws.free_pages);
      w.key("held_pages");
      w.i64(ws.held_pages);
      w.key("cached_pages");
      w.i64(ws.cached_pages);
      w.key("running");
      w.i64(ws.running);
      w.key("waiting");
      w.i64(ws.waiting);
      w.key("prompt_tokens");
      w.i64(ws.prompt_tokens);
      w.key("cached_prompt_tokens");
      w.i64(ws.cached_prompt_tokens);
      w.end_map();
    }
    if (h.totals) {
      const SchedulerTotals& t = *h.totals;
      w.key("totals");
      w.begin_map();
      const std::pair<const char*, int64_t> counts[] = {{"finished_requests", t.finished_requests}, {"prompt_tokens", t.prompt_tokens},
                                                        {"cached_prompt_tokens", t.cached_prompt_tokens},
                                                        {"generation_tokens", t.generation_tokens}, {"preemptions", t.preemptions},
                                                        {"ttft_count", t.ttft_count}};
      for (const auto& [k, v] : counts) {
        w.key(k);
        w.i64(v);
      }
      w.key("ttft_seconds_sum");
      w.f64(t.ttft_seconds_sum);
      w.end_map();
    }
  }

  void operator()(const Drain& d) { header(w, "drain", d.id); }
  void operator()(const Shutdown& s) { header(w, "shutdown", s.id); }
  void operator()(const InvalidateUser& u) {
    header(w, "invalidate_user", u.id);
    w.key("user");
    w.str(u.user);
  }
  void operator()(const PrefixAdmin& a) {
    header(w, "prefix_admin", a.id);
    w.key("op");
    w.str(a.op);
    w.key("prompt_tokens");
    w.begin_array(static_cast<uint32_t>(a.prompt_tokens.size()));
    for (int32_t t : a.prompt_tokens) w.i64(t);
    const std::pair<const char*, const std::string*> strs[] = {
        {"routing_key", &a.routing_key}, {"tenant", &a.tenant}, {"cache_salt", &a.cache_salt}};
    for (const auto& [k, v] : strs) {
      w.key(k);
      w.str(*v);
    }
    w.key("workers");
    w.begin_array(static_cast<uint32_t>(a.workers.size()));
    for (const auto& n : a.workers) w.str(n);
    w.key("prefix");
    w.u64(a.prefix);
    w.key("limit");
    w.i64(a.limit);
  }
  void operator()(const PrefixReport& r) {
    header(w, "prefix_report", r.id);
    w.key("scheduler");
    w.str(r.scheduler);
    w.key("entries");
    w.begin_array(static_cast<uint32_t>(r.entries.size()));
    for (const auto& e : r.entries) {
      w.begin_map();
      w.key("worker");
      w.str(e.worker);
      w.key("hash");
      w.u64(e.hash);
      w.key("ns_hash");
      w.u64(e.ns_hash);
      w.key("tokens");
      w.i64(e.tokens);
      w.key("pages");
      w.i64(e.pages);
      w.key("hits");
      w.i64(e.hits);
      w.key("pinned");
      w.boolean(e.pinned);
      w.key("error");
      w.str(e.error);
      w.end_map();
    }
    w.key("pinned_pages");
    w.i64(r.pinned_pages);
    w.key("pin_budget_pages");
    w.i64(r.pin_budget_pages);
  }
};

struct TypeName {
  std::string_view operator()(const GenerateRequest& r) const {
    return r.kind == RequestKind::kChat ? "chat" : "completion";
  }
  std::string_view operator()(const CancelRequest&) const { return "cancel"; }
  std::string_view operator()(const TokenEvent&) const { return "token"; }
  std::string_view operator()(const FinalEvent&) const { return "final"; }
  std::string_view operator()(const ErrorEvent&) const { return "error"; }
  std::string_view operator()(const RegisterWorker&) const { return "register"; }
  std::string_view operator()(const RegisterAck&) const { return "register_ack"; }
  std::string_view operator()(const StepPlanMsg&) const { return "step_plan"; }
  std::string_view operator()(const StepResultMsg&) const { return "step_result"; }
  std::string_view operator()(const Heartbeat&) const { return "heartbeat"; }
  std::string_view operator()(const Drain&) const { return "drain"; }
  std::string_view operator()(const Shutdown&) const { return "shutdown"; }
  std::string_view operator()(const InvalidateUser&) const { return "invalidate_user"; }
  std::string_view operator()(const PrefixAdmin&) const { return "prefix_admin"; }
  std::string_view operator()(const PrefixReport&) const { return "prefix_report"; }
};

}  // namespace

std::string_view message_type(const Message& m) { return std::visit(TypeName{}, m); }

uint64_t message_id(const Message& m) {
  return std::visit([](const auto& x) -> uint64_t { return x.id; }, m);
}

std::string encode(const Message& m) {
  Writer w;
  w.begin_map();
  std::visit(Encoder{w}, m);
  w.end_map();
  return w.take();
}

std::string encode_error(uint64_t id, ErrorCode code, std::string message) {
  return encode(ErrorEvent{.id = id, .code = code, .message = std::move(message)});
}

}  // namespace tessera::protocol
