// The real K/V of kvstore_real_kv_test: stories260K (shared/models) prefills a preference
// through the worker's paged Engine (f32 pool, 16-token pages); read_kv/write_kv move its K/V
// between the pool and a PackedKv; continuations run after it. Shared by real_kv_test.cpp and
// real_kv_curve_test.cpp. Not thread-safe (one test at a time, as gtest runs them).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "kv_error.h"
#include "tessera/kvstore/blob.h"
#include "tessera/testing/paths.h"
#include "tessera/tokenizer/tokenizer.h"
#include "tessera/worker/engine.h"

namespace tessera::kvstore::testing {

using tessera::testing::shared_path;

inline constexpr int32_t kPage = 16;

class RealKvFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = load_model(shared_path("models/stories260K/stories260K.bin"));
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    model_ = std::move(m).value();
    auto t = load_tokenizer(shared_path("models/stories260K/tok512.bin"));
    ASSERT_TRUE(t.ok()) << t.error().to_string();
    tok_ = std::move(t).value();
    auto e = worker::Engine::create(*model_, {.pool = {.num_pages = 24, .page_size = kPage}, .threads = 1});
    ASSERT_TRUE(e.ok()) << e.error().to_string();
    engine_ = std::move(e).value();
    for (int32_t p = 0; p < 24; ++p) blocks_.push_back(p);
    // A preference-like prefix, prefilled alone at positions [0, P).
    pref_ = tok_->encode(
        "Lily liked to play in the park with her dog. She always wore a red hat and she loved "
        "to eat apples. Her best friend was a little bird named Tim who sang every morning. "
        "Lily did not like the rain, because it made the grass wet and cold.",
        true);
    ASSERT_GT(pref_.size(), 40u);
    ASSERT_TRUE(run(pref_, 0, false).ok());
    exact_ = read_kv();
  }

  Result<std::vector<float>> run(const std::vector<int32_t>& tokens, int32_t start, bool logits) {
    std::vector<int64_t> slots;
    for (size_t i = 0; i < tokens.size(); ++i) slots.push_back(start + static_cast<int64_t>(i));
    const int32_t pages = (start + static_cast<int32_t>(tokens.size()) + kPage - 1) / kPage;
    worker::SeqInput in{.tokens = tokens, .start_pos = start,
                        .block_table = std::span<const int32_t>(blocks_.data(), static_cast<size_t>(pages)),
                        .slot_mapping = slots, .want_logits = logits};
    TS_ASSIGN_OR_RETURN(std::span<const float> out, engine_->forward(std::span<const worker::SeqInput>(&in, 1)));
    return std::vector<float>(out.begin(), out.end());
  }

  // Slots [0, P) of every layer, as a packed f32 blob payload (slot == position here).
  PackedKv read_kv() {
    const auto& cfg = model_->config();
    PackedKv kv;
    kv.fingerprint = model_->fingerprint;
    kv.dtype = DType::kF32;
    kv.shape = {static_cast<uint32_t>(cfg.n_layers), static_cast<uint32_t>(pref_.size()),
                static_cast<uint32_t>(cfg.n_kv_heads), static_cast<uint32_t>(cfg.head_dim)};
    kv.k.resize(kv.region_bytes());
    kv.v.resize(kv.region_bytes());
    const size_t row = static_cast<size_t>(engine_->pool().token_floats()) * sizeof(float);
    for (uint32_t l = 0; l < kv.shape.n_layers; ++l) {
      for (uint32_t t = 0; t < kv.shape.n_tokens; ++t) {
        std::memcpy(kv.k.data() + kv.row_offset(l, t), engine_->pool().key(static_cast<int32_t>(l), t), row);
        std::memcpy(kv.v.data() + kv.row_offset(l, t), engine_->pool().value(static_cast<int32_t>(l), t), row);
      }
    }
    return kv;
  }

  void write_kv(const PackedKv& kv) {
    const size_t row = static_cast<size_t>(engine_->pool().token_floats()) * sizeof(float);
    for (uint32_t l = 0; l < kv.shape.n_layers; ++l) {
      for (uint32_t t = 0; t < kv.shape.n_tokens; ++t) {
        std::memcpy(engine_->pool().key(static_cast<int32_t>(l), t), kv.k.data() + kv.row_offset(l, t), row);
        std::memcpy(engine_->pool().value(static_cast<int32_t>(l), t), kv.v.data() + kv.row_offset(l, t), row);
      }
    }
  }

  // Last-token logits of each query continued after the preference.
  std::vector<std::vector<float>> query_logits() {
    std::vector<std::vector<float>> out;
    for (const char* q : {"One day, Lily went to", "Tim the bird", "It started to rain and"}) {
      auto l = run(tok_->encode(q, false), static_cast<int32_t>(pref_.size()), true);
      EXPECT_TRUE(l.ok());
      out.push_back(std::move(l).value());
    }
    return out;
  }

  // Prefills `text` (BOS first) at positions [0, P) instead of SetUp's preference; exact_ is
  // then its K/V.
  void set_preference(const char* text) {
    pref_ = tok_->encode(text, true);
    ASSERT_TRUE(run(pref_, 0, false).ok());
    exact_ = read_kv();
  }

  // What attention-error probes need for continuations after the preference: the model's own
  // post-RoPE queries of every continuation token ([layer][query][n_heads * head_dim], from
  // reference_forward) and each continuation as the model runs it (queries and its own K/V).
  struct Probe {
    std::vector<float> queries;
    uint32_t n_queries = 0;
    std::vector<Continuation> conts;
  };
  Probe probe(const std::vector<const char*>& texts) {
    const auto& cfg = model_->config();
    const size_t qd = static_cast<size_t>(cfg.n_heads) * cfg.head_dim;
    const size_t row = static_cast<size_t>(engine_->pool().token_floats());
    std::vector<std::vector<float>> per_layer(static_cast<size_t>(cfg.n_layers));
    Probe p;
    for (const char* text : texts) {
      std::vector<int32_t> seq = pref_;
      const auto cont = tok_->encode(text, false);
      seq.insert(seq.end(), cont.begin(), cont.end());
      std::vector<float> all;
      EXPECT_TRUE(worker::reference_forward(*model_, seq, &all).ok());
      EXPECT_TRUE(run(cont, static_cast<int32_t>(pref_.size()), false).ok());
      Continuation c{.n = static_cast<uint32_t>(cont.size())};
      for (int32_t l = 0; l < cfg.n_layers; ++l) {
        const float* first = all.data() + (static_cast<size_t>(l) * seq.size() + pref_.size()) * qd;
        per_layer[static_cast<size_t>(l)].insert(per_layer[static_cast<size_t>(l)].end(), first, first + cont.size() * qd);
        c.q.insert(c.q.end(), first, first + cont.size() * qd);
        for (size_t i = 0; i < cont.size(); ++i) {
          const auto slot = static_cast<int32_t>(pref_.size() + i);
          c.k.insert(c.k.end(), engine_->pool().key(l, slot), engine_->pool().key(l, slot) + row);
          c.v.insert(c.v.end(), engine_->pool().value(l, slot), engine_->pool().value(l, slot) + row);
        }
      }
      p.n_queries += c.n;
      p.conts.push_back(std::move(c));
    }
    for (const auto& q : per_layer) p.queries.insert(p.queries.end(), q.begin(), q.end());
    return p;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<worker::Engine> engine_;
  std::vector<int32_t> blocks_;
  std::vector<int32_t> pref_;
  PackedKv exact_;
};

inline size_t argmax(const std::vector<float>& v) { return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin()); }

// The same K/V as f16 (how the injector stores it).
inline PackedKv to_f16(const PackedKv& in) {
  PackedKv out = in;
  out.dtype = DType::kF16;
  const uint64_t n = in.shape.elements_per_region();
  out.k.resize(2 * n);
  out.v.resize(2 * n);
  for (uint64_t i = 0; i < n; ++i) {
    float_to_element(DType::kF16, element_to_float(DType::kF32, in.k.data() + 4 * i), out.k.data() + 2 * i);
    float_to_element(DType::kF16, element_to_float(DType::kF32, in.v.data() + 4 * i), out.v.data() + 2 * i);
  }
  return out;
}

}  // namespace tessera::kvstore::testing
