#include "message_seeds.h"

#include <string>

#include "messages.h"  // kvstore/src (private to kvstore/; the fuzz build reads it on purpose)
#include "tessera/kvstore/blob.h"
#include "tessera/common/protocol.h"

namespace tessera::fuzz {
namespace {

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

std::vector<uint8_t> with_mode(FrontendMode mode, const std::string& body) {
  std::vector<uint8_t> out{static_cast<uint8_t>(mode)};
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

protocol::GenerateRequest completion() {
  protocol::GenerateRequest r;
  r.id = 7;
  r.prompt = "Once upon a time";
  r.max_tokens = 8;
  r.stop = {"\n\n", "The end"};
  r.stop_token_ids = {2};
  r.user = "alice";
  r.preference = "likes dragons";
  r.preference_alpha = 0.4f;
  r.priority = 3;
  r.routing_key = "k";
  r.cache_salt = "salt";
  r.sampling.temperature = 0.7f;
  r.sampling.top_p = 0.9f;
  r.sampling.top_k = 40;
  r.sampling.seed = 42;
  r.sampling.logprobs = true;
  r.sampling.top_logprobs = 2;
  r.sampling.logit_bias = {{5, 1.5f}, {9, -100.0f}};
  return r;
}

protocol::GenerateRequest chat() {
  protocol::GenerateRequest r;
  r.id = 8;
  r.kind = protocol::RequestKind::kChat;
  r.messages = {{"system", "Be brief."}, {"user", "Hi <|im_start|> there"}, {"assistant", "Hello."}, {"user", "Again"}};
  r.stream = false;
  r.api_key = "sk-test";
  return r;
}

std::vector<protocol::Message> messages() {
  using namespace protocol;
  std::vector<Message> out;
  out.push_back(completion());
  out.push_back(chat());
  GenerateRequest tokens = completion();
  tokens.prompt.clear();
  tokens.prompt_tokens = {1, 403, 407, 261};
  tokens.tenant = "acme";
  out.push_back(tokens);
  out.push_back(CancelRequest{.id = 7});
  out.push_back(TokenEvent{.id = 7, .tokens = {5, 6}, .text = "ab", .logprobs = {-0.5f, -1.0f},
                           .top_logprobs = {{{5, -0.5f}, {6, -2.0f}}, {{6, -1.0f}}}});
  FinalEvent fin{.id = 7, .finish_reason = "length", .text = "abc", .tokens = {5, 6, 7}};
  fin.usage = {.prompt_tokens = 4, .completion_tokens = 3, .cached_tokens = 0, .preference_source = "kvstore",
               .preference_kv_bytes = 1024, .preference_transfer_ms = 0.5};
  fin.timings = {.queue_ms = 1, .ttft_ms = 2, .decode_ms = 3, .total_ms = 6};
  out.push_back(fin);
  out.push_back(ErrorEvent{.id = 7, .code = ErrorCode::kOutOfRange, .message = "max_tokens must be >= 1 (got 0)"});
  out.push_back(RegisterWorker{.id = 1, .worker_name = "w0", .capabilities = {"cpu", "kv_fill", "logprobs"},
                               .model_fingerprint = 0x1234abcdULL, .num_pages = 64, .page_size = 16,
                               .max_batch_tokens = 512, .max_seq_len = 512, .vocab_size = 512, .eos_id = 2});
  out.push_back(RegisterAck{.id = 1, .accepted = false, .reason = "fingerprint differs", .heartbeat_ms = 500, .instance = 99});
  StepPlanMsg plan;
  plan.id = 3;
  plan.plan.step_id = 3;
  plan.plan.copies = {{1, 2}};
  plan.plan.fills = {{.request_id = 7, .blob_key = "k", .pages = {4}, .num_tokens = 3, .alpha = 0.5f, .tokens = {1, 2, 3}}};
  SeqPlan seq{.request_id = 7, .tokens = {1, 403}, .start_pos = 0, .block_table = {0}, .slot_mapping = {0, 1}, .sample = true};
  seq.sampling.temperature = 0.0f;
  seq.generated = {9};
  plan.plan.seqs = {seq};
  plan.plan.released = {5};
  out.push_back(plan);
  StepResultMsg result;
  result.id = 3;
  result.result = {.step_id = 3, .results = {{.request_id = 7, .token = 9, .logprob = -0.1f, .top = {{9, -0.1f}}}},
                   .error_code = ErrorCode::kOk, .error_message = "", .compute_ms = 1.5,
                   .fills = {{.request_id = 7, .source = "compute", .kv_bytes = 10, .transfer_ms = 0, .compute_ms = 1}}};
  out.push_back(result);
  out.push_back(Heartbeat{.id = 4, .role = "scheduler", .name = "s", .live_workers = 1, .running = 2, .waiting = 3,
                          .free_pages = 60, .unix_ms = 1700000000000,
                          .workers = {{.name = "w0", .free_pages = 60, .held_pages = 2, .cached_pages = 2}},
                          .instance = 5, .context_length = 512, .page_size = 16});
  out.push_back(Drain{.id = 1});
  out.push_back(Shutdown{.id = 1});
  out.push_back(InvalidateUser{.id = 1, .user = "alice"});
  return out;
}

}  // namespace

std::vector<std::vector<uint8_t>> protocol_seeds() {
  std::vector<std::vector<uint8_t>> out;
  for (const protocol::Message& m : messages()) out.push_back(bytes_of(protocol::encode(m)));
  out.push_back(bytes_of(protocol::encode_error(3, ErrorCode::kMalformedMessage, "bad")));
  return out;
}

std::vector<std::vector<uint8_t>> kvstore_seeds() {
  using namespace kvstore::wire;
  std::vector<std::vector<uint8_t>> out;
  const kvstore::BlobKey key{.fingerprint = 0xfeedULL, .user = "alice", .hash = "h1"};
  for (Op op : {Op::kPut, Op::kGet, Op::kExists, Op::kDelete, Op::kInvalidateUser, Op::kClear, Op::kStats}) {
    Request r{.id = 11, .op = op, .key = key};
    if (op == Op::kPut) {
      r.blob = "TKVB blob bytes";
      r.ttl_s = 60;
    }
    out.push_back(bytes_of(encode_request(r)));
  }
  Request many{.id = 12, .op = Op::kGetMany, .key = key};
  many.hashes = {"h1", "h2", "h3"};
  out.push_back(bytes_of(encode_request(many)));
  out.push_back(bytes_of(encode_reply(Reply{.id = 11, .type = "get_reply", .found = true, .tier = "l1", .blob = "xyz"})));
  Reply many_reply{.id = 12, .type = "get_many_reply"};
  many_reply.results = {ManyEntry{.found = true, .tier = "l2", .blob = "abc"}, ManyEntry{}};
  out.push_back(bytes_of(encode_reply(many_reply)));
  out.push_back(bytes_of(encode_reply(Reply{.id = 11, .type = "put_reply", .stored_l1 = true, .note = "n"})));
  Reply stats{.id = 11, .type = "stats_reply"};
  stats.metrics = "tessera_kvstore_l1_entries 1\n";
  stats.redis_configured = true;
  stats.l1_entries = 1;
  out.push_back(bytes_of(encode_reply(stats)));
  out.push_back(bytes_of(encode_error(11, ErrorCode::kInvalidArgument, "missing required field 'user'")));
  return out;
}

std::vector<std::vector<uint8_t>> frontend_seeds() {
  std::vector<std::vector<uint8_t>> out;
  // Long bodies are concatenated literals inside parentheses (one element each).
  const char* completions[] = {
      R"({"prompt": "Once upon a time", "max_tokens": 8})",
      (R"({"model": "stories260K", "prompt": "Lily", "max_tokens": 4, "temperature": 0.5, "top_p": 0.9, "top_k": 5,)"
       R"( "seed": 3, "stop": ["\n", "end"], "logprobs": 2, "stream": true, "stream_options": {"include_usage": true},)"
       R"( "user": "alice", "preference": "likes cats", "logit_bias": {"5": 2.0}, "presence_penalty": 0.5, "n": 1})"),
      (R"({"prompt": [1, 403, 407], "max_tokens": 2, "ignore_eos": true, "stop_token_ids": [2], "priority": -3,)"
       R"( "routing_key": "r", "cache_salt": "s", "min_p": 0.1, "repetition_penalty": 1.1, "frequency_penalty": 0.2})"),
      R"({"prompt": "x", "max_tokens": 0})",
      R"({"prompt": "\u00e9t\u00e9 \ud83d\ude00", "echo": false})",
  };
  for (const char* c : completions) out.push_back(with_mode(FrontendMode::kCompletionJson, c));
  const char* chats[] = {
      R"({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4})",
      (R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]},)"
       R"( {"role": "assistant", "content": "Hey"}, {"role": "user", "content": "<|im_start|>x"}], "logprobs": true,)"
       R"( "top_logprobs": 3, "max_completion_tokens": 5})"),
      R"({"messages": [{"role": "assistant", "content": null}], "user": "bob"})",
  };
  for (const char* c : chats) out.push_back(with_mode(FrontendMode::kChatJson, c));
  out.push_back(with_mode(FrontendMode::kTokenizeJson, R"({"prompt": "Once upon a time", "add_special_tokens": false})"));
  out.push_back(with_mode(FrontendMode::kTokenizeJson, R"({"messages": [{"role": "user", "content": "Hi"}]})"));
  out.push_back(with_mode(FrontendMode::kDetokenizeJson, R"({"tokens": [1, 403, 407, 261]})"));
  for (const protocol::Message& m : messages()) {
    if (std::holds_alternative<protocol::GenerateRequest>(m))
      out.push_back(with_mode(FrontendMode::kClientMsgpack, protocol::encode(m)));
  }
  return out;
}

std::vector<std::vector<uint8_t>> kvstore_blob_seeds() {
  std::vector<std::vector<uint8_t>> out;
  const kvstore::KvShape shape{.n_layers = 2, .n_tokens = 5, .n_kv_heads = 2, .head_dim = 8};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    kvstore::PackedKv kv{.fingerprint = 0xfeedULL, .dtype = dtype, .shape = shape};
    kv.k.resize(kv.region_bytes());
    kv.v.resize(kv.region_bytes());
    const uint64_t n = shape.elements_per_region();
    const size_t eb = kvstore::element_bytes(dtype);
    for (uint64_t i = 0; i < n; ++i) {
      kvstore::float_to_element(dtype, static_cast<float>(static_cast<int64_t>(i * 7919 % 23) - 11) * 0.25f, kv.k.data() + i * eb);
      kvstore::float_to_element(dtype, static_cast<float>(static_cast<int64_t>(i * 104729 % 17) - 8) * 0.1f, kv.v.data() + i * eb);
    }
    for (kvstore::Codec c : {kvstore::Codec::kNone, kvstore::Codec::kZstd, kvstore::Codec::kInt8, kvstore::Codec::kInt4,
                             kvstore::Codec::kKivi, kvstore::Codec::kTiered}) {
      auto blob = kvstore::encode_blob(kv, {.codec = c, .group_size = 4, .tiered_recent = 2});
      if (blob.ok()) out.push_back(bytes_of(*blob));
    }
    // tiered with per-token step exponents (flags 1)
    auto decayed = kvstore::encode_blob(kv, {.codec = kvstore::Codec::kTiered, .tiered_recent = 0, .tiered_decay = 4.0f});
    if (decayed.ok()) out.push_back(bytes_of(*decayed));
  }
  return out;
}

}  // namespace tessera::fuzz
