// libFuzzer target: what the frontend does with a client's request before any socket to a
// scheduler is involved — the HTTP handler path from a raw body (openai.h parse_request, the
// /tokenize and /detokenize bodies) and the ZeroMQ client API path from raw msgpack
// (protocol::decode), each followed by what the handler does next: API-key authorization, the
// request preparation (chat template, tokenization, limits: request_preparer.h), and, for a
// request that passed, a Generation fed the prompt's tokens back as if generated (detokenizer,
// retrieve_fact filter, the client's stop strings) rendered as response and stream JSON.
//
// Input: byte 0 picks the mode (message_seeds.h FrontendMode: byte % 5) and the model
// ((byte / 5) % 2: 0 = stories260K.gguf with its built-in ChatML, 1 = the SmolLM2 BPE tokenizer
// with a Jinja chat template); the rest is the body. Models come from $TESSERA_SHARED_DIR (else
// the TESSERA_SHARED_DIR the fuzz build was configured with). Bad input must come back as an
// error; an abort, exception or sanitizer report is a bug.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>

#include "message_seeds.h"
#include "tessera/common/log.h"
#include "tessera/frontend/api_keys.h"
#include "tessera/frontend/generation.h"
#include "tessera/frontend/openai.h"
#include "tessera/frontend/request_preparer.h"
#include "tokenize.h"  // frontend/src (private; the fuzz build reads it on purpose)

namespace {

using namespace tessera;
using namespace tessera::frontend;

// A Jinja template in the style of SmolLM2's, with a role check that raises.
constexpr const char* kJinjaTemplate =
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown role ' + message['role']) }}{% endif %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant.<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

std::string shared_dir() {
  const char* env = std::getenv("TESSERA_SHARED_DIR");
  return env != nullptr && *env != '\0' ? env : TESSERA_FUZZ_SHARED_DIR;
}

std::unique_ptr<RequestPreparer> make_preparer(FrontendConfig c) {
  auto p = RequestPreparer::create(c);
  if (!p.ok()) {
    std::fprintf(stderr, "frontend_request_fuzz: cannot load %s%s: %s\n", c.model.c_str(), c.tokenizer.c_str(),
                 p.error().to_string().c_str());
    std::abort();
  }
  return std::move(*p);
}

struct Fixture {
  std::unique_ptr<RequestPreparer> preparers[2];
  ApiKeys open_keys;  // no keys configured: every request is tenant "default", any user

  Fixture() {
    log::set_level(log::kError);  // warnings (e.g. a template fallback) would flood the output
    const std::string shared = shared_dir();
    preparers[0] = make_preparer(FrontendConfig{.model = shared + "/models/stories260K/stories260K.gguf"});
    const std::filesystem::path tmpl =
        std::filesystem::temp_directory_path() / ("frontend_request_fuzz-" + std::to_string(::getpid()) + ".jinja");
    std::ofstream(tmpl) << kJinjaTemplate;
    preparers[1] = make_preparer(FrontendConfig{.tokenizer = shared + "/tokenizers/smollm2", .model_name = "smollm2",
                                                .chat_template_file = tmpl.string()});
    std::filesystem::remove(tmpl);
    if (preparers[1]->chat_template().kind != ChatTemplateKind::kJinja) {
      std::fprintf(stderr, "frontend_request_fuzz: the Jinja template did not load\n");
      std::abort();
    }
  }
};

// The handler's steps after a request parsed: authorization, preparation, finish, output.
void serve(const RequestPreparer& preparer, const ApiKeys& keys, protocol::GenerateRequest& r, bool max_tokens_given,
           bool seed_given, bool logprobs) {
  const ServingLimits limits{.model = preparer.model_name(), .context_length = 512, .page_size = 16};
  auto who = keys.authenticate(r.api_key);
  if (const Principal* p = std::get_if<Principal>(&who)) {
    if (ApiKeys::authorize(*p, r)) return;
  } else {
    return;
  }
  if (!preparer.prepare(r, {.context_length = limits.context_length, .max_tokens_given = max_tokens_given,
                            .seed_given = seed_given})
           .ok())
    return;
  preparer.finish(r);
  // The prompt's tokens played back as the generation, three per event.
  Generation gen(preparer.tokenizer(), r.stop, logprobs);
  std::string streamed;
  const ResponseMeta meta{.kind = r.kind, .id = "cmpl-fuzz", .model = preparer.model_name(), .created = 1,
                          .logprobs = logprobs};
  for (size_t i = 0; i < r.prompt_tokens.size() && !gen.stop_hit(); i += 3) {
    protocol::TokenEvent ev{.id = 1};
    for (size_t j = i; j < std::min(i + 3, r.prompt_tokens.size()); ++j) {
      ev.tokens.push_back(r.prompt_tokens[j]);
      if (logprobs) {
        ev.logprobs.push_back(-0.5f);
        ev.top_logprobs.push_back({{r.prompt_tokens[j], -0.5f}});
      }
    }
    Generation::Delta d = gen.on_tokens(ev);
    streamed += stream_chunk(meta, d.text, d.logprobs, i == 0, "", nullptr);
  }
  const std::string tail = gen.finish();
  protocol::FinalEvent fin{.id = 1, .finish_reason = gen.stop_hit() ? "stop" : "length"};
  fin.usage.prompt_tokens = static_cast<int32_t>(r.prompt_tokens.size());
  fin.usage.completion_tokens = gen.completion_tokens();
  streamed += stream_chunk(meta, tail, {}, false, fin.finish_reason, &fin);
  const std::string whole = response_json(meta, gen.text(), gen.logprobs(), fin, fin.finish_reason);
  volatile size_t sink = streamed.size() + whole.size() + r.routing_key.size();
  (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* fixture = new Fixture();  // once per process; never destroyed (no exit-order issues)
  if (size == 0) return 0;
  const auto mode = static_cast<fuzz::FrontendMode>(data[0] % fuzz::kFrontendModes);
  const RequestPreparer& preparer = *fixture->preparers[(data[0] / fuzz::kFrontendModes) % 2];
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string param;
  switch (mode) {
    case fuzz::FrontendMode::kCompletionJson:
    case fuzz::FrontendMode::kChatJson: {
      const auto kind = mode == fuzz::FrontendMode::kChatJson ? protocol::RequestKind::kChat : protocol::RequestKind::kCompletion;
      auto parsed = parse_request(body, kind, ParseOptions{}, &param);
      if (!parsed.ok()) {
        volatile size_t n = error_json(parsed.error(), param).size();
        (void)n;
        return 0;
      }
      serve(preparer, fixture->open_keys, parsed->request, parsed->max_tokens_given, parsed->seed_given, parsed->logprobs);
      return 0;
    }
    case fuzz::FrontendMode::kTokenizeJson: {
      const ServingLimits limits = preparer.limits({});
      volatile bool ok = tokenize_json(body, preparer, limits, &param).ok();
      (void)ok;
      return 0;
    }
    case fuzz::FrontendMode::kDetokenizeJson: {
      volatile bool ok = detokenize_json(body, preparer, &param).ok();
      (void)ok;
      return 0;
    }
    case fuzz::FrontendMode::kClientMsgpack: {
      auto msg = protocol::decode(body);
      if (!msg.ok()) return 0;
      auto* r = std::get_if<protocol::GenerateRequest>(&*msg);
      if (r == nullptr || r->id == 0) return 0;
      serve(preparer, fixture->open_keys, *r, protocol::peek_has_key(body, "max_tokens"), protocol::peek_has_key(body, "seed"),
            r->sampling.logprobs);
      return 0;
    }
  }
  return 0;
}
