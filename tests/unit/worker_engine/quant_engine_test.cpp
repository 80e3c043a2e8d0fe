// The engine on models whose weights are in each ggml block format (SynthModel draws the same
// f32 values whatever the dtype, so the f32 model is the unquantized original):
// - logits of the quantized model vs the f32 model, per type: max |diff| / max |logit| below
//   a bound that grows as the format gets coarser (measured values are printed; bounds about
//   1.5x the worst measured, over prefill and decode steps), and a cosine similarity bound;
// - the engine vs reference_forward (the dequantized oracle) on the same quantized model:
//   3e-2: the engine dots in integers with 8-bit activations (every block format; as the
//   Q8_0 bound of equivalence_test.cpp);
// - greedy generation (32 tokens) on every kernel path equals the scalar path's tokens (the
//   integer paths are bit-identical across ISAs by construction, cpu/quant_gemm.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>

#include "synth_model.h"
#include "tessera/worker/engine.h"

namespace tessera::worker {
namespace {

using testing::SynthModel;
using testing::SynthSpec;

SynthSpec spec_for(DType t) {
  SynthSpec s;
  s.dim = 256;  // a multiple of every block (K-quant super-blocks are 256)
  s.hidden_dim = 512;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.head_dim = 64;
  s.vocab_size = 97;
  s.dtype = t;
  return s;
}

bool integer_path(DType t) { return dtype_is_quantized(t); }  // every block format has one

// Bound on max|quantized - f32| / max|f32 logit| over the 13 checked positions of the 2-layer
// model above (uniform random weights, Q/K scaled up for peaky attention, so errors grow
// through the layers). Measured worst: Q8_0 0.021, Q6_K 0.050, Q5_0 0.110, Q5_1 0.097,
// Q5_K 0.104, Q4_0 0.215, Q4_1 0.201, Q4_K 0.210, IQ4_NL 0.268, IQ4_XS 0.257, Q3_K 0.419,
// Q2_K 0.771. Bounds are about 1.5x those; they catch a wrong block layout or scale, which
// gives errors of order 1.
double f32_bound(DType t) {
  switch (t) {
    case DType::kQ8_0: return 0.035;
    case DType::kQ6_K: return 0.08;
    case DType::kQ5_0: case DType::kQ5_1: case DType::kQ5_K: return 0.17;
    case DType::kQ4_0: case DType::kQ4_1: case DType::kQ4_K: return 0.33;
    case DType::kIQ4_NL: case DType::kIQ4_XS: return 0.4;
    case DType::kQ3_K: return 0.65;
    default: return 1.2;  // Q2_K: 2.6 bits per weight on a 2-layer random model
  }
}

// Cosine similarity of two logit rows.
double cosine(std::span<const float> a, std::span<const float> b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

double rel_diff(std::span<const float> a, std::span<const float> ref) {
  double mx = 0.0, d = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    mx = std::max(mx, std::fabs(static_cast<double>(ref[i])));
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - ref[i]));
  }
  return d / mx;
}

// Logits of every position of `tokens`, one engine forward per position after a prefill of 8.
std::vector<float> engine_logits(const Model& model, const std::vector<int32_t>& tokens, kernels::Isa isa) {
  auto engine = Engine::create(model, {.pool = {.num_pages = 16, .page_size = 16}, .threads = 2, .isa = isa});
  EXPECT_TRUE(engine.ok()) << engine.error().to_string();
  if (!engine.ok()) return {};
  const auto vocab = static_cast<size_t>(model.config().vocab_size);
  std::vector<float> out(tokens.size() * vocab);
  const std::vector<int32_t> table = {3, 7};
  int32_t done = 0;
  while (done < static_cast<int32_t>(tokens.size())) {
    const int32_t n = done == 0 ? 8 : 1;
    std::vector<int64_t> slots;
    for (int32_t p = done; p < done + n; ++p) slots.push_back(int64_t{table[static_cast<size_t>(p / 16)]} * 16 + p % 16);
    const SeqInput in{.tokens = std::span<const int32_t>(tokens).subspan(static_cast<size_t>(done), static_cast<size_t>(n)),
                      .start_pos = done, .block_table = table, .slot_mapping = slots, .want_logits = true};
    auto r = (*engine)->forward({&in, 1});
    EXPECT_TRUE(r.ok()) << r.error().to_string();
    if (!r.ok()) return {};
    std::copy(r->begin(), r->end(), out.begin() + static_cast<std::ptrdiff_t>((done + n - 1) * static_cast<int32_t>(vocab)));
    done += n;
  }
  return out;
}

class QuantEngine : public ::testing::TestWithParam<DType> {};

TEST_P(QuantEngine, LogitsCloseToF32AndToTheDequantizedReference) {
  const DType t = GetParam();
  const SynthModel quant(spec_for(t)), f32(spec_for(DType::kF32));
  std::vector<int32_t> tokens(20);
  std::mt19937_64 rng(5);
  for (auto& v : tokens) v = static_cast<int32_t>(rng() % 97);
  const auto ref_q = reference_forward(quant, tokens);
  ASSERT_TRUE(ref_q.ok()) << ref_q.error().to_string();
  const size_t vocab = 97;
  double worst_f32 = 0, worst_ref = 0, worst_cos = 1;
  for (kernels::Isa isa : {kernels::Isa::kScalar, kernels::detect_isa()}) {
    const auto q = engine_logits(quant, tokens, isa), f = engine_logits(f32, tokens, isa);
    ASSERT_EQ(q.size(), tokens.size() * vocab);
    for (size_t p = 7; p < tokens.size(); ++p) {  // the prefill's last row, then every decode step
      const std::span<const float> qs(q.data() + p * vocab, vocab), fs(f.data() + p * vocab, vocab),
          rs(ref_q->data() + p * vocab, vocab);
      worst_f32 = std::max(worst_f32, rel_diff(qs, fs));
      worst_ref = std::max(worst_ref, rel_diff(qs, rs));
      worst_cos = std::min(worst_cos, cosine(qs, fs));
      EXPECT_LT(rel_diff(qs, fs), f32_bound(t)) << dtype_name(t) << " vs f32, isa " << kernels::isa_name(isa) << " pos " << p;
      EXPECT_GT(cosine(qs, fs), t == DType::kQ2_K ? 0.7 : 0.9) << dtype_name(t) << " vs f32, pos " << p;
      EXPECT_LT(rel_diff(qs, rs), integer_path(t) ? 3e-2 : 1e-4)
          << dtype_name(t) << " vs reference_forward, isa " << kernels::isa_name(isa) << " pos " << p;
    }
  }
  std::printf("%s weights: max|diff|/max|logit| vs f32 %.3g (cosine >= %.4f), vs dequantized reference %.3g\n",
              dtype_name(t), worst_f32, worst_cos, worst_ref);
}

TEST_P(QuantEngine, GreedyTokensEqualTheScalarPath) {
  const DType t = GetParam();
  const SynthModel model(spec_for(t));
  std::map<std::string, std::vector<int32_t>> by_isa;
  for (kernels::Isa isa : {kernels::Isa::kScalar, kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
    if (!kernels::isa_supported(isa)) continue;
    auto engine = Engine::create(model, {.pool = {.num_pages = 16, .page_size = 16}, .threads = 2, .isa = isa});
    ASSERT_TRUE(engine.ok()) << engine.error().to_string();
    const std::vector<int32_t> prompt = {1, 5, 9, 33, 2, 71, 40};
    GenerateRequest req;
    req.prompt = prompt;
    req.max_tokens = 32;
    req.sampling.temperature = 0.0f;
    auto out = generate(**engine, req);
    ASSERT_TRUE(out.ok()) << out.error().to_string();
    EXPECT_EQ(out->tokens.size(), 32u);
    by_isa[kernels::isa_name(isa)] = out->tokens;
  }
  for (const auto& [name, tokens] : by_isa) EXPECT_EQ(tokens, by_isa["scalar"]) << dtype_name(t) << " " << name;
}

INSTANTIATE_TEST_SUITE_P(AllFormats, QuantEngine,
                         ::testing::Values(DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K,
                                           DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL,
                                           DType::kIQ4_XS),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

}  // namespace
}  // namespace tessera::worker
