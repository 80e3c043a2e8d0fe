#include "wire.h"

#include <utility>

#include "tessera/common/msgpack_io.h"

namespace tessera::client::detail {
namespace {

using msgpack_io::Writer;

void header(Writer& w, std::string_view type, uint64_t id) {
  w.key("v");
  w.i64(protocol::kProtocolVersion);
  w.key("type");
  w.str(type);
  w.key("id");
  w.u64(id);
}

template <class T, class Fn>
void put(Writer& w, std::string_view key, const std::optional<T>& v, Fn write) {
  if (!v) return;
  w.key(key);
  write(*v);
}

std::vector<TopLogprob> to_public(const std::vector<tessera::TokenLogprob>& top) {
  std::vector<TopLogprob> out;
  out.reserve(top.size());
  for (const auto& t : top) out.push_back(TopLogprob{.token = t.token, .logprob = t.logprob});
  return out;
}

std::vector<std::vector<TopLogprob>> to_public(const std::vector<std::vector<tessera::TokenLogprob>>& tops) {
  std::vector<std::vector<TopLogprob>> out;
  out.reserve(tops.size());
  for (const auto& t : tops) out.push_back(to_public(t));
  return out;
}

void set_usage_timings(Completion& c, protocol::FinalEvent& f) {
  c.request_id = f.id;
  c.finish_reason = std::move(f.finish_reason);
  c.usage.prompt_tokens = f.usage.prompt_tokens;
  c.usage.completion_tokens = f.usage.completion_tokens;
  c.usage.cached_tokens = f.usage.cached_tokens;
  if (!f.usage.preference_source.empty()) {  // the three come together (docs/protocol.md "final")
    c.usage.preference_source = std::move(f.usage.preference_source);
    c.usage.preference_kv_bytes = f.usage.preference_kv_bytes;
    c.usage.preference_transfer_ms = f.usage.preference_transfer_ms;
  }
  c.timings = Timings{.queue_ms = f.timings.queue_ms, .ttft_ms = f.timings.ttft_ms,
                      .decode_ms = f.timings.decode_ms, .total_ms = f.timings.total_ms};
}

}  // namespace

std::string encode_request(uint64_t id, bool stream, const Prompt& prompt, const RequestOptions& o,
                           const std::string& api_key) {
  Writer w;
  w.reserve(256);
  w.begin_map();
  header(w, prompt.messages != nullptr ? "chat" : "completion", id);
  w.key("stream");
  w.boolean(stream);
  if (prompt.messages != nullptr) {
    w.key("messages");
    w.begin_array(static_cast<uint32_t>(prompt.messages->size()));
    for (const auto& m : *prompt.messages) {
      w.begin_map();
      w.key("role");
      w.str(m.role);
      w.key("content");
      w.str(m.content);
      w.end_map();
    }
  } else if (prompt.tokens != nullptr) {
    w.key("prompt_tokens");
    w.i32s(*prompt.tokens);
  } else if (prompt.text != nullptr) {
    w.key("prompt");
    w.str(*prompt.text);
  }
  auto str = [&](const std::string& s) { w.str(s); };
  auto i32 = [&](int32_t v) { w.i64(v); };
  auto f64 = [&](double v) { w.f64(v); };
  auto boolean = [&](bool v) { w.boolean(v); };
  put(w, "model", o.model, str);
  put(w, "max_tokens", o.max_tokens, i32);
  put(w, "temperature", o.temperature, f64);
  put(w, "top_p", o.top_p, f64);
  put(w, "top_k", o.top_k, i32);
  put(w, "min_p", o.min_p, f64);
  put(w, "repetition_penalty", o.repetition_penalty, f64);
  put(w, "presence_penalty", o.presence_penalty, f64);
  put(w, "frequency_penalty", o.frequency_penalty, f64);
  put(w, "seed", o.seed, [&](uint64_t v) { w.u64(v); });
  if (!o.logit_bias.empty()) {
    w.key("logit_bias");
    w.begin_array(static_cast<uint32_t>(o.logit_bias.size()));
    for (const auto& b : o.logit_bias) {
      w.begin_map();
      w.key("token");
      w.i64(b.token);
      w.key("bias");
      w.f64(b.bias);
      w.end_map();
    }
  }
  put(w, "logprobs", o.logprobs, boolean);
  put(w, "top_logprobs", o.top_logprobs, i32);
  if (!o.stop.empty()) {
    w.key("stop");
    w.strs(o.stop);
  }
  if (!o.stop_token_ids.empty()) {
    w.key("stop_token_ids");
    w.i32s(o.stop_token_ids);
  }
  put(w, "ignore_eos", o.ignore_eos, boolean);
  put(w, "user", o.user, str);
  put(w, "preference", o.preference, str);
  put(w, "preference_alpha", o.preference_alpha, f64);
  put(w, "priority", o.priority, i32);
  put(w, "routing_key", o.routing_key, str);
  put(w, "cache_salt", o.cache_salt, str);
  if (o.kv_policy) {
    w.key("kv_policy");
    w.begin_map();
    w.key("type");
    if (const auto* s = std::get_if<StreamingPolicy>(&*o.kv_policy)) {
      w.str("streaming");
      w.key("sinks");
      w.i64(s->sinks);
      w.key("window");
      w.i64(s->window);
    } else if (const auto* h = std::get_if<H2OPolicy>(&*o.kv_policy)) {
      w.str("h2o");
      w.key("budget");
      w.i64(h->budget);
      w.key("recent");
      w.i64(h->recent.value_or(h->budget / 2));
    } else {
      w.str("none");
    }
    w.end_map();
  }
  if (o.api_key) {
    put(w, "api_key", o.api_key, str);
  } else if (!api_key.empty()) {
    w.key("api_key");
    w.str(api_key);
  }
  w.end_map();
  return w.take();
}

std::string encode_cancel(uint64_t id) {
  Writer w;
  w.begin_map();
  header(w, "cancel", id);
  w.end_map();
  return w.take();
}

std::string encode_heartbeat(uint64_t id) {
  Writer w;
  w.begin_map();
  header(w, "heartbeat", id);
  w.end_map();
  return w.take();
}

TokenEvent to_public(protocol::TokenEvent&& e) {
  TokenEvent out{.request_id = e.id, .tokens = std::move(e.tokens), .text = std::move(e.text),
                 .logprobs = std::move(e.logprobs), .top_logprobs = {}};
  if (!e.top_logprobs.empty()) out.top_logprobs = to_public(e.top_logprobs);
  return out;
}

Limits to_public(const protocol::Heartbeat& h, const std::string& endpoint) {
  auto opt = [](int32_t v) { return v > 0 ? std::optional<int32_t>(v) : std::nullopt; };  // 0 = absent
  return Limits{.model = h.model.empty() ? h.name : h.model,
                .protocol_version = h.protocol_version > 0 ? h.protocol_version : 1,
                .context_length = opt(h.context_length),
                .page_size = opt(h.page_size),
                .max_prompt_tokens = opt(h.max_prompt_tokens),
                .vocab_size = opt(h.vocab_size),
                .default_max_tokens = opt(h.default_max_tokens),
                .live_workers = h.live_workers,
                .running = h.running,
                .waiting = h.waiting,
                .endpoint = endpoint};
}

Completion to_public(protocol::FinalEvent&& f, bool want_logprobs, bool want_top_logprobs) {
  Completion c;
  c.text = std::move(f.text);
  c.tokens = std::move(f.tokens);
  if (want_logprobs || !f.logprobs.empty()) c.logprobs = std::move(f.logprobs);
  if (want_top_logprobs || !f.top_logprobs.empty()) c.top_logprobs = to_public(f.top_logprobs);
  set_usage_timings(c, f);
  return c;
}

void finish(Completion& c, protocol::FinalEvent&& f) { set_usage_timings(c, f); }

void append(Completion& c, const TokenEvent& e) {
  c.text += e.text;
  c.tokens.insert(c.tokens.end(), e.tokens.begin(), e.tokens.end());
  if (!e.logprobs.empty()) {
    if (!c.logprobs) c.logprobs.emplace();
    c.logprobs->insert(c.logprobs->end(), e.logprobs.begin(), e.logprobs.end());
  }
  if (!e.top_logprobs.empty()) {
    if (!c.top_logprobs) c.top_logprobs.emplace();
    c.top_logprobs->insert(c.top_logprobs->end(), e.top_logprobs.begin(), e.top_logprobs.end());
  }
}

}  // namespace tessera::client::detail
