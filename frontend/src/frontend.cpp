// Frontend construction, options, admission and request preparation.
#include <boost/asio/ip/address.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "frontend_impl.h"
#include "tessera/common/hash.h"
#include "tessera/common/log.h"
#include "tessera/model/model.h"

namespace tessera::frontend {

namespace fs = std::filesystem;

// Prompt tokens hashed into the routing key of a request that names no user or key.
constexpr size_t kRoutingPrefixTokens = 64;

// ---- Metrics -------------------------------------------------------------------------------

FrontendMetrics::FrontendMetrics(metrics::Registry& r)
    : registry(r),
      inflight(r.gauge("tessera_frontend_inflight_requests", "generation requests in flight at this frontend")),
      prompt_tokens(r.counter("tessera_frontend_prompt_tokens_total", "prompt tokens of finished requests")),
      cached_tokens(r.counter("tessera_frontend_cached_prompt_tokens_total",
                              "prompt tokens of finished requests whose K/V came from the prefix cache")),
      completion_tokens(r.counter("tessera_frontend_completion_tokens_total", "tokens generated for finished requests")),
      prefix_hit_rate(r.gauge("tessera_frontend_prefix_cache_hit_rate",
                              "prefix-cache hit rate = cached prompt tokens / prompt tokens, over finished requests")),
      disconnects(r.counter("tessera_frontend_client_disconnects_total", "requests cancelled because the client went away")),
      timeouts(r.counter("tessera_frontend_request_timeouts_total", "requests cancelled after request-timeout-ms")),
      ttft(r.histogram("tessera_frontend_ttft_seconds", "time to first token: request arrival -> first token event",
                       metrics::latency_buckets())),
      e2e(r.histogram("tessera_frontend_request_seconds", "request arrival -> last byte of the response", metrics::latency_buckets())),
      ready(r.gauge("tessera_frontend_ready", "1 while a scheduler with a live worker answers heartbeats")) {
  stripped(FactCallCounts{});  // the per-format series exist (at 0) before the first removal
}

void FrontendMetrics::count_response(const std::string& route, int status) {
  registry.counter("tessera_frontend_http_responses_total", "HTTP responses by route and status",
                   {{"route", route}, {"status", std::to_string(status)}})
      .inc();
}

void FrontendMetrics::finished(const protocol::FinalEvent& f) {
  prompt_tokens.inc(f.usage.prompt_tokens);
  cached_tokens.inc(f.usage.cached_tokens);
  completion_tokens.inc(f.usage.completion_tokens);
  double p = prompt_tokens.value();
  prefix_hit_rate.set(p > 0 ? cached_tokens.value() / p : 0.0);
  const protocol::Usage& u = f.usage;
  if (!u.preference_source.empty()) {  // dki: same figures as the response's usage.preference
    const metrics::Labels source{{"source", u.preference_source}};
    registry.counter("tessera_frontend_preference_requests_total",
                     "finished requests with an injected preference, by where its K/V came from "
                     "(memory = scheduler prefix cache, kvstore = kvstore L1, redis = kvstore L2, compute = prefilled)",
                     source).inc();
    registry.counter("tessera_frontend_preference_kv_bytes_total",
                     "preference K/V bytes of finished requests: blob bytes fetched (kvstore, redis) or f32 bytes computed (compute)",
                     source).inc(static_cast<double>(u.preference_kv_bytes));
    registry.counter("tessera_frontend_preference_transfer_seconds_total",
                     "kvstore get + decode + copy-into-pages time of the preference K/V of finished requests", source)
        .inc(u.preference_transfer_ms / 1000.0);
  }
}

void FrontendMetrics::stripped(const FactCallCounts& c) {
  const std::pair<const char*, uint64_t> by_format[] = {{"generic", c.generic}, {"deepseek", c.deepseek}, {"glm", c.glm}};
  for (const auto& [format, n] : by_format)
    registry.counter("tessera_frontend_retrieve_fact_stripped_total",
                       "residual retrieve_fact tool calls removed from generated text, by call format", {{"format", format}})
          .inc(static_cast<double>(n));
}

// ---- Preparation ---------------------------------------------------------------------------

Result<std::unique_ptr<InflightSlot>> Frontend::Impl::admit() {
  if (!hub->ready())
    return make_error(ErrorCode::kUnavailable, "no scheduler with a live worker is ready; try again later");
  if (hub->waiting() >= config.max_queued_requests)
    return make_error(ErrorCode::kOverloaded, "scheduler queues are full (" + std::to_string(hub->waiting()) + " waiting)");
  int32_t n = inflight.fetch_add(1) + 1;
  if (n > config.max_concurrent_requests) {
    inflight.fetch_sub(1);
    return make_error(ErrorCode::kOverloaded,
                      "too many concurrent requests (limit " + std::to_string(config.max_concurrent_requests) + ")");
  }
  return std::make_unique<InflightSlot>(inflight, metrics->inflight);
}

std::vector<int32_t> Frontend::Impl::tokenize_chat(const RenderedChat& chat) const {
  std::vector<int32_t> out;
  const bool explicit_bos = !chat.segments.empty() && chat.segments.front().special &&
                            (chat.segments.front().text == "<s>" || chat.segments.front().text == "<|begin_of_text|>");
  if (tokenizer_adds_bos && !explicit_bos) out.push_back(tokenizer->bos_id());
  for (const auto& seg : chat.segments) {
    if (seg.special) {
      int32_t id = tokenizer->token_id(seg.text);
      if (id < 0 && seg.text == "<s>") id = tokenizer->bos_id();
      if (id < 0 && seg.text == "</s>") id = tokenizer->eos_id();
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
    }
    std::vector<int32_t> t = tokenizer->encode(seg.text, /*add_special=*/false);
    out.insert(out.end(), t.begin(), t.end());
  }
  return out;
}

Status Frontend::Impl::prepare(protocol::GenerateRequest& r) {
  if (!r.model.empty() && r.model != model_name)
    return make_error(ErrorCode::kNotFound, "model '" + r.model + "' does not exist (this server serves '" + model_name + "')");
  const int32_t vocab = tokenizer->vocab_size();
  if (r.kind == protocol::RequestKind::kChat) {
    TS_ASSIGN_OR_RETURN(RenderedChat chat, render_chat(chat_template, r.messages));
    r.prompt_tokens = tokenize_chat(chat);
    for (const auto& piece : chat.stop_pieces) {
      int32_t id = tokenizer->token_id(piece);
      if (id < 0 && piece == "</s>") id = tokenizer->eos_id();
      if (id >= 0) r.stop_token_ids.push_back(id);
    }
  } else if (r.prompt_tokens.empty()) {
    r.prompt_tokens = tokenizer->encode(r.prompt, /*add_special=*/true);
  }
  for (int32_t t : r.prompt_tokens)
    if (t >= vocab)
      return make_error(ErrorCode::kOutOfRange, "prompt token id " + std::to_string(t) + " is outside the vocabulary (size " +
                                                    std::to_string(vocab) + ")");
  for (int32_t t : r.stop_token_ids)
    if (t >= vocab) return make_error(ErrorCode::kOutOfRange, "stop token id " + std::to_string(t) + " is outside the vocabulary");
  if (r.prompt_tokens.empty()) return make_error(ErrorCode::kInvalidArgument, "the prompt is empty after tokenization");
  if (static_cast<int64_t>(r.prompt_tokens.size()) > config.max_prompt_tokens)
    return make_error(ErrorCode::kTooLarge, "the prompt is " + std::to_string(r.prompt_tokens.size()) +
                                                " tokens; the limit is " + std::to_string(config.max_prompt_tokens));
  TS_TRY(apply_stored_preference(r));
  if (!r.preference.empty()) {
    if (r.user.empty()) return make_error(ErrorCode::kInvalidArgument, "preference needs a user");
    r.preference_tokens = tokenizer->encode(r.preference, /*add_special=*/false);
  }
  if (r.routing_key.empty()) {
    if (!r.user.empty()) {
      r.routing_key = "user:" + r.user;
    } else {
      // Requests sharing a prompt prefix go to the same scheduler (and its prefix cache).
      char key[32];
      std::snprintf(key, sizeof key, "prefix:%016llx",
                    static_cast<unsigned long long>(prefix_routing_key(r.prompt_tokens, kRoutingPrefixTokens)));
      r.routing_key = key;
    }
  }
  r.id = hub->next_id();
  return ok_status();
}

std::string Frontend::Impl::ready_json(bool* ready) const {
  nlohmann::json s = nlohmann::json::array();
  for (const auto& st : hub->schedulers())
    s.push_back({{"endpoint", st.endpoint}, {"alive", st.alive}, {"live_workers", st.live_workers}, {"running", st.running},
                 {"waiting", st.waiting}});
  *ready = hub->ready();
  return nlohmann::json{{"ready", *ready}, {"schedulers", s}}.dump();
}

// ---- Construction --------------------------------------------------------------------------

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct TokenizerSource {
  std::unique_ptr<Tokenizer> tokenizer;
  std::string chat_template;  // Jinja text from the model files, "" if none
};

Result<TokenizerSource> load_tokenizer_for(const FrontendConfig& c) {
  TokenizerSource out;
  const bool gguf = c.model.size() > 5 && c.model.substr(c.model.size() - 5) == ".gguf";
  if (gguf) {
    // The vocabulary and template from the file's metadata; no tensor is loaded here.
    TS_ASSIGN_OR_RETURN(VocabSpec vocab, read_model_vocab(c.model));
    out.chat_template = vocab.chat_template;
    if (c.tokenizer.empty()) {
      TS_ASSIGN_OR_RETURN(out.tokenizer, tokenizer_from_vocab(vocab));
      return out;
    }
  }
  std::string path = c.tokenizer;
  if (path.empty() && !c.model.empty() && fs::is_directory(c.model)) path = c.model;
  if (path.empty())
    return make_error(ErrorCode::kInvalidArgument,
                      "no tokenizer: give --tokenizer (a llama2.c model has none inside) or a .gguf / Hugging Face --model");
  TS_ASSIGN_OR_RETURN(out.tokenizer, load_tokenizer(path));
  // Hugging Face directories keep the template in tokenizer_config.json.
  fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
  fs::path cfg = dir / "tokenizer_config.json";
  if (out.chat_template.empty() && fs::exists(cfg)) {
    auto j = nlohmann::json::parse(read_file(cfg.string()), nullptr, false);
    if (j.is_object() && j.contains("chat_template") && j["chat_template"].is_string())
      out.chat_template = j["chat_template"].get<std::string>();
  }
  return out;
}

}  // namespace

Frontend::Frontend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Frontend::~Frontend() {
  stop();
  for (auto& t : impl_->threads)
    if (t.joinable()) t.join();
  impl_->hub->stop();  // sinks still reach a whole Hub while in-flight requests are failed
  impl_->hub.reset();
}

Result<std::unique_ptr<Frontend>> Frontend::create(const FrontendConfig& config) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  if (config.schedulers.empty()) return make_error(ErrorCode::kInvalidArgument, "--schedulers is empty");
  TS_ASSIGN_OR_RETURN(TokenizerSource src, load_tokenizer_for(config));
  impl->tokenizer = std::move(src.tokenizer);
  std::string jinja = src.chat_template;
  if (!config.chat_template_file.empty()) {
    if (!fs::exists(config.chat_template_file))
      return make_error(ErrorCode::kIoError, "cannot open --chat-template-file " + config.chat_template_file);
    jinja = read_file(config.chat_template_file);
  }
  impl->chat_template = detect_chat_template(jinja);
  if (config.chat_template == "chatml") impl->chat_template = {ChatTemplateKind::kChatML, impl->chat_template.default_system, false};
  if (config.chat_template == "llama2") impl->chat_template = {ChatTemplateKind::kLlama2, "", false};
  if (config.chat_template == "llama3") impl->chat_template = {ChatTemplateKind::kLlama3, "", false};
  {
    std::vector<int32_t> probe = impl->tokenizer->encode("a", true);
    impl->tokenizer_adds_bos = impl->tokenizer->bos_id() >= 0 && !probe.empty() && probe.front() == impl->tokenizer->bos_id();
  }
  if (!config.kvstore.empty()) {
    TS_ASSIGN_OR_RETURN(impl->kv, kvstore::Client::connect({.endpoint = config.kvstore, .timeout_ms = config.kvstore_timeout_ms}));
  }
  impl->model_name = config.model_name;
  if (impl->model_name.empty()) {
    const std::string& from = config.model.empty() ? config.tokenizer : config.model;
    impl->model_name = fs::path(from).filename().string();
    if (!fs::is_directory(from)) impl->model_name = fs::path(from).stem().string();
  }
  impl->created_unix =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  impl->metrics = std::make_unique<FrontendMetrics>(impl->registry);

  Impl* raw = impl.get();
  TS_ASSIGN_OR_RETURN(impl->hub, Hub::start(HubConfig{.scheduler_endpoints = config.schedulers,
                                                      .client_endpoint = config.zmq_endpoint,
                                                      .heartbeat_ms = config.heartbeat_ms,
                                                      .dead_after_ms = config.scheduler_dead_ms,
                                                      .name = "frontend"},
                                            impl->registry, [raw](zmqu::Envelope env) { raw->on_client_message(std::move(env)); }));
  boost::system::error_code ec;
  auto addr = boost::asio::ip::make_address(config.host, ec);
  if (ec) return make_error(ErrorCode::kInvalidArgument, "--host '" + config.host + "' is not an IP address");
  auto acceptor = std::make_unique<boost::asio::ip::tcp::acceptor>(impl->ioc);
  boost::asio::ip::tcp::endpoint ep(addr, static_cast<uint16_t>(config.http_port));
  acceptor->open(ep.protocol(), ec);
  if (!ec) acceptor->set_option(boost::asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor->bind(ep, ec);
  if (!ec) acceptor->listen(boost::asio::socket_base::max_listen_connections, ec);
  if (ec) return make_error(ErrorCode::kUnavailable, "cannot listen on " + config.host + ":" + std::to_string(config.http_port) + ": " + ec.message());
  impl->acceptor = std::move(acceptor);
  TS_LOG(kInfo) << "model=" << impl->model_name << " | chat template " << chat_template_name(impl->chat_template.kind)
                << (impl->chat_template.builtin ? " (built-in)" : " (recognized)");
  return std::unique_ptr<Frontend>(new Frontend(std::move(impl)));
}

int Frontend::http_port() const { return impl_->acceptor->local_endpoint().port(); }
std::string Frontend::zmq_endpoint() const { return impl_->hub->client_endpoint(); }

void Frontend::run() {
  impl_->start_accept();
  for (int i = 1; i < impl_->config.http_threads; ++i) impl_->threads.emplace_back([this] { impl_->ioc.run(); });
  impl_->ioc.run();
  for (auto& t : impl_->threads)
    if (t.joinable()) t.join();
}

void Frontend::stop() {
  if (impl_->stopped.exchange(true)) return;
  impl_->ioc.stop();
}

}  // namespace tessera::frontend
