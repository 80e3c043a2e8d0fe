// Tensor-parallel sharding (worker/src/backends/cuda/tensor_parallel.h) checked on the CPU:
// each rank runs on its own thread with its shard and the in-process all-reduce; the logits
// must match the unsharded CPU forward. Cuts: whole KV heads per rank, and KV heads replicated
// over several ranks that split their query heads (world > n_kv_heads, MQA).
//
// Tolerances (max |a - b| over all logits, relative to max |reference logit|):
// - TP (world W) vs the same per-rank code at world 1: 1e-5. Only the order of the partial
//   sums of wo and w_down changes (rank slices are summed in rank order); Q8_0 activation
//   blocks do not straddle rank slices (slices are 32-aligned), so quantization is identical.
// - TP vs reference_forward (the engine's oracle): 1e-4 for f32/bf16, 3e-2 for q8_0 (the
//   kernels quantize activations for Q8_0; the reference does not) — the engine's tolerances.
// - All ranks must return bit-identical logits (the all-reduce sums in rank order everywhere).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <thread>

#include "synth_model.h"
#include "tensor_parallel.h"
#include "tessera/model/model_synth.h"
#include "tessera/testing/paths.h"
#include "tessera/worker/engine.h"

namespace tessera::worker::tp {
namespace {

using testing::SynthModel;
using testing::SynthSpec;

double rel_max_diff(const std::vector<float>& a, const std::vector<float>& ref) {
  EXPECT_EQ(a.size(), ref.size());
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < std::min(a.size(), ref.size()); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - ref[i]));
    scale = std::max(scale, std::abs(static_cast<double>(ref[i])));
  }
  return scale == 0.0 ? diff : diff / scale;
}

std::vector<int32_t> random_tokens(int32_t n, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return t;
}

// Runs every rank on its own thread; returns each rank's logits.
std::vector<std::vector<float>> run_tp(const Model& model, int32_t world, const std::vector<int32_t>& tokens) {
  auto plan = plan_shards(model, world);
  EXPECT_TRUE(plan.ok()) << (plan.ok() ? "" : plan.error().to_string());
  if (!plan.ok()) return {};
  std::vector<std::unique_ptr<ShardModel>> shards;
  for (const RankShard& s : *plan) {
    auto m = shard_model(model, s);
    EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().to_string());
    if (!m.ok()) return {};
    // A shard is a valid Model for a per-rank engine (what each GPU rank builds).
    EngineOptions eo;
    eo.pool = {.num_pages = 2, .page_size = 16};
    eo.threads = 1;
    auto engine = Engine::create(**m, eo);
    EXPECT_TRUE(engine.ok()) << (engine.ok() ? "" : engine.error().to_string());
    shards.push_back(std::move(*m));
  }
  InProcessGroup group(world);
  std::vector<std::vector<float>> out(static_cast<size_t>(world));
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto logits = cpu_rank_forward(*shards[static_cast<size_t>(r)], tokens, group.rank(r));
      if (logits.ok()) {
        out[static_cast<size_t>(r)] = std::move(*logits);
      } else {
        errors[static_cast<size_t>(r)] = logits.error().to_string();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int32_t r = 0; r < world; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
  return out;
}

struct Case {
  SynthSpec spec;
  int32_t world;
  double ref_tol;
};

class TpForward : public ::testing::TestWithParam<Case> {};

TEST_P(TpForward, MatchesUnshardedForward) {
  const Case& c = GetParam();
  SynthModel model(c.spec);
  const auto tokens = random_tokens(13, c.spec.vocab_size, 7);
  auto ref = reference_forward(model, tokens);
  ASSERT_TRUE(ref.ok()) << ref.error().to_string();
  const auto single = run_tp(model, 1, tokens);
  const auto multi = run_tp(model, c.world, tokens);
  ASSERT_EQ(single.size(), 1u);
  ASSERT_EQ(multi.size(), static_cast<size_t>(c.world));
  for (int32_t r = 1; r < c.world; ++r) {
    ASSERT_EQ(multi[static_cast<size_t>(r)], multi[0]) << "rank " << r << " disagrees with rank 0";
  }
  EXPECT_LT(rel_max_diff(multi[0], single[0]), 1e-5) << c.spec.name() << " world " << c.world;
  EXPECT_LT(rel_max_diff(multi[0], *ref), c.ref_tol) << c.spec.name() << " world " << c.world;
}

SynthSpec spec(DType dtype, int32_t heads, int32_t kv_heads, int32_t head_dim, int32_t hidden, RopeLayout rope,
               bool bias) {
  SynthSpec s;
  s.dtype = dtype;
  s.n_heads = heads;
  s.n_kv_heads = kv_heads;
  s.head_dim = head_dim;
  s.dim = 64;
  s.hidden_dim = hidden;
  s.rope_layout = rope;
  s.attn_bias = bias;
  s.vocab_size = 101;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TpForward,
    ::testing::Values(Case{spec(DType::kF32, 8, 4, 16, 160, RopeLayout::kInterleaved, false), 2, 1e-4},
                      Case{spec(DType::kF32, 8, 4, 16, 160, RopeLayout::kHalves, true), 4, 1e-4},
                      Case{spec(DType::kF32, 8, 2, 16, 96, RopeLayout::kInterleaved, false), 2, 1e-4},   // GQA 4
                      Case{spec(DType::kF32, 6, 3, 16, 99, RopeLayout::kHalves, false), 3, 1e-4},        // uneven hidden
                      Case{spec(DType::kBF16, 8, 8, 8, 128, RopeLayout::kInterleaved, true), 4, 1e-4},   // GQA 1
                      Case{spec(DType::kF16, 16, 2, 4, 64, RopeLayout::kHalves, false), 2, 1e-4},        // GQA 8
                      Case{spec(DType::kF32, 8, 2, 16, 160, RopeLayout::kHalves, true), 4, 1e-4},        // KV heads replicated x2
                      Case{spec(DType::kBF16, 4, 1, 16, 128, RopeLayout::kInterleaved, false), 2, 1e-4},  // MQA, replicated x2
                      Case{spec(DType::kF32, 8, 1, 8, 96, RopeLayout::kHalves, false), 4, 1e-4},         // MQA, replicated x4
                      Case{spec(DType::kQ8_0, 8, 4, 16, 128, RopeLayout::kInterleaved, false), 2, 3e-2},
                      Case{spec(DType::kQ8_0, 8, 4, 32, 128, RopeLayout::kHalves, true), 4, 3e-2}));

TEST(TpPlan, CoversEveryHeadAndHiddenUnitOnce) {
  SynthModel model(spec(DType::kQ8_0, 8, 4, 16, 160, RopeLayout::kInterleaved, false));
  for (int32_t world : {1, 2, 4}) {
    auto plan = plan_shards(model, world);
    ASSERT_TRUE(plan.ok()) << plan.error().to_string();
    ASSERT_EQ(plan->size(), static_cast<size_t>(world));
    int32_t heads = 0, kv = 0;
    int64_t hidden = 0;
    for (const RankShard& s : *plan) {
      EXPECT_EQ(s.head_begin, heads);
      EXPECT_EQ(s.kv_head_begin, kv);
      EXPECT_EQ(s.hidden_begin, hidden);
      EXPECT_EQ(s.hidden_begin % 32, 0);
      EXPECT_EQ(s.n_heads, 2 * s.n_kv_heads);
      heads += s.n_heads;
      kv += s.n_kv_heads;
      hidden += s.hidden_size;
    }
    EXPECT_EQ(heads, 8);
    EXPECT_EQ(kv, 4);
    EXPECT_EQ(hidden, 160);
  }
  // 160 = 5 blocks of 32 over 4 ranks: blocks [0,1) [1,2) [2,3) [3,5).
  auto plan4 = plan_shards(model, 4);
  ASSERT_TRUE(plan4.ok());
  EXPECT_EQ((*plan4)[0].hidden_size, 32);
  EXPECT_EQ((*plan4)[2].hidden_size, 32);
  EXPECT_EQ((*plan4)[3].hidden_begin, 96);
  EXPECT_EQ((*plan4)[3].hidden_size, 64);
}

TEST(TpPlan, ReplicatesKvHeadsWhenRanksOutnumberThem) {
  SynthModel model(spec(DType::kF32, 8, 2, 16, 96, RopeLayout::kInterleaved, false));
  auto plan = plan_shards(model, 4);
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  const int32_t kv[] = {0, 0, 1, 1}, q[] = {0, 2, 4, 6};
  for (int32_t r = 0; r < 4; ++r) {
    const RankShard& s = (*plan)[static_cast<size_t>(r)];
    EXPECT_EQ(s.kv_head_begin, kv[r]) << "rank " << r;
    EXPECT_EQ(s.n_kv_heads, 1);
    EXPECT_EQ(s.head_begin, q[r]) << "rank " << r;
    EXPECT_EQ(s.n_heads, 2);
  }
}

TEST(TpPlan, RejectsCutsItCannotMake) {
  SynthModel model(spec(DType::kQ8_0, 8, 4, 16, 96, RopeLayout::kInterleaved, false));
  auto bad_world = plan_shards(model, 0);
  ASSERT_FALSE(bad_world.ok());
  EXPECT_EQ(bad_world.error().code, ErrorCode::kInvalidArgument);
  auto uneven_kv = plan_shards(model, 3);  // 4 KV heads over 3 ranks: neither cut works
  ASSERT_FALSE(uneven_kv.ok());
  EXPECT_EQ(uneven_kv.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(uneven_kv.error().message.find("n_kv_heads"), std::string::npos) << uneven_kv.error().message;
  // 2 KV heads of 3 query heads each over 4 ranks: replication x2 cannot split 3 query heads.
  SynthModel odd_group(spec(DType::kF32, 6, 2, 16, 96, RopeLayout::kInterleaved, false));
  auto odd = plan_shards(odd_group, 4);
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.error().code, ErrorCode::kUnsupported);
  // 96 hidden units = 3 blocks of 32 over 4 ranks: one rank would be empty.
  auto empty_slice = plan_shards(model, 4);
  ASSERT_FALSE(empty_slice.ok());
  EXPECT_NE(empty_slice.error().message.find("hidden_dim"), std::string::npos) << empty_slice.error().message;
  // A shard that does not fit the model is refused, not sliced out of bounds.
  RankShard wrong{.rank = 0, .world = 2, .head_begin = 6, .n_heads = 4, .kv_head_begin = 0, .n_kv_heads = 2,
                  .hidden_begin = 0, .hidden_size = 32};
  auto m = shard_model(model, wrong);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, ErrorCode::kInvalidArgument);
}

// A communicator that does not reduce: the check above must notice a missing all-reduce.
class NoReduce final : public Communicator {
 public:
  int32_t rank() const override { return 0; }
  int32_t world() const override { return 2; }
  Status all_reduce_sum(std::span<float>) override { return ok_status(); }
};

TEST(TpForwardCheck, DetectsAMissingAllReduce) {
  SynthModel model(spec(DType::kF32, 8, 4, 16, 160, RopeLayout::kInterleaved, false));
  const auto tokens = random_tokens(9, 101, 3);
  auto ref = reference_forward(model, tokens);
  ASSERT_TRUE(ref.ok());
  auto plan = plan_shards(model, 2);
  ASSERT_TRUE(plan.ok());
  auto shard = shard_model(model, (*plan)[0]);
  ASSERT_TRUE(shard.ok());
  NoReduce comm;
  auto logits = cpu_rank_forward(**shard, tokens, comm);
  ASSERT_TRUE(logits.ok());
  EXPECT_GT(rel_max_diff(*logits, *ref), 1e-2);
}

TEST(InProcessGroup, SumsExactlyInRankOrder) {
  for (int32_t world : {2, 3, 4}) {
    InProcessGroup group(world);
    std::vector<std::vector<float>> data(static_cast<size_t>(world));
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < world; ++r) {
      data[static_cast<size_t>(r)].resize(1001);
      for (size_t i = 0; i < 1001; ++i) data[static_cast<size_t>(r)][i] = static_cast<float>(i * 10 + static_cast<size_t>(r));
      threads.emplace_back([&, r] {
        for (int rep = 0; rep < 3; ++rep) {  // repeated calls reuse the group's state
          std::vector<float> d = data[static_cast<size_t>(r)];
          ASSERT_TRUE(group.rank(r).all_reduce_sum(d).ok());
          for (size_t i = 0; i < d.size(); ++i) {
            const float want = static_cast<float>(static_cast<size_t>(world) * i * 10 + static_cast<size_t>(world * (world - 1) / 2));
            ASSERT_EQ(d[i], want) << "rank " << r << " element " << i;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
  }
}

TEST(InProcessGroup, MissingPeerTimesOutInsteadOfHanging) {
  InProcessGroup group(2, std::chrono::milliseconds(50));
  std::vector<float> d(4, 1.0f);
  Status st = group.rank(0).all_reduce_sum(d);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ErrorCode::kDeadlineExceeded);
  // The group is broken from now on: later calls fail fast, they do not wait again.
  Status again = group.rank(1).all_reduce_sum(d);
  EXPECT_EQ(again.error().code, ErrorCode::kDeadlineExceeded);
}

TEST(InProcessGroup, MismatchedSizesAreAnError) {
  InProcessGroup group(2);
  std::vector<float> a(4, 1.0f), b(5, 1.0f);
  Status sa, sb;
  std::thread t([&] { sb = group.rank(1).all_reduce_sum(b); });
  sa = group.rank(0).all_reduce_sum(a);
  t.join();
  ASSERT_FALSE(sa.ok());
  ASSERT_FALSE(sb.ok());
  EXPECT_EQ(sa.error().code, ErrorCode::kInvalidArgument);
}

// A mixture-of-experts model is refused by name (the check the CUDA backend makes too).
TEST(TpPlan, RefusesAMixtureOfExperts) {
  const std::string dir = tessera::testing::make_temp_dir("tp-moe");
  SynthOptions o{.like = "mixtral-8x7b-reduced", .out_path = dir + "/mixtral.gguf"};
  ASSERT_TRUE(synth_model(o).ok());
  auto model = load_model(o.out_path);
  ASSERT_TRUE(model.ok()) << model.error().to_string();
  auto plan = plan_shards(**model, 2);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(plan.error().message.find("tensor parallel: not implemented yet: a mixture-of-experts MLP (8 experts)"),
            std::string::npos)
      << plan.error().message;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::worker::tp
