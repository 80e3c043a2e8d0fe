// Protocol v1 decoder (validation of the decoded values: protocol_validate.cpp). Never throws:
// msgpack-c exceptions (truncated input, parse errors, size limits) are caught here and become
// kMalformedMessage.
#include <exception>

#include "msgpack_io.h"
#include "protocol_offload.h"
#include "tessera/common/protocol.h"

namespace tessera::protocol {
namespace {

using detail::MapView;
using detail::num;
using detail::opt;
using detail::opt_array;
using detail::range_error;
using detail::req;

// Bounds on what msgpack-c may allocate while parsing untrusted bytes.
const msgpack::unpack_limit kLimits(/*array=*/1u << 22, /*map=*/4096, /*str=*/kMaxMessageBytes,
                                    /*bin=*/kMaxMessageBytes, /*ext=*/1u << 20, /*depth=*/16);

Status top_list(const msgpack::object& o, const std::string& path, std::vector<TokenLogprob>* out) {
  if (o.type != msgpack::type::ARRAY)
    return make_error(ErrorCode::kInvalidArgument, "field '" + path + "' must be an array (got " + detail::type_name(o) + ")");
  out->clear();
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    const std::string p = path + "[" + std::to_string(i) + "]";
    TS_ASSIGN_OR_RETURN(MapView m, detail::as_map(o.via.array.ptr[i], p));
    TokenLogprob t;
    TS_TRY(req(m, "token", &t.token));
    TS_TRY(req(m, "logprob", &t.logprob));
    out->push_back(t);
  }
  return ok_status();
}

Status decode_request(const MapView& m, RequestKind kind, GenerateRequest* r) {
  r->kind = kind;
  TS_TRY(opt(m, "model", &r->model));
  if (kind == RequestKind::kChat) {
    auto read_messages = [&](const msgpack::object& o, const std::string& p) -> Status {
      TS_ASSIGN_OR_RETURN(MapView mm, detail::as_map(o, p));
      ChatMessage cm;
      TS_TRY(req(mm, "role", &cm.role));
      TS_TRY(req(mm, "content", &cm.content));
      r->messages.push_back(std::move(cm));
      return ok_status();
    };
    TS_TRY(opt_array(m, "messages", read_messages));
  } else {
    TS_TRY(opt(m, "prompt", &r->prompt));
  }
  TS_TRY(opt(m, "prompt_tokens", &r->prompt_tokens));
  TS_TRY(detail::read_sampling(m, &r->sampling));
  TS_TRY(opt(m, "max_tokens", &r->max_tokens));
  TS_TRY(opt(m, "stop", &r->stop));
  TS_TRY(opt(m, "stop_token_ids", &r->stop_token_ids));
  TS_TRY(opt(m, "ignore_eos", &r->ignore_eos));
  TS_TRY(opt(m, "stream", &r->stream));
  TS_TRY(opt(m, "user", &r->user));
  TS_TRY(opt(m, "preference", &r->preference));
  TS_TRY(opt(m, "preference_tokens", &r->preference_tokens));
  TS_TRY(opt(m, "preference_alpha", &r->preference_alpha));
  TS_TRY(opt(m, "priority", &r->priority));
  TS_TRY(opt(m, "routing_key", &r->routing_key));
  TS_TRY(opt(m, "api_key", &r->api_key));
  TS_TRY(opt(m, "tenant", &r->tenant));
  TS_TRY(opt(m, "cache_salt", &r->cache_salt));
  TS_TRY(opt(m, "documents", &r->documents));
  std::vector<int32_t> blend;
  TS_TRY(opt(m, "blend_chunks", &blend));
  if (blend.size() % 2 != 0 || blend.size() / 2 > kMaxBlendChunks || r->documents.size() > kMaxBlendChunks) {
    return make_error(ErrorCode::kInvalidArgument, "documents / blend_chunks: at most " + std::to_string(kMaxBlendChunks) +
                                                       " documents ([begin, length] pairs)");
  }
  for (size_t i = 0; i < blend.size(); i += 2) r->blend_chunks.push_back(BlendChunk{blend[i], blend[i + 1]});
  TS_TRY(opt(m, "recompute_ratio", &r->recompute_ratio));
  if (const msgpack::object* ko = m.find("kv_policy")) {
    TS_ASSIGN_OR_RETURN(MapView km, detail::as_map(*ko, m.field("kv_policy")));
    std::string type;
    TS_TRY(req(km, "type", &type));
    KvPolicy& k = r->kv_policy;
    if (type == "streaming") {
      k.type = KvPolicyType::kStreaming;
      TS_TRY(opt(km, "sinks", &k.sinks));
      TS_TRY(req(km, "window", &k.window));
    } else if (type == "h2o") {
      k.type = KvPolicyType::kH2O;
      TS_TRY(req(km, "budget", &k.budget));
      TS_TRY(opt(km, "recent", &k.recent));
    } else if (type != "none") {
      return make_error(ErrorCode::kInvalidArgument, "kv_policy.type must be none, streaming or h2o (got '" + type + "')");
    }
  }
  return validate(*r);
}

Status decode_token(const MapView& m, TokenEvent* e) {
  TS_TRY(opt(m, "tokens", &e->tokens));
  TS_TRY(opt(m, "text", &e->text));
  TS_TRY(opt(m, "logprobs", &e->logprobs));
  auto read_top_logprobs = [&](const msgpack::object& o, const std::string& p) -> Status {
    std::vector<TokenLogprob> top;
    TS_TRY(top_list(o, p, &top));
    e->top_logprobs.push_back(std::move(top));
    return ok_status();
  };
  TS_TRY(opt_array(m, "top_logprobs", read_top_logprobs));
  TS_TRY(opt(m, "prompt_logprobs", &e->prompt_logprobs));
  auto read_prompt_top = [&](const msgpack::object& o, const std::string& p) -> Status {
    std::vector<TokenLogprob> top;
    TS_TRY(top_list(o, p, &top));
    e->prompt_top_logprobs.push_back(std::move(top));
    return ok_status();
  };
  TS_TRY(opt_array(m, "prompt_top_logprobs", read_prompt_top));
  return ok_status();
}

Status decode_final(const MapView& m, FinalEvent* e) {
  TS_TRY(opt(m, "finish_reason", &e->finish_reason));
  TS_TRY(opt(m, "text", &e->text));
  TS_TRY(opt(m, "tokens", &e->tokens));
  TS_TRY(opt(m, "logprobs", &e->logprobs));
  auto read_top_logprobs = [&](const msgpack::object& o, const std::string& p) -> Status {
    std::vector<TokenLogprob> top;
    TS_TRY(top_list(o, p, &top));
    e->top_logprobs.push_back(std::move(top));
    return ok_status();
  };
  TS_TRY(opt_array(m, "top_logprobs", read_top_logprobs));
  TS_TRY(opt(m, "prompt_logprobs", &e->prompt_logprobs));
  auto read_prompt_top = [&](const msgpack::object& o, const std::string& p) -> Status {
    std::vector<TokenLogprob> top;
    TS_TRY(top_list(o, p, &top));
    e->prompt_top_logprobs.push_back(std::move(top));
    return ok_status();
  };
  TS_TRY(opt_array(m, "prompt_top_logprobs", read_prompt_top));
  if (const msgpack::object* u = m.find("usage")) {
    TS_ASSIGN_OR_RETURN(MapView um, detail::as_map(*u, "usage"));
    TS_TRY(opt(um, "prompt_tokens", &e->usage.prompt_tokens));
    TS_TRY(opt(um, "completion_tokens", &e->usage.completion_tokens));
    TS_TRY(opt(um, "cached_tokens", &e->usage.cached_tokens));
    TS_TRY(opt(um, "reused_tokens", &e->usage.reused_tokens));
    TS_TRY(opt(um, "preference_source", &e->usage.preference_source));
    TS_TRY(opt(um, "preference_kv_bytes", &e->usage.preference_kv_bytes));
    TS_TRY(opt(um, "preference_transfer_ms", &e->usage.preference_transfer_ms));
  }
  if (const msgpack::object* t = m.find("timings")) {
    TS_ASSIGN_OR_RETURN(MapView tm, detail::as_map(*t, "timings"));
    TS_TRY(opt(tm, "queue_ms", &e->timings.queue_ms));
    TS_TRY(opt(tm, "ttft_ms", &e->timings.ttft_ms));
    TS_TRY(opt(tm, "decode_ms", &e->timings.decode_ms));
    TS_TRY(opt(tm, "total_ms", &e->timings.total_ms));
  }
  return ok_status();
}

Status decode_error(const MapView& m, ErrorEvent* e) {
  int32_t code = static_cast<int32_t>(ErrorCode::kInternal);
  TS_TRY(req(m, "code", &code));
  e->code = static_cast<ErrorCode>(code);
  TS_TRY(opt(m, "message", &e->message));
  return ok_status();
}

Status decode_register(const MapView& m, RegisterWorker* r) {
  TS_TRY(req(m, "worker_name", &r->worker_name));
  TS_TRY(opt(m, "capabilities", &r->capabilities));
  TS_TRY(req(m, "model_fingerprint", &r->model_fingerprint));
  TS_TRY(req(m, "num_pages", &r->num_pages));
  TS_TRY(opt(m, "page_size", &r->page_size));
  TS_TRY(req(m, "max_batch_tokens", &r->max_batch_tokens));
  TS_TRY(req(m, "max_seq_len", &r->max_seq_len));
  TS_TRY(req(m, "vocab_size", &r->vocab_size));
  TS_TRY(opt(m, "eos_id", &r->eos_id));
  if (r->worker_name.empty()) return make_error(ErrorCode::kInvalidArgument, "worker_name must not be empty");
  if (r->num_pages < 1) return range_error("num_pages must be >= 1 (got " + num(r->num_pages) + ")");
  if (r->page_size < 1) return range_error("page_size must be >= 1 (got " + num(r->page_size) + ")");
  if (r->max_batch_tokens < 1) return range_error("max_batch_tokens must be >= 1 (got " + num(r->max_batch_tokens) + ")");
  if (r->max_seq_len < 1) return range_error("max_seq_len must be >= 1 (got " + num(r->max_seq_len) + ")");
  if (r->vocab_size < 1) return range_error("vocab_size must be >= 1 (got " + num(r->vocab_size) + ")");
  return ok_status();
}

Status decode_register_ack(const MapView& m, RegisterAck* r) {
  TS_TRY(req(m, "accepted", &r->accepted));
  TS_TRY(opt(m, "reason", &r->reason));
  TS_TRY(opt(m, "heartbeat_ms", &r->heartbeat_ms));
  TS_TRY(opt(m, "instance", &r->instance));
  if (r->heartbeat_ms < 1) return range_error("heartbeat_ms must be >= 1 (got " + num(r->heartbeat_ms) + ")");
  return ok_status();
}

Status decode_plan(const MapView& m, StepPlan* p) {
  TS_TRY(req(m, "step_id", &p->step_id));
  auto read_copies = [&](const msgpack::object& o, const std::string& path) -> Status {
    TS_ASSIGN_OR_RETURN(MapView c, detail::as_map(o, path));
    PageCopy pc;
    TS_TRY(req(c, "src", &pc.src));
    TS_TRY(req(c, "dst", &pc.dst));
    p->copies.push_back(pc);
    return ok_status();
  };
  TS_TRY(opt_array(m, "copies", read_copies));
  auto read_fills = [&](const msgpack::object& o, const std::string& path) -> Status {
    TS_ASSIGN_OR_RETURN(MapView f, detail::as_map(o, path));
    KvFill kf;
    TS_TRY(req(f, "request_id", &kf.request_id));
    TS_TRY(req(f, "blob_key", &kf.blob_key));
    TS_TRY(req(f, "pages", &kf.pages));
    TS_TRY(req(f, "num_tokens", &kf.num_tokens));
    TS_TRY(opt(f, "alpha", &kf.alpha));
    TS_TRY(opt(f, "tokens", &kf.tokens));
    p->fills.push_back(std::move(kf));
    return ok_status();
  };
  TS_TRY(opt_array(m, "fills", read_fills));
  auto read_seqs = [&](const msgpack::object& o, const std::string& path) -> Status {
    TS_ASSIGN_OR_RETURN(MapView s, detail::as_map(o, path));
    SeqPlan sp;
    TS_TRY(req(s, "request_id", &sp.request_id));
    TS_TRY(req(s, "tokens", &sp.tokens));
    TS_TRY(req(s, "start_pos", &sp.start_pos));
    TS_TRY(req(s, "block_table", &sp.block_table));
    TS_TRY(req(s, "slot_mapping", &sp.slot_mapping));
    TS_TRY(opt(s, "sample", &sp.sample));
    if (const msgpack::object* so = s.find("sampling")) {
      TS_ASSIGN_OR_RETURN(MapView sm, detail::as_map(*so, s.field("sampling")));
      TS_TRY(detail::read_sampling(sm, &sp.sampling));
    }
    TS_TRY(opt(s, "generated", &sp.generated));
    TS_TRY(opt(s, "rope_offset", &sp.rope_offset));
    std::vector<int32_t> moves;
    TS_TRY(opt(s, "moves", &moves));
    if (moves.size() % 3 != 0) {
      return make_error(ErrorCode::kInvalidArgument, s.field("moves") + " must hold [src, dst, rope_delta] triples");
    }
    for (size_t i = 0; i < moves.size(); i += 3) sp.moves.push_back(KvMove{moves[i], moves[i + 1], moves[i + 2]});
    TS_TRY(opt(s, "h2o_recent", &sp.h2o_recent));
    TS_TRY(opt(s, "h2o_victims", &sp.h2o_victims));
    TS_TRY(opt(s, "prompt_logprobs", &sp.prompt_logprobs));
    TS_TRY(opt(s, "next_token", &sp.next_token));
    std::vector<int32_t> blend;
    TS_TRY(opt(s, "blend_chunks", &blend));
    if (blend.size() % 2 != 0 || blend.size() / 2 > kMaxBlendChunks) {
      return make_error(ErrorCode::kInvalidArgument, s.field("blend_chunks") + " must hold at most " +
                                                         std::to_string(kMaxBlendChunks) + " [begin, length] pairs");
    }
    for (size_t i = 0; i < blend.size(); i += 2) sp.blend_chunks.push_back(BlendChunk{blend[i], blend[i + 1]});
    TS_TRY(opt(s, "blend_head", &sp.blend_head));
    TS_TRY(opt(s, "blend_tail", &sp.blend_tail));
    TS_TRY(opt(s, "blend_head_from", &sp.blend_head_from));
    TS_TRY(opt(s, "blend_ratio", &sp.blend_ratio));
    TS_TRY(opt(s, "blend_salt", &sp.blend_salt));
    p->seqs.push_back(std::move(sp));
    return ok_status();
  };
  TS_TRY(opt_array(m, "seqs", read_seqs));
  TS_TRY(opt(m, "released", &p->released));
  TS_TRY(detail::read_plan_offload(m, p));
  return validate(*p);
}

Status decode_result(const MapView& m, StepResult* r) {
  TS_TRY(req(m, "step_id", &r->step_id));
  auto read_results = [&](const msgpack::object& o, const std::string& path) -> Status {
    TS_ASSIGN_OR_RETURN(MapView s, detail::as_map(o, path));
    SeqResult sr;
    TS_TRY(req(s, "request_id", &sr.request_id));
    TS_TRY(req(s, "token", &sr.token));
    TS_TRY(opt(s, "logprob", &sr.logprob));
    if (const msgpack::object* t = s.find("top")) TS_TRY(top_list(*t, s.field("top"), &sr.top));
    TS_TRY(opt(s, "victims", &sr.victims));
    TS_TRY(opt(s, "reused_tokens", &sr.reused_tokens));
    r->results.push_back(std::move(sr));
    return ok_status();
  };
  TS_TRY(opt_array(m, "results", read_results));
  TS_TRY(opt(m, "error_code", &r->error_code));
  TS_TRY(opt(m, "error_message", &r->error_message));
  TS_TRY(opt(m, "compute_ms", &r->compute_ms));
  auto read_fills = [&](const msgpack::object& o, const std::string& path) -> Status {
    TS_ASSIGN_OR_RETURN(MapView f, detail::as_map(o, path));
    FillResult fr;
    TS_TRY(req(f, "request_id", &fr.request_id));
    TS_TRY(opt(f, "source", &fr.source));
    TS_TRY(opt(f, "kv_bytes", &fr.kv_bytes));
    TS_TRY(opt(f, "transfer_ms", &fr.transfer_ms));
    TS_TRY(opt(f, "compute_ms", &fr.compute_ms));
    r->fills.push_back(std::move(fr));
    return ok_status();
  };
  TS_TRY(opt_array(m, "fills", read_fills));
  auto read_prompt = [&](const msgpack::object& o, const std::string& path) -> Status {
    TS_ASSIGN_OR_RETURN(MapView f, detail::as_map(o, path));
    PromptLogprobs pl;
    TS_TRY(req(f, "request_id", &pl.request_id));
    TS_TRY(req(f, "first_pos", &pl.first_pos));
    TS_TRY(req(f, "logprobs", &pl.logprobs));
    auto read_top = [&](const msgpack::object& t, const std::string& p) -> Status {
      std::vector<TokenLogprob> top;
      TS_TRY(top_list(t, p, &top));
      pl.top.push_back(std::move(top));
      return ok_status();
    };
    TS_TRY(opt_array(f, "top", read_top));
    if (!pl.top.empty() && pl.top.size() != pl.logprobs.size())
      return make_error(ErrorCode::kInvalidArgument, path + ".top has " + std::to_string(pl.top.size()) + " entries for " +
                                                         std::to_string(pl.logprobs.size()) + " logprobs");
    r->prompt_logprobs.push_back(std::move(pl));
    return ok_status();
  };
  TS_TRY(opt_array(m, "prompt_logprobs", read_prompt));
  return detail::read_result_offload(m, r);
}

Status decode_heartbeat(const MapView& m, Heartbeat* h) {
  TS_TRY(opt(m, "role", &h->role));
  TS_TRY(opt(m, "name", &h->name));
  TS_TRY(opt(m, "live_workers", &h->live_workers));
  TS_TRY(opt(m, "running", &h->running));
  TS_TRY(opt(m, "waiting", &h->waiting));
  TS_TRY(opt(m, "free_pages", &h->free_pages));
  TS_TRY(opt(m, "unix_ms", &h->unix_ms));
  TS_TRY(opt(m, "instance", &h->instance));
  TS_TRY(opt(m, "draining", &h->draining));
  TS_TRY(opt(m, "model", &h->model));
  TS_TRY(opt(m, "protocol_version", &h->protocol_version));
  TS_TRY(opt(m, "context_length", &h->context_length));
  TS_TRY(opt(m, "page_size", &h->page_size));
  TS_TRY(opt(m, "max_prompt_tokens", &h->max_prompt_tokens));
  TS_TRY(opt(m, "vocab_size", &h->vocab_size));
  TS_TRY(opt(m, "default_max_tokens", &h->default_max_tokens));
  auto read_workers = [&](const msgpack::object& o, const std::string& path) -> Status {
    TS_ASSIGN_OR_RETURN(MapView w, detail::as_map(o, path));
    WorkerStats ws;
    TS_TRY(opt(w, "name", &ws.name));
    TS_TRY(opt(w, "free_pages", &ws.free_pages));
    TS_TRY(opt(w, "held_pages", &ws.held_pages));
    TS_TRY(opt(w, "cached_pages", &ws.cached_pages));
    TS_TRY(opt(w, "running", &ws.running));
    TS_TRY(opt(w, "waiting", &ws.waiting));
    TS_TRY(opt(w, "prompt_tokens", &ws.prompt_tokens));
    TS_TRY(opt(w, "cached_prompt_tokens", &ws.cached_prompt_tokens));
    h->workers.push_back(std::move(ws));
    return ok_status();
  };
  TS_TRY(opt_array(m, "workers", read_workers));
  if (const msgpack::object* t = m.find("totals"); t != nullptr) {
    TS_ASSIGN_OR_RETURN(MapView tm, detail::as_map(*t, "totals"));
    SchedulerTotals& st = h->totals.emplace();
    TS_TRY(opt(tm, "finished_requests", &st.finished_requests));
    TS_TRY(opt(tm, "prompt_tokens", &st.prompt_tokens));
    TS_TRY(opt(tm, "cached_prompt_tokens", &st.cached_prompt_tokens));
    TS_TRY(opt(tm, "generation_tokens", &st.generation_tokens));
    TS_TRY(opt(tm, "preemptions", &st.preemptions));
    TS_TRY(opt(tm, "ttft_count", &st.ttft_count));
    TS_TRY(opt(tm, "ttft_seconds_sum", &st.ttft_seconds_sum));
  }
  return ok_status();
}

Status decode_prefix_admin(const MapView& m, PrefixAdmin* a) {
  TS_TRY(req(m, "op", &a->op));
  if (a->op != "pin" && a->op != "unpin" && a->op != "list")
    return make_error(ErrorCode::kInvalidArgument, "field 'op' must be \"pin\", \"unpin\" or \"list\" (got \"" + a->op + "\")");
  TS_TRY(opt(m, "prompt_tokens", &a->prompt_tokens));
  TS_TRY(opt(m, "routing_key", &a->routing_key));
  TS_TRY(opt(m, "tenant", &a->tenant));
  TS_TRY(opt(m, "cache_salt", &a->cache_salt));
  TS_TRY(opt(m, "workers", &a->workers));
  TS_TRY(opt(m, "prefix", &a->prefix));
  TS_TRY(opt(m, "limit", &a->limit));
  if (a->limit < 0 || a->limit > kMaxPrefixListLimit)
    return range_error("field 'limit' must be in [0, " + std::to_string(kMaxPrefixListLimit) + "] (got " + num(a->limit) + ")");
  if (a->op == "pin" && a->prompt_tokens.empty())
    return make_error(ErrorCode::kInvalidArgument, "field 'prompt_tokens' must not be empty for op \"pin\"");
  for (int32_t t : a->prompt_tokens)
    if (t < 0) return range_error("field 'prompt_tokens' holds a negative token id " + num(t));
  if (a->op == "unpin" && a->prefix == 0)
    return make_error(ErrorCode::kInvalidArgument, "field 'prefix' (the pin's hash) is required for op \"unpin\"");
  if (a->tenant.size() > kMaxTenantBytes || a->cache_salt.size() > kMaxCacheSaltBytes)
    return make_error(ErrorCode::kInvalidArgument, "field 'tenant' or 'cache_salt' is too long");
  return ok_status();
}

Status decode_prefix_report(const MapView& m, PrefixReport* r) {
  TS_TRY(opt(m, "scheduler", &r->scheduler));
  TS_TRY(opt(m, "pinned_pages", &r->pinned_pages));
  TS_TRY(opt(m, "pin_budget_pages", &r->pin_budget_pages));
  return opt_array(m, "entries", [&](const msgpack::object& o, const std::string& path) -> Status {
    TS_ASSIGN_OR_RETURN(MapView e, detail::as_map(o, path));
    PrefixEntry pe;
    TS_TRY(opt(e, "worker", &pe.worker));
    TS_TRY(opt(e, "hash", &pe.hash));
    TS_TRY(opt(e, "ns_hash", &pe.ns_hash));
    TS_TRY(opt(e, "tokens", &pe.tokens));
    TS_TRY(opt(e, "pages", &pe.pages));
    TS_TRY(opt(e, "hits", &pe.hits));
    TS_TRY(opt(e, "pinned", &pe.pinned));
    TS_TRY(opt(e, "error", &pe.error));
    r->entries.push_back(std::move(pe));
    return ok_status();
  });
}

template <class T, class Fn>
Result<Message> build(uint64_t id, const MapView& m, Fn fn) {
  T msg;
  msg.id = id;
  TS_TRY(fn(m, &msg));
  return Message(std::move(msg));
}

Result<Message> decode_object(const msgpack::object& root) {
  TS_ASSIGN_OR_RETURN(MapView m, detail::as_map(root, ""));
  int64_t v = 0;
  TS_TRY(req(m, "v", &v));
  if (v != kProtocolVersion)
    return make_error(ErrorCode::kProtocolMismatch,
                      "protocol version " + std::to_string(v) + " is not supported (this build speaks v" +
                          std::to_string(kProtocolVersion) + ")");
  std::string type;
  TS_TRY(req(m, "type", &type));
  uint64_t id = 0;
  TS_TRY(req(m, "id", &id));
  auto none = [](const MapView&, auto*) { return ok_status(); };
  if (type == "completion")
    return build<GenerateRequest>(id, m, [](const MapView& mm, GenerateRequest* r) {
      return decode_request(mm, RequestKind::kCompletion, r);
    });
  if (type == "chat")
    return build<GenerateRequest>(id, m, [](const MapView& mm, GenerateRequest* r) {
      return decode_request(mm, RequestKind::kChat, r);
    });
  if (type == "cancel") return build<CancelRequest>(id, m, none);
  if (type == "token") return build<TokenEvent>(id, m, decode_token);
  if (type == "final") return build<FinalEvent>(id, m, decode_final);
  if (type == "error") return build<ErrorEvent>(id, m, decode_error);
  if (type == "register") return build<RegisterWorker>(id, m, decode_register);
  if (type == "register_ack") return build<RegisterAck>(id, m, decode_register_ack);
  if (type == "step_plan")
    return build<StepPlanMsg>(id, m, [](const MapView& mm, StepPlanMsg* p) { return decode_plan(mm, &p->plan); });
  if (type == "step_result")
    return build<StepResultMsg>(id, m, [](const MapView& mm, StepResultMsg* r) { return decode_result(mm, &r->result); });
  if (type == "heartbeat") return build<Heartbeat>(id, m, decode_heartbeat);
  if (type == "drain") return build<Drain>(id, m, none);
  if (type == "shutdown") return build<Shutdown>(id, m, none);
  if (type == "invalidate_user")
    return build<InvalidateUser>(id, m, [](const MapView& mm, InvalidateUser* u) -> Status {
      TS_TRY(req(mm, "user", &u->user));
      if (u->user.empty()) return make_error(ErrorCode::kInvalidArgument, "user must not be empty");
      return ok_status();
    });
  if (type == "prefix_admin") return build<PrefixAdmin>(id, m, decode_prefix_admin);
  if (type == "prefix_report") return build<PrefixReport>(id, m, decode_prefix_report);
  return make_error(ErrorCode::kInvalidArgument, "unknown message type '" + type + "'");
}

}  // namespace

Result<Message> decode(std::string_view bytes) {
  if (bytes.empty()) return make_error(ErrorCode::kMalformedMessage, "empty message");
  if (bytes.size() > kMaxMessageBytes)
    return make_error(ErrorCode::kTooLarge, "message of " + std::to_string(bytes.size()) + " bytes exceeds " +
                                                std::to_string(kMaxMessageBytes));
  TS_ASSIGN_OR_RETURN(msgpack::object_handle oh, msgpack_io::unpack(bytes, kLimits));
  return decode_object(oh.get());
}

uint64_t peek_id(std::string_view bytes) {
  try {
    msgpack::object_handle oh = msgpack::unpack(bytes.data(), bytes.size(), nullptr, nullptr, kLimits);
    if (oh.get().type != msgpack::type::MAP) return 0;
    MapView m(oh.get(), "");
    uint64_t id = 0;
    if (!opt(m, "id", &id).ok()) return 0;
    return id;
  } catch (const std::exception&) {
    return 0;
  }
}

bool peek_has_key(std::string_view bytes, std::string_view key) {
  try {
    msgpack::object_handle oh = msgpack::unpack(bytes.data(), bytes.size(), nullptr, nullptr, kLimits);
    if (oh.get().type != msgpack::type::MAP) return false;
    const msgpack::object_map& map = oh.get().via.map;
    for (uint32_t i = 0; i < map.size; ++i) {
      const msgpack::object& k = map.ptr[i].key;
      if (k.type == msgpack::type::STR && std::string_view(k.via.str.ptr, k.via.str.size) == key)
        return map.ptr[i].val.type != msgpack::type::NIL;
    }
    return false;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace tessera::protocol
