// Round trips of every protocol v1 message type: encode -> decode gives back equal fields.
#include <gtest/gtest.h>
#include <msgpack.hpp>

#include "tessera/common/protocol.h"

namespace tessera::protocol {
namespace {

template <class T>
T round_trip(const T& in) {
  std::string bytes = encode(Message(in));
  auto r = decode(bytes);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().to_string());
  if (!r.ok()) return T{};
  EXPECT_TRUE(std::holds_alternative<T>(*r)) << "decoded as " << message_type(*r);
  if (!std::holds_alternative<T>(*r)) return T{};
  return std::get<T>(*r);
}

SamplingParams odd_sampling() {
  return SamplingParams{.temperature = 0.7f, .top_p = 0.9f, .top_k = 40, .min_p = 0.05f,
                        .repetition_penalty = 1.1f, .presence_penalty = -0.5f, .frequency_penalty = 0.25f,
                        .seed = 0xfedcba9876543210ull, .top_logprobs = 5, .logprobs = true};
}

void expect_sampling_eq(const SamplingParams& a, const SamplingParams& b) {
  EXPECT_EQ(a.temperature, b.temperature);
  EXPECT_EQ(a.top_p, b.top_p);
  EXPECT_EQ(a.top_k, b.top_k);
  EXPECT_EQ(a.min_p, b.min_p);
  EXPECT_EQ(a.repetition_penalty, b.repetition_penalty);
  EXPECT_EQ(a.presence_penalty, b.presence_penalty);
  EXPECT_EQ(a.frequency_penalty, b.frequency_penalty);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.top_logprobs, b.top_logprobs);
  EXPECT_EQ(a.logprobs, b.logprobs);
}

TEST(ProtocolCodec, CompletionRequest) {
  GenerateRequest in;
  in.id = 1ull << 60;
  in.model = "stories260K";
  in.prompt = "Once upon a time \xe2\x9c\x93";
  in.prompt_tokens = {1, 403, 407, 0, 511};
  in.sampling = odd_sampling();
  in.max_tokens = 77;
  in.stop = {"\n\n", "The end"};
  in.stop_token_ids = {2, 13};
  in.ignore_eos = true;
  in.stream = false;
  in.user = "u-42";
  in.preference = "likes dragons";
  in.preference_tokens = {5, 6, 7};
  in.preference_alpha = 0.6f;
  in.priority = -7;
  in.routing_key = "session-9";
  GenerateRequest out = round_trip(in);
  EXPECT_EQ(out.id, in.id);
  EXPECT_EQ(out.kind, RequestKind::kCompletion);
  EXPECT_EQ(out.model, in.model);
  EXPECT_EQ(out.prompt, in.prompt);
  EXPECT_EQ(out.prompt_tokens, in.prompt_tokens);
  expect_sampling_eq(out.sampling, in.sampling);
  EXPECT_EQ(out.max_tokens, 77);
  EXPECT_EQ(out.stop, in.stop);
  EXPECT_EQ(out.stop_token_ids, in.stop_token_ids);
  EXPECT_TRUE(out.ignore_eos);
  EXPECT_FALSE(out.stream);
  EXPECT_EQ(out.user, "u-42");
  EXPECT_EQ(out.preference, "likes dragons");
  EXPECT_EQ(out.preference_tokens, in.preference_tokens);
  EXPECT_EQ(out.preference_alpha, 0.6f);
  EXPECT_EQ(out.priority, -7);
  EXPECT_EQ(out.routing_key, "session-9");
  EXPECT_EQ(message_type(Message(in)), "completion");
}

TEST(ProtocolCodec, ChatRequest) {
  GenerateRequest in;
  in.kind = RequestKind::kChat;
  in.id = 3;
  in.messages = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", ""}};
  GenerateRequest out = round_trip(in);
  EXPECT_EQ(out.kind, RequestKind::kChat);
  ASSERT_EQ(out.messages.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(out.messages[i].role, in.messages[i].role);
    EXPECT_EQ(out.messages[i].content, in.messages[i].content);
  }
  EXPECT_EQ(message_type(Message(in)), "chat");
}

TEST(ProtocolCodec, CancelDrainShutdown) {
  EXPECT_EQ(round_trip(CancelRequest{.id = 99}).id, 99u);
  EXPECT_EQ(round_trip(Drain{.id = 5}).id, 5u);
  EXPECT_EQ(round_trip(Shutdown{.id = 6}).id, 6u);
  EXPECT_EQ(message_type(Message(Drain{})), "drain");
  EXPECT_EQ(message_type(Message(Shutdown{})), "shutdown");
  EXPECT_EQ(message_type(Message(CancelRequest{})), "cancel");
}

TEST(ProtocolCodec, TokenEvent) {
  TokenEvent in{.id = 8, .tokens = {10, 20}, .text = "ab\xc3\xa9", .logprobs = {-0.5f, -1.25f},
                .top_logprobs = {{{10, -0.5f}, {11, -2.0f}}, {{20, -1.25f}}}};
  TokenEvent out = round_trip(in);
  EXPECT_EQ(out.id, 8u);
  EXPECT_EQ(out.tokens, in.tokens);
  EXPECT_EQ(out.text, in.text);
  EXPECT_EQ(out.logprobs, in.logprobs);
  ASSERT_EQ(out.top_logprobs.size(), 2u);
  ASSERT_EQ(out.top_logprobs[0].size(), 2u);
  EXPECT_EQ(out.top_logprobs[0][1].token, 11);
  EXPECT_EQ(out.top_logprobs[0][1].logprob, -2.0f);
  EXPECT_EQ(out.top_logprobs[1][0].token, 20);
}

TEST(ProtocolCodec, FinalEvent) {
  FinalEvent in{.id = 9, .finish_reason = "length", .text = "done", .tokens = {1, 2, 3},
                .usage = {.prompt_tokens = 12, .completion_tokens = 3, .cached_tokens = 8},
                .timings = {.queue_ms = 0.5, .ttft_ms = 12.25, .decode_ms = 40.0, .total_ms = 52.75}};
  FinalEvent out = round_trip(in);
  EXPECT_EQ(out.finish_reason, "length");
  EXPECT_EQ(out.text, "done");
  EXPECT_EQ(out.tokens, in.tokens);
  EXPECT_EQ(out.usage.prompt_tokens, 12);
  EXPECT_EQ(out.usage.completion_tokens, 3);
  EXPECT_EQ(out.usage.cached_tokens, 8);
  EXPECT_EQ(out.timings.queue_ms, 0.5);
  EXPECT_EQ(out.timings.ttft_ms, 12.25);
  EXPECT_EQ(out.timings.decode_ms, 40.0);
  EXPECT_EQ(out.timings.total_ms, 52.75);
}

TEST(ProtocolCodec, ErrorEvent) {
  ErrorEvent out = round_trip(ErrorEvent{.id = 4, .code = ErrorCode::kOverloaded, .message = "queue full"});
  EXPECT_EQ(out.id, 4u);
  EXPECT_EQ(out.code, ErrorCode::kOverloaded);
  EXPECT_EQ(out.message, "queue full");
  auto r = decode(encode_error(7, ErrorCode::kPeerDead, "worker w0 died"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(std::get<ErrorEvent>(*r).code, ErrorCode::kPeerDead);
}

TEST(ProtocolCodec, RegisterAndAck) {
  RegisterWorker in{.id = 1, .worker_name = "host:0", .capabilities = {"cpu", "logprobs"},
                    .model_fingerprint = 0x0123456789abcdefull, .num_pages = 4096, .page_size = 16,
                    .max_batch_tokens = 2048, .max_seq_len = 512, .vocab_size = 512, .eos_id = 2};
  RegisterWorker out = round_trip(in);
  EXPECT_EQ(out.worker_name, "host:0");
  EXPECT_EQ(out.capabilities, in.capabilities);
  EXPECT_EQ(out.model_fingerprint, in.model_fingerprint);
  EXPECT_EQ(out.num_pages, 4096);
  EXPECT_EQ(out.page_size, 16);
  EXPECT_EQ(out.max_batch_tokens, 2048);
  EXPECT_EQ(out.max_seq_len, 512);
  EXPECT_EQ(out.vocab_size, 512);
  EXPECT_EQ(out.eos_id, 2);
  RegisterAck ack = round_trip(RegisterAck{.id = 1, .accepted = false, .reason = "fingerprint mismatch", .heartbeat_ms = 250});
  EXPECT_FALSE(ack.accepted);
  EXPECT_EQ(ack.reason, "fingerprint mismatch");
  EXPECT_EQ(ack.heartbeat_ms, 250);
}

TEST(ProtocolCodec, StepPlanFull) {
  StepPlan p;
  p.step_id = 123456789012ull;
  p.copies = {{3, 9}, {4, 10}};
  p.fills = {KvFill{.request_id = 77, .blob_key = "fp/u1/abc", .pages = {1, 2}, .num_tokens = 20, .alpha = 0.5f}};
  SeqPlan a{.request_id = 77, .tokens = {5, 6, 7}, .start_pos = 20, .block_table = {1, 2},
            .slot_mapping = {20, 21, 22}, .sample = true, .sampling = odd_sampling(), .generated = {9, 9}};
  SeqPlan b{.request_id = 78, .tokens = {100}, .start_pos = 0, .block_table = {5}, .slot_mapping = {80}};
  p.seqs = {a, b};
  p.released = {11, 12};
  StepPlanMsg out = round_trip(StepPlanMsg{.id = p.step_id, .plan = p});
  const StepPlan& q = out.plan;
  EXPECT_EQ(q.step_id, p.step_id);
  ASSERT_EQ(q.copies.size(), 2u);
  EXPECT_EQ(q.copies[1].src, 4);
  EXPECT_EQ(q.copies[1].dst, 10);
  ASSERT_EQ(q.fills.size(), 1u);
  EXPECT_EQ(q.fills[0].request_id, 77u);
  EXPECT_EQ(q.fills[0].blob_key, "fp/u1/abc");
  EXPECT_EQ(q.fills[0].pages, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(q.fills[0].num_tokens, 20);
  EXPECT_EQ(q.fills[0].alpha, 0.5f);
  ASSERT_EQ(q.seqs.size(), 2u);
  EXPECT_EQ(q.seqs[0].tokens, a.tokens);
  EXPECT_EQ(q.seqs[0].start_pos, 20);
  EXPECT_EQ(q.seqs[0].block_table, a.block_table);
  EXPECT_EQ(q.seqs[0].slot_mapping, a.slot_mapping);
  EXPECT_TRUE(q.seqs[0].sample);
  expect_sampling_eq(q.seqs[0].sampling, a.sampling);
  EXPECT_EQ(q.seqs[0].generated, a.generated);
  EXPECT_FALSE(q.seqs[1].sample);
  EXPECT_EQ(q.seqs[1].slot_mapping, b.slot_mapping);
  EXPECT_EQ(q.released, p.released);
}

TEST(ProtocolCodec, StepResult) {
  StepResult r{.step_id = 5, .results = {SeqResult{.request_id = 1, .token = 42, .logprob = -0.125f, .top = {{42, -0.125f}, {7, -3.0f}}},
                                         SeqResult{.request_id = 2, .token = 0}},
               .error_code = ErrorCode::kOk, .error_message = "", .compute_ms = 1.5};
  StepResultMsg out = round_trip(StepResultMsg{.id = 5, .result = r});
  ASSERT_EQ(out.result.results.size(), 2u);
  EXPECT_EQ(out.result.results[0].token, 42);
  EXPECT_EQ(out.result.results[0].logprob, -0.125f);
  ASSERT_EQ(out.result.results[0].top.size(), 2u);
  EXPECT_EQ(out.result.results[0].top[1].token, 7);
  EXPECT_EQ(out.result.results[1].request_id, 2u);
  EXPECT_EQ(out.result.compute_ms, 1.5);
  StepResultMsg failed = round_trip(StepResultMsg{.id = 6, .result = {.step_id = 6, .error_code = ErrorCode::kCorruptFile, .error_message = "bad page"}});
  EXPECT_EQ(static_cast<int32_t>(failed.result.error_code), 301);  // the same integer on the wire
  EXPECT_EQ(failed.result.error_code, ErrorCode::kCorruptFile);
  EXPECT_EQ(failed.result.error_message, "bad page");
}

TEST(ProtocolCodec, Heartbeat) {
  Heartbeat out = round_trip(Heartbeat{.id = 17, .role = "scheduler", .name = "s0", .live_workers = 2, .running = 3,
                                       .waiting = 4, .free_pages = 500, .unix_ms = 1763712000000});
  EXPECT_EQ(out.id, 17u);
  EXPECT_EQ(out.role, "scheduler");
  EXPECT_EQ(out.name, "s0");
  EXPECT_EQ(out.live_workers, 2);
  EXPECT_EQ(out.running, 3);
  EXPECT_EQ(out.waiting, 4);
  EXPECT_EQ(out.free_pages, 500);
  EXPECT_EQ(out.unix_ms, 1763712000000);
  EXPECT_TRUE(out.workers.empty());
}

// `instance` (the scheduler's restart detector) round-trips at full 64-bit width; absent (an old
// peer, or 0 on the encoding side) it decodes as 0.
TEST(ProtocolCodec, SchedulerInstanceRoundTripAndAbsent) {
  const uint64_t big = 0xfedcba9876543210ull;
  EXPECT_EQ(round_trip(Heartbeat{.id = 1, .role = "scheduler", .instance = big}).instance, big);
  EXPECT_EQ(round_trip(RegisterAck{.id = 1, .heartbeat_ms = 100, .instance = big}).instance, big);
  EXPECT_EQ(round_trip(Heartbeat{.id = 1, .role = "frontend"}).instance, 0u);
  EXPECT_EQ(round_trip(RegisterAck{.id = 1}).instance, 0u);
  EXPECT_EQ(encode(Heartbeat{.id = 1}).find("instance"), std::string::npos) << "0 is sent as absent";
  // An old scheduler's register_ack / heartbeat without the field (hand-built msgpack) decodes.
  for (const std::string& type : {std::string("heartbeat"), std::string("register_ack")}) {
    msgpack::sbuffer buf;
    msgpack::packer<msgpack::sbuffer> pk(buf);
    pk.pack_map(4);
    pk.pack("v").pack(1).pack("type").pack(type).pack("id").pack(9).pack("accepted").pack(true);
    auto r = decode(std::string(buf.data(), buf.size()));
    ASSERT_TRUE(r.ok()) << type << ": " << r.error().to_string();
    if (auto* h = std::get_if<Heartbeat>(&*r)) EXPECT_EQ(h->instance, 0u);
    else EXPECT_EQ(std::get<RegisterAck>(*r).instance, 0u);
  }
  // A wrong type is an error naming the field.
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(4);
  pk.pack("v").pack(1).pack("type").pack("heartbeat").pack("id").pack(9).pack("instance").pack("x");
  auto bad = decode(std::string(buf.data(), buf.size()));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("instance"), std::string::npos) << bad.error().message;
}

// `draining` (a scheduler that got SIGTERM, docs/protocol.md "Scheduler drain") round-trips;
// false is sent as absent, so an older peer's heartbeat decodes as not draining.
TEST(ProtocolCodec, SchedulerDrainingRoundTripAndAbsent) {
  EXPECT_TRUE(round_trip(Heartbeat{.id = 0, .role = "scheduler", .instance = 5, .draining = true}).draining);
  EXPECT_FALSE(round_trip(Heartbeat{.id = 1, .role = "scheduler", .instance = 5}).draining);
  EXPECT_EQ(encode(Heartbeat{.id = 1}).find("draining"), std::string::npos) << "false is sent as absent";
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(4);
  pk.pack("v").pack(1).pack("type").pack("heartbeat").pack("id").pack(9).pack("draining").pack(3);
  auto bad = decode(std::string(buf.data(), buf.size()));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("draining"), std::string::npos) << bad.error().message;
}

TEST(ProtocolCodec, HeartbeatPerWorkerPages) {
  Heartbeat out = round_trip(Heartbeat{.id = 2, .role = "scheduler", .live_workers = 2,
                                       .workers = {{.name = "w0", .free_pages = 10, .held_pages = 3, .cached_pages = 5,
                                                    .running = 1, .waiting = 2},
                                                   {.name = "w1", .free_pages = 18}}});
  ASSERT_EQ(out.workers.size(), 2u);
  EXPECT_EQ(out.workers[0].name, "w0");
  EXPECT_EQ(out.workers[0].free_pages, 10);
  EXPECT_EQ(out.workers[0].held_pages, 3);
  EXPECT_EQ(out.workers[0].cached_pages, 5);
  EXPECT_EQ(out.workers[0].running, 1);
  EXPECT_EQ(out.workers[0].waiting, 2);
  EXPECT_EQ(out.workers[1].name, "w1");
  EXPECT_EQ(out.workers[1].free_pages, 18);
  EXPECT_EQ(out.workers[1].held_pages, 0);
}

TEST(ProtocolCodec, HeartbeatTotalsAndPerWorkerPromptTokens) {
  Heartbeat in{.id = 3, .role = "scheduler", .workers = {{.name = "w0", .prompt_tokens = 100, .cached_prompt_tokens = 64}}};
  in.totals = SchedulerTotals{.finished_requests = 7, .prompt_tokens = 100, .cached_prompt_tokens = 64, .generation_tokens = 250,
                              .preemptions = 1, .ttft_count = 6, .ttft_seconds_sum = 0.125};
  Heartbeat out = round_trip(in);
  ASSERT_EQ(out.workers.size(), 1u);
  EXPECT_EQ(out.workers[0].prompt_tokens, 100);
  EXPECT_EQ(out.workers[0].cached_prompt_tokens, 64);
  ASSERT_TRUE(out.totals.has_value());
  EXPECT_EQ(out.totals->finished_requests, 7);
  EXPECT_EQ(out.totals->generation_tokens, 250);
  EXPECT_EQ(out.totals->preemptions, 1);
  EXPECT_EQ(out.totals->ttft_count, 6);
  EXPECT_DOUBLE_EQ(out.totals->ttft_seconds_sum, 0.125);
  // Other roles send none, and an older scheduler's beat decodes without it.
  EXPECT_FALSE(round_trip(Heartbeat{.id = 4, .role = "frontend"}).totals.has_value());
}

TEST(ProtocolCodec, PreferenceFillTokensAndProvenance) {
  StepPlan p;
  p.step_id = 3;
  p.fills = {KvFill{.request_id = 9, .blob_key = "k", .pages = {4}, .num_tokens = 3, .alpha = 0.7f, .tokens = {11, 12, 13}}};
  StepPlanMsg plan = round_trip(StepPlanMsg{.id = 3, .plan = p});
  ASSERT_EQ(plan.plan.fills.size(), 1u);
  EXPECT_EQ(plan.plan.fills[0].tokens, (std::vector<int32_t>{11, 12, 13}));
  StepResult r{.step_id = 3};
  r.fills = {FillResult{.request_id = 9, .source = "redis", .kv_bytes = 123456789012, .transfer_ms = 0.25, .compute_ms = 0.0},
             FillResult{.request_id = 10, .source = "compute", .kv_bytes = 5, .transfer_ms = 0.0, .compute_ms = 2.5}};
  StepResultMsg res = round_trip(StepResultMsg{.id = 3, .result = r});
  ASSERT_EQ(res.result.fills.size(), 2u);
  EXPECT_EQ(res.result.fills[0].source, "redis");
  EXPECT_EQ(res.result.fills[0].kv_bytes, 123456789012);
  EXPECT_EQ(res.result.fills[0].transfer_ms, 0.25);
  EXPECT_EQ(res.result.fills[1].request_id, 10u);
  EXPECT_EQ(res.result.fills[1].compute_ms, 2.5);
}

TEST(ProtocolCodec, IntegerAndStringWidths) {
  // Every msgpack integer width, both signs, and every string length class.
  for (int64_t v : std::vector<int64_t>{0ll, 1ll, 127ll, 128ll, 255ll, 256ll, 65535ll, 65536ll, 4294967295ll, 4294967296ll, -1ll, -32ll, -33ll,
                    -128ll, -129ll, -32768ll, -32769ll, -2147483648ll, -2147483649ll, INT64_MIN, INT64_MAX}) {
    Heartbeat out = round_trip(Heartbeat{.id = static_cast<uint64_t>(v), .unix_ms = v});
    EXPECT_EQ(out.unix_ms, v);
    EXPECT_EQ(out.id, static_cast<uint64_t>(v));
  }
  EXPECT_EQ(round_trip(CancelRequest{.id = UINT64_MAX}).id, UINT64_MAX);
  for (size_t n : {0u, 31u, 32u, 255u, 256u, 65535u, 65536u, 100000u}) {
    std::string text(n, 'x');
    EXPECT_EQ(round_trip(TokenEvent{.id = 1, .text = text}).text, text);
  }
  StepResultMsg r = round_trip(StepResultMsg{.id = 1, .result = {.step_id = 1, .compute_ms = -1e300}});
  EXPECT_EQ(r.result.compute_ms, -1e300);
}

TEST(ProtocolCodec, MessageIdAndType) {
  Message m = TokenEvent{.id = 31};
  EXPECT_EQ(message_id(m), 31u);
  EXPECT_EQ(message_type(m), "token");
  EXPECT_EQ(peek_id(encode(m)), 31u);
}

}  // namespace
}  // namespace tessera::protocol
