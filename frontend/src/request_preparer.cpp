#include "kv_policy_field.h"
#include "tessera/frontend/request_preparer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tessera/common/routing.h"
#include "tessera/grammar/grammar.h"
#include "tessera/model/model.h"

namespace tessera::frontend {

namespace fs = std::filesystem;

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
  std::string template_origin;
  SpecialTokenText special;   // bos_token / eos_token strings the template is given
};

// tokenizer_config.json writes a special token as a string or as {"content": ...}.
std::string config_token(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) return "";
  const auto& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

// The text of a special token when the model files did not name it: its literal piece, else
// SentencePiece's conventional "<s>" / "</s>" (a llama2.c vocabulary names BOS/EOS otherwise;
// tokenize_chat maps those two back to the ids).
std::string special_text(const Tokenizer& t, int32_t id, const char* sentencepiece_piece) {
  if (id < 0) return "";
  std::string s = t.token_bytes(id);
  return s.empty() ? sentencepiece_piece : s;
}

Result<TokenizerSource> load_tokenizer_for(const FrontendConfig& c) {
  TokenizerSource out;
  const bool gguf = c.model.size() > 5 && c.model.substr(c.model.size() - 5) == ".gguf";
  if (gguf) {
    // The vocabulary and template from the file's metadata; no tensor is loaded here.
    TS_ASSIGN_OR_RETURN(VocabSpec vocab, read_model_vocab(c.model));
    out.chat_template = vocab.chat_template;
    out.template_origin = "GGUF tokenizer.chat_template";
    auto piece = [&](int32_t id) -> std::string {
      return id >= 0 && id < static_cast<int32_t>(vocab.tokens.size()) ? vocab.tokens[static_cast<size_t>(id)] : "";
    };
    out.special = {piece(vocab.bos_id), piece(vocab.eos_id)};
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
    if (j.is_object() && j.contains("chat_template") && j["chat_template"].is_string()) {
      out.chat_template = j["chat_template"].get<std::string>();
      out.template_origin = cfg.string();
      out.special = {config_token(j, "bos_token"), config_token(j, "eos_token")};
    }
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<RequestPreparer>> RequestPreparer::create(const FrontendConfig& config) {
  std::unique_ptr<RequestPreparer> p(new RequestPreparer());
  // A missing model is an error even when --tokenizer makes the file unnecessary here: the
  // frontend would serve a name no worker can ever load.
  if (!config.model.empty() && !fs::exists(config.model))
    return make_error(ErrorCode::kNotFound, "--model " + config.model + ": no such file or directory");
  TS_ASSIGN_OR_RETURN(TokenizerSource src, load_tokenizer_for(config));
  p->tokenizer_ = std::move(src.tokenizer);
  std::string jinja = src.chat_template;
  if (!config.chat_template_file.empty()) {
    if (!fs::exists(config.chat_template_file))
      return make_error(ErrorCode::kIoError, "cannot open --chat-template-file " + config.chat_template_file);
    jinja = read_file(config.chat_template_file);
    src.template_origin = "--chat-template-file " + config.chat_template_file;
  }
  if (src.special.bos.empty()) src.special.bos = special_text(*p->tokenizer_, p->tokenizer_->bos_id(), "<s>");
  if (src.special.eos.empty()) src.special.eos = special_text(*p->tokenizer_, p->tokenizer_->eos_id(), "</s>");
  p->chat_template_ = config.chat_template == "auto" ? load_chat_template(jinja, src.special, src.template_origin)
                                                     : detect_chat_template(jinja);
  if (config.chat_template == "chatml") p->chat_template_ = {ChatTemplateKind::kChatML, p->chat_template_.default_system, false};
  if (config.chat_template == "llama2") p->chat_template_ = {ChatTemplateKind::kLlama2, "", false};
  if (config.chat_template == "llama3") p->chat_template_ = {ChatTemplateKind::kLlama3, "", false};
  {
    std::vector<int32_t> probe = p->tokenizer_->encode("a", true);
    p->tokenizer_adds_bos_ = p->tokenizer_->bos_id() >= 0 && !probe.empty() && probe.front() == p->tokenizer_->bos_id();
  }
  p->model_name_ = config.model_name;
  if (p->model_name_.empty()) {
    const std::string& from = config.model.empty() ? config.tokenizer : config.model;
    p->model_name_ = fs::path(from).filename().string();
    if (!fs::is_directory(from)) p->model_name_ = fs::path(from).stem().string();
  }
  p->max_prompt_tokens_ = config.max_prompt_tokens;
  p->default_max_tokens_ = config.default_max_tokens;
  auto kv = parse_kv_policy_spec(config.kv_policy);
  if (!kv.ok()) return make_error(kv.error().code, "--kv-policy: " + kv.error().message);
  p->default_kv_policy_ = *kv;
  return p;
}

ServingLimits RequestPreparer::limits(const std::vector<SchedulerStatus>& schedulers) const {
  ServingLimits l{.model = model_name_, .max_prompt_tokens = max_prompt_tokens_, .vocab_size = tokenizer_->vocab_size(),
                  .default_max_tokens = default_max_tokens_};
  for (const auto& s : schedulers) {
    if (!s.alive || s.context_length <= 0) continue;
    l.context_length = l.context_length == 0 ? s.context_length : std::min(l.context_length, s.context_length);
    l.page_size = s.page_size;
  }
  return l;
}

std::vector<int32_t> RequestPreparer::tokenize_chat(const RenderedChat& chat) const {
  std::vector<int32_t> out;
  const bool explicit_bos = chat.places_bos || (!chat.segments.empty() && chat.segments.front().special &&
                            (chat.segments.front().text == "<s>" || chat.segments.front().text == "<|begin_of_text|>"));
  if (tokenizer_adds_bos_ && !explicit_bos) out.push_back(tokenizer_->bos_id());
  for (const auto& seg : chat.segments) {
    if (seg.special) {
      int32_t id = tokenizer_->token_id(seg.text);
      if (id < 0 && seg.text == "<s>") id = tokenizer_->bos_id();
      if (id < 0 && seg.text == "</s>") id = tokenizer_->eos_id();
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
    }
    std::vector<int32_t> t = tokenizer_->encode(seg.text, /*add_special=*/false);
    out.insert(out.end(), t.begin(), t.end());
  }
  return out;
}

Status RequestPreparer::prepare(protocol::GenerateRequest& r, const PrepareOptions& o) const {
  if (!r.model.empty() && r.model != model_name_)
    return make_error(ErrorCode::kNotFound, "model '" + r.model + "' does not exist (this server serves '" + model_name_ + "')");
  const int32_t vocab = tokenizer_->vocab_size();
  if (!r.documents.empty()) {
    TS_TRY(place_documents(r, o));
  } else if (r.kind == protocol::RequestKind::kChat) {
    TS_ASSIGN_OR_RETURN(RenderedChat chat, render_chat(chat_template_, r.messages, o.tools));
    r.prompt_tokens = tokenize_chat(chat);
    for (const auto& piece : chat.stop_pieces) {
      int32_t id = tokenizer_->token_id(piece);
      if (id < 0 && piece == "</s>") id = tokenizer_->eos_id();
      if (id >= 0) r.stop_token_ids.push_back(id);
    }
  } else if (r.prompt_tokens.empty()) {
    // Both APIs: an empty completion prompt is refused (not silently just a BOS).
    if (r.prompt.empty()) return make_error(ErrorCode::kInvalidArgument, "prompt must not be empty");
    r.prompt_tokens = tokenizer_->encode(r.prompt, /*add_special=*/true);
  }
  for (int32_t t : r.prompt_tokens)
    if (t >= vocab)
      return make_error(ErrorCode::kOutOfRange, "prompt token id " + std::to_string(t) + " is outside the vocabulary (size " +
                                                    std::to_string(vocab) + ")");
  for (const auto& [t, bias] : r.sampling.logit_bias)
    if (t >= vocab) return make_error(ErrorCode::kOutOfRange, "logit_bias token id " + std::to_string(t) + " is outside the vocabulary");
  if (!o.seed_given) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    r.sampling.seed = rng();
  }
  for (int32_t t : r.stop_token_ids)
    if (t >= vocab) return make_error(ErrorCode::kOutOfRange, "stop token id " + std::to_string(t) + " is outside the vocabulary");
  if (r.prompt_tokens.empty()) return make_error(ErrorCode::kInvalidArgument, "the prompt is empty after tokenization");
  if (static_cast<int64_t>(r.prompt_tokens.size()) > max_prompt_tokens_)
    return make_error(ErrorCode::kTooLarge, "the prompt is " + std::to_string(r.prompt_tokens.size()) +
                                                " tokens; the limit is " + std::to_string(max_prompt_tokens_));
  const int64_t prompt = static_cast<int64_t>(r.prompt_tokens.size());
  if (o.context_length > 0 && prompt >= o.context_length)
    return make_error(ErrorCode::kTooLarge, "This model's maximum context length is " + std::to_string(o.context_length) +
                                                " tokens; the prompt alone is " + std::to_string(prompt) + " tokens");
  // K/V policy (docs/kv.md): the per-model default unless the request gave one; its sizes
  // against the context; StreamingLLM may generate past it.
  if (!o.kv_policy_given && r.blend_chunks.empty()) r.kv_policy = default_kv_policy_;
  if (!r.blend_chunks.empty() && (r.kv_policy.type != KvPolicyType::kNone || !r.preference.empty() || r.sampling.prompt_logprobs >= 0))
    return make_error(ErrorCode::kInvalidArgument, "documents cannot be combined with kv_policy, preference or prompt log-probabilities (echo)");
  if (std::string e = kv_policy_error(r.kv_policy, o.context_length > 0 ? static_cast<int32_t>(o.context_length) : 0); !e.empty())
    return make_error(ErrorCode::kOutOfRange, e);
  const bool past_context = r.kv_policy.type == KvPolicyType::kStreaming;
  if (!o.max_tokens_given) {
    r.max_tokens = default_max_tokens_;
    if (o.context_length > 0 && !past_context)
      r.max_tokens = static_cast<int32_t>(std::min<int64_t>(r.max_tokens, o.context_length - prompt));
  } else if (o.context_length > 0 && prompt + r.max_tokens > o.context_length && !past_context) {
    return make_error(ErrorCode::kTooLarge, "This model's maximum context length is " + std::to_string(o.context_length) +
                                                " tokens; the request asks for " + std::to_string(prompt + r.max_tokens) +
                                                " (" + std::to_string(prompt) + " in the prompt, " + std::to_string(r.max_tokens) +
                                                " in max_tokens)");
  }
  // Structured output: the grammar is checked here for both APIs (a ZeroMQ client sends the
  // schema text as sampling field `grammar`); the value must end with a token that ends the
  // request, and must be closed within max_tokens.
  if (!r.sampling.grammar.empty()) {
    if (!o.grammar_checked) {
      if (auto g = grammar::compile_json_schema(r.sampling.grammar); !g.ok())
        return make_error(g.error().code, "grammar (JSON schema): " + g.error().message);
    }
    std::vector<int32_t>& ends = r.sampling.grammar_end_tokens;
    ends.clear();
    if (!r.ignore_eos && tokenizer_->eos_id() >= 0) ends.push_back(tokenizer_->eos_id());
    for (int32_t t : r.stop_token_ids) {
      if (std::find(ends.begin(), ends.end(), t) == ends.end() && ends.size() < kMaxGrammarEndTokens) ends.push_back(t);
    }
    if (ends.empty())
      return make_error(ErrorCode::kInvalidArgument, "structured output needs a token that ends the request "
                                                     "(ignore_eos with no stop_token_ids leaves none)");
    r.sampling.grammar_max_tokens = r.max_tokens;
  }
  // A stored preference comes only with a user, so this holds before and after the lookup.
  if (!r.preference.empty() && r.user.empty()) return make_error(ErrorCode::kInvalidArgument, "preference needs a user");
  return ok_status();
}

void RequestPreparer::finish(protocol::GenerateRequest& r) const {
  if (!r.preference.empty()) r.preference_tokens = tokenizer_->encode(r.preference, /*add_special=*/false);
  r.routing_key = routing_key_for(r.routing_key, r.user, r.prompt_tokens);
}

}  // namespace tessera::frontend
