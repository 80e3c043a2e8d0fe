// StepExecutor over a scripted Backend: what the executor owns (validation before anything is
// applied, releases, the order of copies / fills / forward, capability refusals, device greedy
// vs host sampling, result assembly), independent of any real forward pass. The CPU engine's
// execute() tests (execute_test.cpp) run the same executor over the CPU backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "synth_model.h"
#include "tessera/worker/step_executor.h"

namespace tessera::worker {
namespace {

using testing::SynthModel;
using testing::SynthSpec;

constexpr int32_t kPageSize = 4;
constexpr int32_t kPages = 8;
constexpr int32_t kVocab = 97;

// A backend that computes nothing: it logs every call and answers with scripted logits (the
// row of a sequence peaks at (last token + 1) % vocab) or argmax tokens (last token + 2).
class FakeBackend final : public Backend {
 public:
  explicit FakeBackend(const Model& m) : model_(m) {}

  std::string_view name() const override { return "fake"; }
  const Model& model() const override { return model_; }
  PoolGeometry geometry() const override {
    return {.num_pages = kPages, .page_size = kPageSize, .n_layers = 2, .n_kv_heads = 2, .head_dim = 16};
  }
  BackendCaps capabilities() const override { return caps; }

  Result<std::span<float>> forward(std::span<const SeqInput> batch) override {
    log.push_back("forward " + std::to_string(batch.size()));
    logits.clear();
    for (const SeqInput& in : batch) {
      if (!in.want_logits) continue;
      std::vector<float> row(kVocab, 0.0f);
      row[static_cast<size_t>((in.tokens.back() + 1) % kVocab)] = 10.0f;
      logits.insert(logits.end(), row.begin(), row.end());
    }
    return std::span<float>(logits);
  }
  Result<std::vector<int32_t>> forward_argmax(std::span<const SeqInput> batch) override {
    log.push_back("argmax " + std::to_string(batch.size()));
    std::vector<int32_t> out;
    for (const SeqInput& in : batch) {
      if (in.want_logits) out.push_back((in.tokens.back() + 2) % kVocab);
    }
    return out;
  }
  Status copy_page(int32_t src, int32_t dst) override {
    log.push_back("copy " + std::to_string(src) + "->" + std::to_string(dst));
    return ok_status();
  }

  // CacheBlend: logs "blend CACHED..END want W"; every position of [cached, end) inside a chunk
  // counts as a hit; the row peaks at (token end - 1) + 1.
  Result<BlendOutcome> blend_prefill(const BlendInput& in) override {
    const int32_t end = in.end < 0 ? static_cast<int32_t>(in.tokens.size()) : in.end;
    log.push_back("blend " + std::to_string(in.cached) + ".." + std::to_string(end) + " want " + std::to_string(in.want_logits) +
                  " of " + std::to_string(in.tokens.size()));
    blend_tokens.assign(in.tokens.begin(), in.tokens.end());
    BlendOutcome out;
    for (const ChunkSpan& c : in.chunks) {
      out.hit_tokens += std::max(0, std::min(c.begin + c.length, end) - std::max(c.begin, in.cached));
    }
    blend_row.assign(kVocab, 0.0f);
    blend_row[static_cast<size_t>((in.tokens[static_cast<size_t>(end - 1)] + 1) % kVocab)] = 10.0f;
    if (in.want_logits) out.logits = blend_row;
    return out;
  }

  BackendCaps caps;
  std::vector<std::string> log;
  std::vector<float> logits, blend_row;
  std::vector<int32_t> blend_tokens;  // the tokens of the last blend_prefill

 private:
  const Model& model_;
};

SeqPlan seq(uint64_t id, std::vector<int32_t> tokens, int32_t start, std::vector<int32_t> table, bool sample = true) {
  SeqPlan s;
  s.request_id = id;
  s.tokens = std::move(tokens);
  s.start_pos = start;
  s.block_table = std::move(table);
  for (int32_t i = 0; i < static_cast<int32_t>(s.tokens.size()); ++i) {
    const int32_t p = start + i;
    s.slot_mapping.push_back(static_cast<int64_t>(s.block_table[static_cast<size_t>(p / kPageSize)]) * kPageSize + p % kPageSize);
  }
  s.sample = sample;
  s.sampling.temperature = 0.0f;
  return s;
}

class StepExecutorTest : public ::testing::Test {
 protected:
  StepExecutorTest() : model_(SynthSpec{.vocab_size = kVocab}), backend_(model_), exec_(backend_) {}

  // The plan is refused with `code` and a message containing `needle`, and the backend saw nothing.
  void expect_refused(const StepPlan& plan, ErrorCode code, const std::string& needle) {
    backend_.log.clear();
    const size_t states = exec_.num_request_states();
    auto r = exec_.execute(plan);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, code) << r.error().to_string();
    EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
    EXPECT_TRUE(backend_.log.empty()) << "a refused plan reached the backend: " << backend_.log.front();
    EXPECT_EQ(exec_.num_request_states(), states);
  }

  SynthModel model_;
  FakeBackend backend_;
  StepExecutor exec_;
};

TEST_F(StepExecutorTest, InvalidPlansNeverReachTheBackend) {
  StepPlan p;
  p.step_id = 42;
  p.released = {7};
  p.copies = {{.src = 0, .dst = 1}};
  p.seqs = {seq(1, {1, 2, 3}, 0, {kPages})};
  expect_refused(p, ErrorCode::kOutOfRange, "step 42: seq 0: block_table[0] = 8");

  p.seqs = {seq(1, {1}, 0, {2}), seq(1, {2}, 0, {3})};
  expect_refused(p, ErrorCode::kInvalidArgument, "request 1 appears twice in step 42");

  p.seqs = {seq(1, {1, kVocab}, 0, {2})};
  expect_refused(p, ErrorCode::kOutOfRange, "token 97");

  p.seqs = {seq(1, {1}, 0, {2})};
  p.seqs[0].generated = {-1};
  expect_refused(p, ErrorCode::kOutOfRange, "generated token -1");

  p.seqs = {seq(1, {1}, 0, {2})};
  p.seqs[0].sampling.repetition_penalty = 0.0f;
  expect_refused(p, ErrorCode::kInvalidArgument, "repetition_penalty");

  p.seqs = {seq(1, {1}, 0, {2})};
  p.copies = {{.src = 0, .dst = 1}, {.src = -1, .dst = 2}};
  expect_refused(p, ErrorCode::kOutOfRange, "copies[1]");

  p.copies.clear();
  p.fills.push_back({.request_id = 1, .blob_key = "k", .pages = {kPages}, .num_tokens = 2, .alpha = 0.5f});
  exec_.set_fill_handler([](const KvFill&) -> Result<FillResult> { return FillResult{}; });
  backend_.caps.kv_fill = true;
  expect_refused(p, ErrorCode::kOutOfRange, "fills[0]: page 8");
}

TEST_F(StepExecutorTest, BackendLimitsAreCheckedBeforeAnything) {
  backend_.caps.max_seqs = 1;
  StepPlan p;
  p.seqs = {seq(1, {1}, 0, {2}), seq(2, {2}, 0, {3})};
  expect_refused(p, ErrorCode::kTooLarge, "max_seqs is 1");

  backend_.caps = {};
  backend_.caps.max_batch_tokens = 4;
  p.seqs = {seq(1, {1, 2, 3}, 0, {2}), seq(2, {4, 5}, 0, {3})};
  expect_refused(p, ErrorCode::kTooLarge, "max_batch_tokens 4");

  backend_.caps = {};
  backend_.caps.max_context = 8;
  p.seqs = {seq(1, {1, 2}, 7, {2, 3, 4})};
  expect_refused(p, ErrorCode::kOutOfRange, "positions [7, 9) outside the context [0, 8)");
}

TEST_F(StepExecutorTest, MissingCapabilitiesAreRefusedByName) {
  StepPlan p;
  p.step_id = 3;
  p.seqs = {seq(1, {1}, 0, {2})};
  p.fills.push_back({.request_id = 5, .blob_key = "k", .pages = {4}, .num_tokens = 2, .alpha = 0.5f});
  exec_.set_fill_handler([](const KvFill&) -> Result<FillResult> { return FillResult{}; });
  expect_refused(p, ErrorCode::kUnsupported, "step 3: fills[0] (request 5) needs capability kv_fill");
  expect_refused(p, ErrorCode::kUnsupported, "the fake backend lacks");

  p.fills.clear();
  struct Case {
    const char* name;
    Where BackendCaps::*field;
    void (*use)(SamplingParams&);
  };
  const Case cases[] = {
      {"greedy", &BackendCaps::greedy, [](SamplingParams& s) { s.temperature = 0.0f; }},
      {"temperature", &BackendCaps::temperature, [](SamplingParams& s) { s.temperature = 0.8f; }},
      {"top_k", &BackendCaps::top_k, [](SamplingParams& s) { s.temperature = 0.8f, s.top_k = 5; }},
      {"top_p", &BackendCaps::top_p, [](SamplingParams& s) { s.temperature = 0.8f, s.top_p = 0.9f; }},
      {"min_p", &BackendCaps::min_p, [](SamplingParams& s) { s.temperature = 0.8f, s.min_p = 0.1f; }},
      {"penalties", &BackendCaps::penalties, [](SamplingParams& s) { s.presence_penalty = 0.5f; }},
      {"logprobs", &BackendCaps::logprobs, [](SamplingParams& s) { s.top_logprobs = 2; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    backend_.caps = {};
    backend_.caps.*c.field = Where::kNone;
    p.seqs = {seq(9, {1}, 0, {2})};
    c.use(p.seqs[0].sampling);
    expect_refused(p, ErrorCode::kUnsupported, std::string("request 9 needs capability ") + c.name + " (sampling)");
    EXPECT_FALSE(exec_.check_capabilities(p).ok());
    // A row that does not sample needs no sampling capability.
    p.seqs[0].sample = false;
    EXPECT_TRUE(exec_.check_capabilities(p).ok());
  }
}

TEST_F(StepExecutorTest, CapabilityNamesListWhatTheBackendSupports) {
  BackendCaps caps;
  EXPECT_EQ(capability_names("cpu", caps),
            (std::vector<std::string>{"cpu", "greedy", "temperature", "top_k", "top_p", "min_p", "penalties", "logprobs"}));
  caps.kv_fill = true;
  caps.min_p = Where::kNone;
  caps.greedy = Where::kDevice;
  EXPECT_EQ(capability_names("cuda", caps),
            (std::vector<std::string>{"cuda", "kv_fill", "greedy", "temperature", "top_k", "top_p", "penalties", "logprobs"}));
  backend_.caps = caps;
  EXPECT_EQ(exec_.capabilities().front(), "fake");
}

TEST_F(StepExecutorTest, AppliesReleasesCopiesFillsThenForwardInOrder) {
  backend_.caps.kv_fill = true;
  exec_.set_fill_handler([this](const KvFill& f) -> Result<FillResult> {
    backend_.log.push_back("fill " + std::to_string(f.request_id));
    return FillResult{.request_id = f.request_id, .source = "compute"};
  });
  StepPlan p;
  p.step_id = 11;
  p.copies = {{.src = 0, .dst = 1}, {.src = 2, .dst = 3}};
  p.fills.push_back({.request_id = 4, .blob_key = "k", .pages = {5}, .num_tokens = 2, .alpha = 0.5f});
  p.seqs = {seq(4, {10, 20}, 2, {5}), seq(6, {30}, 0, {6}, false)};
  auto r = exec_.execute(p);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(backend_.log, (std::vector<std::string>{"copy 0->1", "copy 2->3", "fill 4", "forward 2"}));
  EXPECT_EQ(r->step_id, 11u);
  ASSERT_EQ(r->fills.size(), 1u);
  EXPECT_EQ(r->fills[0].request_id, 4u);
  EXPECT_EQ(r->fills[0].source, "compute");
  ASSERT_EQ(r->results.size(), 1u);  // only sampled sequences answer
  EXPECT_EQ(r->results[0].request_id, 4u);
  EXPECT_EQ(r->results[0].token, 21);  // the fake's logits peak at last token + 1
}

TEST_F(StepExecutorTest, AFailingFillFailsTheStepAfterTheCopies) {
  backend_.caps.kv_fill = true;
  exec_.set_fill_handler([](const KvFill&) -> Result<FillResult> {
    return make_error(ErrorCode::kNotFound, "not in the kvstore");
  });
  StepPlan p;
  p.step_id = 2;
  p.copies = {{.src = 0, .dst = 1}};
  p.fills.push_back({.request_id = 4, .blob_key = "k", .pages = {5}, .num_tokens = 2, .alpha = 0.5f});
  p.seqs = {seq(4, {10}, 2, {5})};
  auto r = exec_.execute(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
  EXPECT_NE(r.error().message.find("step 2: fills[0] (request 4): not in the kvstore"), std::string::npos) << r.error().message;
  EXPECT_EQ(backend_.log, (std::vector<std::string>{"copy 0->1"}));
}

TEST_F(StepExecutorTest, ReleasesAndResetDropSamplerState) {
  StepPlan p;
  p.seqs = {seq(1, {1}, 0, {1}), seq(2, {2}, 0, {2}), seq(3, {3}, 0, {3}, false)};
  ASSERT_TRUE(exec_.execute(p).ok());
  EXPECT_EQ(exec_.num_request_states(), 2u);  // request 3 did not sample

  StepPlan release;
  release.released = {1, 99};  // an unknown id is fine
  backend_.log.clear();
  ASSERT_TRUE(exec_.execute(release).ok());
  EXPECT_EQ(exec_.num_request_states(), 1u);
  EXPECT_TRUE(backend_.log.empty()) << "a release-only plan computes nothing";

  exec_.reset_requests();
  EXPECT_EQ(exec_.num_request_states(), 0u);

  StepPlan copy_only;
  copy_only.copies = {{.src = 1, .dst = 2}};
  ASSERT_TRUE(exec_.execute(copy_only).ok());
  EXPECT_EQ(backend_.log, (std::vector<std::string>{"copy 1->2", "forward 0"}))  // waits for the copies
      << "copies alone still end with a (empty) forward";
}

TEST_F(StepExecutorTest, PenaltyHistoryLivesUntilRelease) {
  // Presence penalty 100 on the generated history: a token already generated is never picked
  // again while the request's state lives; after a release, the history comes from the plan.
  auto plan = [](std::vector<int32_t> generated) {
    StepPlan p;
    p.seqs = {seq(1, {4}, 0, {1})};
    p.seqs[0].sampling.presence_penalty = 100.0f;
    p.seqs[0].generated = std::move(generated);
    return p;
  };
  auto r1 = exec_.execute(plan({}));
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(r1->results[0].token, 5);  // the peak (last token + 1)
  auto r2 = exec_.execute(plan({}));
  ASSERT_TRUE(r2.ok());
  EXPECT_NE(r2->results[0].token, 5) << "the sampler's own history penalizes 5";

  StepPlan release;
  release.released = {1};
  ASSERT_TRUE(exec_.execute(release).ok());
  auto r3 = exec_.execute(plan({}));
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(r3->results[0].token, 5) << "a released request starts afresh";
  exec_.reset_requests();
  auto r4 = exec_.execute(plan({5}));
  ASSERT_TRUE(r4.ok());
  EXPECT_NE(r4->results[0].token, 5) << "history sent with the plan after a reset";
}

TEST_F(StepExecutorTest, DeviceGreedyOnlyWhenEveryRowIsPlainGreedy) {
  backend_.caps.greedy = Where::kDevice;
  StepPlan p;
  p.seqs = {seq(1, {10}, 0, {1}), seq(2, {20}, 0, {2}, false), seq(3, {30}, 0, {3})};
  auto r = exec_.execute(p);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(backend_.log, (std::vector<std::string>{"argmax 3"}));
  ASSERT_EQ(r->results.size(), 2u);
  EXPECT_EQ(r->results[0].token, 12);
  EXPECT_EQ(r->results[1].token, 32);

  backend_.log.clear();
  p.seqs[2] = seq(4, {30}, 0, {3});
  p.seqs[2].sampling.logprobs = true;  // needs the logits: the host samples every row
  r = exec_.execute(p);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(backend_.log, (std::vector<std::string>{"forward 3"}));
  EXPECT_EQ(r->results[0].token, 11);
  EXPECT_EQ(r->results[1].token, 31);
  EXPECT_LT(r->results[1].logprob, 0.0f);
}

}  // namespace
}  // namespace tessera::worker

namespace tessera::worker {
namespace {

// A blend over several steps (docs/kv.md "CacheBlend"): a chunk that does not sample adds no
// logits row (the other sequences sample their own rows), the tail completes the cut document,
// and the sampled step reports the reused tokens of every step; a bad blend_tail is refused.
TEST_F(StepExecutorTest, ABlendOverSeveralStepsSamplesOnceAndReportsAllItsReusedTokens) {
  backend_.caps.chunk_blend = true;
  std::vector<int32_t> prompt(16);
  for (int32_t i = 0; i < 16; ++i) prompt[static_cast<size_t>(i)] = 20 + i;
  auto part = [&](int32_t from, int32_t to) { return std::vector<int32_t>(prompt.begin() + from, prompt.begin() + to); };
  StepPlan p1{.step_id = 1};
  p1.seqs = {seq(1, part(0, 6), 0, {0, 1, 2, 3}, /*sample=*/false), seq(2, {5}, 0, {4})};
  p1.seqs[0].blend_chunks = {{2, 6}};
  p1.seqs[0].blend_tail = part(6, 8);
  auto r1 = exec_.execute(p1);
  ASSERT_TRUE(r1.ok()) << r1.error().to_string();
  ASSERT_EQ(r1->results.size(), 1u);
  EXPECT_EQ(r1->results[0].request_id, 2u);
  EXPECT_EQ(r1->results[0].token, 6) << "request 2 samples its own row";
  EXPECT_NE(std::find(backend_.log.begin(), backend_.log.end(), "blend 0..6 want 0 of 8"), backend_.log.end());

  StepPlan p2{.step_id = 2};
  p2.seqs = {seq(1, part(6, 16), 6, {0, 1, 2, 3})};
  p2.seqs[0].blend_chunks = {{2, 6}, {8, 4}};
  p2.seqs[0].blend_head = part(0, 6);
  auto r2 = exec_.execute(p2);
  ASSERT_TRUE(r2.ok()) << r2.error().to_string();
  ASSERT_EQ(r2->results.size(), 1u);
  EXPECT_EQ(r2->results[0].token, 36) << "the row of position 15";
  EXPECT_EQ(r2->results[0].reused_tokens, 4 + 6) << "both steps' reused tokens";

  StepPlan bad{.step_id = 3};
  bad.seqs = {seq(3, part(0, 6), 0, {5, 6})};
  bad.seqs[0].blend_chunks = {{2, 6}};
  bad.seqs[0].blend_tail = part(6, 8);  // with sample: refused
  expect_refused(bad, ErrorCode::kInvalidArgument, "blend_tail has 2 tokens");
  bad.seqs[0].sample = false;
  bad.seqs[0].blend_tail = part(6, 7);  // one short of the document's end
  expect_refused(bad, ErrorCode::kInvalidArgument, "blend_tail has 1 tokens");
}

// A compact head (blend_head_from, capability blend_steps): the anchor and the part of the
// document the step continues arrive, the positions between them do not; the backend gets them
// at their positions (what the lookups read is the prompt's). A head that leaves out tokens of a
// document the step continues, or that does not match start_pos, is refused.
TEST_F(StepExecutorTest, ACompactBlendHeadPutsTheAnchorAndTheContinuedDocumentInPlace) {
  backend_.caps.chunk_blend = true;
  const std::vector<std::string> caps = exec_.capabilities();
  EXPECT_NE(std::find(caps.begin(), caps.end(), "blend_steps"), caps.end());
  std::vector<int32_t> prompt(20);
  for (int32_t i = 0; i < 20; ++i) prompt[static_cast<size_t>(i)] = 30 + i;
  auto part = [&](int32_t from, int32_t to) { return std::vector<int32_t>(prompt.begin() + from, prompt.begin() + to); };
  // anchor [0, 2), documents [2, 8) and [8, 14), question [14, 20); this step: [10, 20).
  StepPlan p{.step_id = 1};
  p.seqs = {seq(1, part(10, 20), 10, {0, 1, 2, 3, 4})};
  p.seqs[0].blend_chunks = {{2, 6}, {8, 6}};
  p.seqs[0].blend_head = part(0, 2);
  const std::vector<int32_t> continued = part(8, 10);
  p.seqs[0].blend_head.insert(p.seqs[0].blend_head.end(), continued.begin(), continued.end());
  p.seqs[0].blend_head_from = 8;
  auto r = exec_.execute(p);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  ASSERT_EQ(backend_.blend_tokens.size(), 20u);
  EXPECT_EQ(part(0, 2), std::vector<int32_t>(backend_.blend_tokens.begin(), backend_.blend_tokens.begin() + 2));
  EXPECT_EQ(part(8, 20), std::vector<int32_t>(backend_.blend_tokens.begin() + 8, backend_.blend_tokens.end()));
  EXPECT_EQ(r->results[0].token, (prompt[19] + 1) % kVocab);

  StepPlan bad = p;
  bad.step_id = 2;
  bad.seqs[0].request_id = 2;
  bad.seqs[0].blend_head_from = 9;  // leaves out position 8 of the document the step continues
  bad.seqs[0].blend_head = part(0, 2);
  bad.seqs[0].blend_head.push_back(prompt[9]);
  expect_refused(bad, ErrorCode::kInvalidArgument, "leaves out tokens of the chunk at 8");
  bad.seqs[0].blend_head_from = 2;  // not past the anchor
  expect_refused(bad, ErrorCode::kInvalidArgument, "blend_head_from 2 must be in (2, start_pos 10]");
  bad.seqs[0].blend_head_from = 8;
  bad.seqs[0].blend_head = part(0, 3);  // 3 tokens where [0, 2) + [8, 10) are 4
  expect_refused(bad, ErrorCode::kInvalidArgument, "blend_head has 3 tokens, start_pos and blend_head_from ask for 4");
  // Chunks are checked before anything trusts them: a negative begin with a compact head would
  // otherwise index the head before its start.
  bad.seqs[0].blend_chunks = {{-5, 6}, {8, 6}};
  bad.seqs[0].blend_head_from = 1;
  bad.seqs[0].blend_head = part(0, 4);
  expect_refused(bad, ErrorCode::kInvalidArgument, "blend_chunks[0] (begin -5, length 6) must have length > 0 and begin >= 0");
  bad.seqs[0].blend_chunks = {{2, 6}, {6, 6}};  // overlapping
  expect_refused(bad, ErrorCode::kInvalidArgument, "blend_chunks[1] (begin 6, length 6)");
  bad.seqs[0].blend_chunks = {{2, 0}};
  expect_refused(bad, ErrorCode::kInvalidArgument, "blend_chunks[0] (begin 2, length 0)");
  StepPlan good = p;  // and the executor goes on serving
  good.step_id = 3;
  good.seqs[0].request_id = 3;
  auto again = exec_.execute(good);
  EXPECT_TRUE(again.ok()) << again.error().to_string();
}

}  // namespace
}  // namespace tessera::worker
