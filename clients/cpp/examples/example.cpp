// The README's example: one client, a completion, a stream cancelled on a condition, a chat,
// many requests in flight, and typed errors. usage: example [ENDPOINT ...]
#include <iostream>
#include <string>
#include <vector>

#include <tessera/client/client.h>

namespace tc = tessera::client;
using namespace std::chrono_literals;

int main(int argc, char** argv) {
  tc::ClientOptions options;  // one connection; several endpoints = failover in that order
  if (argc > 1) options.endpoints.assign(argv + 1, argv + argc);
  options.timeout = 30s;  // default deadline of every request
  tc::Client client(options);

  const tc::Limits lim = client.limits();
  std::cout << "model " << lim.model << ": context " << lim.context_length.value_or(0) << ", vocab "
            << lim.vocab_size.value_or(0) << "\n";

  tc::Completion r = client.complete("Once upon a time", {.max_tokens = 32, .temperature = 0.0});
  std::cout << r.text << " [" << r.finish_reason << ", " << r.usage.prompt_tokens << "+"
            << r.usage.completion_tokens << " tokens, " << r.usage.cached_tokens << " cached, "
            << r.timings.total_ms << " ms]\n";

  tc::Stream stream = client.stream_complete("Lily and Tom", {.max_tokens = 64, .temperature = 0.0});
  for (const tc::StreamEvent& ev : stream) {
    if (const auto* t = std::get_if<tc::TokenEvent>(&ev)) {
      std::cout << t->text << std::flush;
      if (t->text.find("dragon") != std::string::npos) stream.cancel();  // any condition
    } else {  // the last item: the Completion ("cancelled" after cancel())
      const auto& done = std::get<tc::Completion>(ev);
      std::cout << "\n[" << done.finish_reason << ", " << done.usage.completion_tokens << " tokens]\n";
    }
  }

  tc::Completion chat = client.chat({{.role = "user", .content = "Tell me a story"}}, {.max_tokens = 16, .seed = 7});
  std::cout << "chat: " << chat.text << "\n";

  std::vector<tc::Stream> many;  // requests in flight together on the one connection
  for (int i = 0; i < 4; ++i)
    many.push_back(client.stream_complete("Once upon a time " + std::to_string(i), {.max_tokens = 8}));
  for (auto& s : many) std::cout << "#" << s.request_id() << ": " << s.result().text << "\n";

  try {
    client.complete("Once", {.max_tokens = 0});
  } catch (const tc::BadRequest& e) {
    std::cout << "refused: " << e.code() << " " << e.name() << ": " << e.message() << "\n";
  }
  try {
    client.complete("Once upon a time", {.max_tokens = 400, .ignore_eos = true, .timeout = 1ms});
  } catch (const tc::Timeout& e) {
    std::cout << "deadline: " << e.code() << " " << e.name() << "\n";
  }
  return 0;
}
