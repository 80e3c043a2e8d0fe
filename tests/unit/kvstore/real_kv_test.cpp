// Codec error on real K/V: stories260K (shared/models) prefills a preference through the
// worker's paged Engine; its K/V are read from the page pool, packed, encoded with every codec,
// decoded and written back; the next tokens' logits are compared with the exact run.
// Documented tolerances (docs/kvstore.md): lossless codecs reproduce the logits bit for bit;
// int8 (group 64) and int4 (group 32) stay within the bounds below; int8 keeps the argmax.
// "attn" is the attention output for random queries (kv_error.h); "logits" is the end-to-end
// effect through the model. The kivi test stores from f16 and also probes with the model's own
// queries (worker::reference_forward), which on stories260K's peaky attention are the harsher probe.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "real_kv_fixture.h"

namespace tessera::kvstore {
namespace {

using testing::argmax;
using testing::to_f16;
using RealKv = testing::RealKvFixture;


TEST_F(RealKv, CodecErrorOnRealKvAndOnTheLogitsItProduces) {
  const auto ref = query_logits();
  struct Case {
    Codec codec;
    uint32_t group;
    double max_kv_rel, max_attn_rel, max_logit_rel;
  };
  for (const Case& c : {Case{Codec::kNone, 0, 0, 0, 0}, Case{Codec::kZstd, 0, 0, 0, 0},
                        Case{Codec::kInt8, 64, 0.01, 0.04, 0.01}, Case{Codec::kInt4, 32, 0.15, 0.50, 0.10}}) {
    const EncodeOptions opts{.codec = c.codec, .group_size = c.group == 0 ? 64 : c.group};
    auto report = measure_codec(exact_, opts);
    ASSERT_TRUE(report.ok()) << report.error().to_string();
    auto blob = encode_blob(exact_, opts);
    ASSERT_TRUE(blob.ok());
    auto back = decode_blob(*blob, {.expected_fingerprint = model_->fingerprint});
    ASSERT_TRUE(back.ok()) << back.error().to_string();
    const double attn = testing::attention_output_rel_error(exact_, *back, 3);
    write_kv(*back);
    const auto got = query_logits();
    double err2 = 0, ref2 = 0;
    int same_argmax = 0;
    for (size_t q = 0; q < ref.size(); ++q) {
      for (size_t i = 0; i < ref[q].size(); ++i) {
        err2 += (got[q][i] - ref[q][i]) * static_cast<double>(got[q][i] - ref[q][i]);
        ref2 += ref[q][i] * static_cast<double>(ref[q][i]);
      }
      // int8 keeps the greedy token; int4 may flip a close call (it did on 1 of 3 queries).
      if (c.codec != Codec::kInt4) {
        EXPECT_EQ(argmax(got[q]), argmax(ref[q])) << codec_name(c.codec) << " query " << q;
      }
      same_argmax += argmax(got[q]) == argmax(ref[q]) ? 1 : 0;
    }
    const double logit_rel = std::sqrt(err2 / ref2);
    std::printf("stories260K P=%zu %s g%u: ratio %.2f kv rel %.5f max_abs %.5f attn rel %.5f logits rel %.5f argmax kept %d/%zu\n",
                pref_.size(), codec_name(c.codec), c.group, report->ratio, report->relative_error,
                report->max_abs_error, attn, logit_rel, same_argmax, ref.size());
    EXPECT_LE(report->relative_error, c.max_kv_rel) << codec_name(c.codec);
    EXPECT_LE(attn, c.max_attn_rel) << codec_name(c.codec);
    EXPECT_LE(logit_rel, c.max_logit_rel) << codec_name(c.codec);
    if (c.codec == Codec::kNone || c.codec == Codec::kZstd) {
      for (size_t q = 0; q < ref.size(); ++q) EXPECT_EQ(got[q], ref[q]) << "lossless codec changed the logits";
    } else {
      EXPECT_GT(logit_rel, 0.0);
    }
    write_kv(exact_);
  }
  // Restoring the exact K/V restores the exact logits (the comparison itself is sound).
  EXPECT_EQ(query_logits(), ref);
}


// The kivi codec (per-channel blocks, entropy-coded) on f16 K/V against int8/int4: ratio against
// the f16 bytes, attention-output error against the f16 K/V (random queries, and the model's own
// queries of three continuations), logits. Asserted: the measured figures (docs/kv.md, with
// margin), and that kivi beats int4/32 on both axes and int8/64 on ratio at a lower logits error
// than int4. The target (>= 3.5x at attention error <= 1e-2) is NOT reached on this
// model: with its peaky attention, the model-query error of int8 itself is 0.086.
TEST_F(RealKv, KiviCodecRatioAndAttentionErrorOnF16) {
  const PackedKv f16 = to_f16(exact_);
  const auto ref = query_logits();
  const double f16_bytes = 2.0 * static_cast<double>(f16.region_bytes());
  // The model's own queries: those of the three continuations' tokens after the preference
  // (reference_forward), gathered as [layer][query][n_heads * head_dim].
  const auto& cfg = model_->config();
  const size_t qd = static_cast<size_t>(cfg.n_heads) * cfg.head_dim;
  std::vector<std::vector<float>> per_layer(static_cast<size_t>(cfg.n_layers));
  uint32_t n_queries = 0;
  for (const char* text : {"One day, Lily went to", "Tim the bird", "It started to rain and"}) {
    std::vector<int32_t> seq = pref_;
    const auto cont = tok_->encode(text, false);
    seq.insert(seq.end(), cont.begin(), cont.end());
    std::vector<float> all;  // [layer][position][qd]
    ASSERT_TRUE(worker::reference_forward(*model_, seq, &all).ok());
    for (size_t l = 0; l < per_layer.size(); ++l) {
      const float* first = all.data() + (l * seq.size() + pref_.size()) * qd;
      per_layer[l].insert(per_layer[l].end(), first, first + cont.size() * qd);
    }
    n_queries += static_cast<uint32_t>(cont.size());
  }
  std::vector<float> queries;
  for (const auto& q : per_layer) queries.insert(queries.end(), q.begin(), q.end());
  struct Case {
    Codec codec;
    uint32_t group;
    float step;
    double min_ratio, max_attn_random, max_attn_model, max_logits;  // measured, with ~5-10% margin
    int min_argmax;
  };
  const EncodeOptions defaults;
  ASSERT_EQ(defaults.kivi_step, 0.25f);
  for (const Case& c : {Case{Codec::kInt8, 64, 0, 1.80, 0.023, 0.09, 0.004, 3}, Case{Codec::kInt4, 32, 0, 2.80, 0.35, 0.80, 0.06, 2},
                        Case{Codec::kKivi, 64, 0.125f, 2.40, 0.04, 0.12, 0.006, 3},
                        Case{Codec::kKivi, 64, 0.25f, 2.80, 0.08, 0.26, 0.011, 3},
                        Case{Codec::kKivi, 64, 0.5f, 3.35, 0.17, 0.37, 0.023, 2},
                        Case{Codec::kKivi, 128, 0.25f, 3.00, 0.085, 0.22, 0.008, 2}}) {
    const EncodeOptions opts{.codec = c.codec, .group_size = c.group, .kivi_step = c.step > 0 ? c.step : 0.25f};
    auto blob = encode_blob(f16, opts);
    ASSERT_TRUE(blob.ok()) << blob.error().to_string();
    auto back = decode_blob(*blob, {.expected_fingerprint = model_->fingerprint});
    ASSERT_TRUE(back.ok()) << back.error().to_string();
    ASSERT_EQ(back->dtype, DType::kF16);
    const double ratio = f16_bytes / static_cast<double>(blob->size());
    const double attn_random = testing::attention_output_rel_error(f16, *back, 3);
    const double attn = testing::attention_output_rel_error_real(f16, *back, queries, n_queries,
                                                                 static_cast<uint32_t>(cfg.n_heads));
    auto f32_back = decode_blob(*blob, {.to_f32 = true});
    ASSERT_TRUE(f32_back.ok());
    write_kv(*f32_back);
    const auto got = query_logits();
    double err2 = 0, ref2 = 0;
    int same = 0;
    for (size_t q = 0; q < ref.size(); ++q) {
      for (size_t i = 0; i < ref[q].size(); ++i) {
        err2 += (got[q][i] - ref[q][i]) * static_cast<double>(got[q][i] - ref[q][i]);
        ref2 += ref[q][i] * static_cast<double>(ref[q][i]);
      }
      same += argmax(got[q]) == argmax(ref[q]) ? 1 : 0;
    }
    std::printf("stories260K P=%zu from f16: %s g%u step %.3f: %zu bytes (f16 %.0f), ratio vs f16 %.2f, attn rel (model queries) %.5f, (random queries) %.5f, "
                "logits rel %.5f, argmax kept %d/%zu\n",
                pref_.size(), codec_name(c.codec), c.group, c.codec == Codec::kKivi ? opts.kivi_step : 0.0f, blob->size(),
                f16_bytes, ratio, attn, attn_random, std::sqrt(err2 / ref2), same, ref.size());
    EXPECT_GE(ratio, c.min_ratio) << codec_name(c.codec) << " step " << c.step;
    EXPECT_LE(attn_random, c.max_attn_random) << codec_name(c.codec) << " step " << c.step;
    EXPECT_LE(attn, c.max_attn_model) << codec_name(c.codec) << " step " << c.step;
    EXPECT_LE(std::sqrt(err2 / ref2), c.max_logits) << codec_name(c.codec) << " step " << c.step;
    EXPECT_GE(same, c.min_argmax) << codec_name(c.codec) << " step " << c.step;
    EXPECT_GT(attn, 0.0);
    write_kv(exact_);
  }
}


// Every codec on the same f16 K/V, the table of docs/BENCHMARKS.md "Codec ratio and error on real
// K/V": ratio = f16 bytes / whole blob (header and parameters included); attention error with
// the model's own queries (the measure of issue 15's target) and with random ones; logits.
// Asserted for tiered: the measured figures with ~5-10 % margin, the error bound at
// step 0.05 (1.90x, below int8's ratio-error point on both axes), and tiered beating kivi's error at a
// similar ratio. The target of >= 3.5x at <= 1e-2 is NOT reached (docs/kv.md says why).
TEST_F(RealKv, EveryCodecOnRealKvWithModelQueries) {
  const PackedKv f16 = to_f16(exact_);
  const auto ref = query_logits();
  const double f16_bytes = 2.0 * static_cast<double>(f16.region_bytes());
  const auto& cfg = model_->config();
  const size_t qd = static_cast<size_t>(cfg.n_heads) * cfg.head_dim;
  std::vector<std::vector<float>> per_layer(static_cast<size_t>(cfg.n_layers));
  uint32_t n_queries = 0;
  for (const char* text : {"One day, Lily went to", "Tim the bird", "It started to rain and"}) {
    std::vector<int32_t> seq = pref_;
    const auto cont = tok_->encode(text, false);
    seq.insert(seq.end(), cont.begin(), cont.end());
    std::vector<float> all;
    ASSERT_TRUE(worker::reference_forward(*model_, seq, &all).ok());
    for (size_t l = 0; l < per_layer.size(); ++l) {
      const float* first = all.data() + (l * seq.size() + pref_.size()) * qd;
      per_layer[l].insert(per_layer[l].end(), first, first + cont.size() * qd);
    }
    n_queries += static_cast<uint32_t>(cont.size());
  }
  std::vector<float> queries;
  for (const auto& q : per_layer) queries.insert(queries.end(), q.begin(), q.end());
  // The continuations as the model runs them: their own queries and K/V (from the pool, written
  // after the exact preference), for the full-context measure.
  std::vector<testing::Continuation> conts;
  const size_t row = static_cast<size_t>(engine_->pool().token_floats());
  for (const char* text : {"One day, Lily went to", "Tim the bird", "It started to rain and"}) {
    std::vector<int32_t> seq = pref_;
    const auto cont = tok_->encode(text, false);
    seq.insert(seq.end(), cont.begin(), cont.end());
    std::vector<float> all;
    ASSERT_TRUE(worker::reference_forward(*model_, seq, &all).ok());
    ASSERT_TRUE(run(cont, static_cast<int32_t>(pref_.size()), false).ok());
    testing::Continuation c{.n = static_cast<uint32_t>(cont.size())};
    for (int32_t l = 0; l < cfg.n_layers; ++l) {
      const float* first = all.data() + (static_cast<size_t>(l) * seq.size() + pref_.size()) * qd;
      c.q.insert(c.q.end(), first, first + cont.size() * qd);
      for (size_t i = 0; i < cont.size(); ++i) {
        const auto slot = static_cast<int32_t>(pref_.size() + i);
        const float* k = engine_->pool().key(l, slot);
        const float* v = engine_->pool().value(l, slot);
        c.k.insert(c.k.end(), k, k + row);
        c.v.insert(c.v.end(), v, v + row);
      }
    }
    conts.push_back(std::move(c));
  }
  struct Case {
    EncodeOptions opts;
    double min_ratio = 0, max_attn = 1;  // asserted for tiered only
  };
  const Case cases[] = {
      {{.codec = Codec::kNone}},
      {{.codec = Codec::kZstd}},
      {{.codec = Codec::kInt8, .group_size = 64}},
      {{.codec = Codec::kInt4, .group_size = 32}},
      {{.codec = Codec::kKivi, .group_size = 64, .kivi_step = 0.125f}},
      {{.codec = Codec::kKivi, .group_size = 64, .kivi_step = 0.25f}},
      {{.codec = Codec::kKivi, .group_size = 64, .kivi_step = 0.5f}},
      {{.codec = Codec::kTiered, .tiered_step = 0.05f, .tiered_recent = 0}, 1.9, 0.024},
      {{.codec = Codec::kTiered, .tiered_step = 0.05f, .tiered_recent = 8}, 1.85, 0.0099},
      {{.codec = Codec::kTiered, .tiered_step = 0.1f, .tiered_recent = 8}, 2.1, 0.023},
      {{.codec = Codec::kTiered, .tiered_step = 0.2f, .tiered_recent = 8}, 2.4, 0.045},
      {{.codec = Codec::kTiered, .tiered_step = 0.4f, .tiered_recent = 8}, 2.85, 0.085},
      {{.codec = Codec::kTiered, .tiered_step = 0.8f, .tiered_recent = 8}, 3.4, 0.17},
      {{.codec = Codec::kTiered, .tiered_step = 0.012f, .tiered_recent = 0, .tiered_decay = 1.5f}, 1.9, 0.0099},
      {{.codec = Codec::kTiered, .tiered_step = 0.03f, .tiered_recent = 0, .tiered_decay = 1.5f}, 2.2, 0.03},
      {{.codec = Codec::kTiered, .tiered_step = 0.1f, .tiered_recent = 0, .tiered_decay = 1.5f}, 2.7, 0.1},
  };
  std::printf("| codec | params | blob bytes | ratio vs f16 | attn out rel err (model q) | (random q) | (model q, full context) | logits rel err | argmax kept |\n");
  for (const Case& c : cases) {
    auto blob = encode_blob(f16, c.opts);
    ASSERT_TRUE(blob.ok()) << blob.error().to_string();
    auto back = decode_blob(*blob);
    ASSERT_TRUE(back.ok()) << back.error().to_string();
    const double ratio = f16_bytes / static_cast<double>(blob->size());
    const double attn = testing::attention_output_rel_error_real(f16, *back, queries, n_queries,
                                                                 static_cast<uint32_t>(cfg.n_heads));
    const double attn_random = testing::attention_output_rel_error(f16, *back, 3);
    const double attn_full = testing::attention_output_rel_error_full(f16, *back, conts, static_cast<uint32_t>(cfg.n_heads));
    write_kv(decode_blob(*blob, {.to_f32 = true}).value());
    const auto got = query_logits();
    write_kv(exact_);
    double err2 = 0, ref2 = 0;
    int same = 0;
    for (size_t q = 0; q < ref.size(); ++q) {
      for (size_t i = 0; i < ref[q].size(); ++i) {
        err2 += (got[q][i] - ref[q][i]) * static_cast<double>(got[q][i] - ref[q][i]);
        ref2 += ref[q][i] * static_cast<double>(ref[q][i]);
      }
      same += argmax(got[q]) == argmax(ref[q]) ? 1 : 0;
    }
    char params[64] = "-";
    if (c.opts.codec == Codec::kInt8 || c.opts.codec == Codec::kInt4) std::snprintf(params, sizeof params, "group %u", c.opts.group_size);
    if (c.opts.codec == Codec::kKivi) std::snprintf(params, sizeof params, "group %u step %.3g", c.opts.group_size, c.opts.kivi_step);
    if (c.opts.codec == Codec::kTiered) std::snprintf(params, sizeof params, c.opts.tiered_decay > 0 ? "step %.3g recent %u decay %.3g" : "step %.3g recent %u",
                                                             c.opts.tiered_step, c.opts.tiered_recent, c.opts.tiered_decay);
    std::printf("| %s | %s | %zu | %.2f | %.4f | %.4f | %.4f | %.4f | %d/%zu |\n", codec_name(c.opts.codec), params, blob->size(), ratio,
                attn, attn_random, attn_full, std::sqrt(err2 / ref2), same, ref.size());
    if (c.opts.codec == Codec::kTiered) {
      EXPECT_GE(ratio, c.min_ratio) << params;
      EXPECT_LE(attn, c.max_attn) << params;
      EXPECT_GE(same, 2) << params;
    }
  }
}

}  // namespace
}  // namespace tessera::kvstore

