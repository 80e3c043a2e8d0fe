// DKI preference injection on the worker, end to end on the real stories260K model:
// injected greedy output equals a directly constructed reference token for token; alpha rules;
// K is never scaled; kvstore round trips (none/zstd exact, int8/int4 within measured bounds);
// user isolation; bad fills are refused with errors; put failures are not fatal.
#include <cmath>
#include <cstring>
#include <random>

#include "fixture.h"
#include "tessera/kvstore/store.h"

namespace tessera::worker::testing {
namespace {

constexpr int32_t kGen = 24;

std::unique_ptr<kvstore::Store> l1_store() {
  auto s = kvstore::Store::create(kvstore::StoreConfig{});
  EXPECT_TRUE(s.ok()) << s.error().to_string();
  return std::move(s).value();
}

using PrefTest = PreferenceFixture;

TEST(PreferenceKeys, AlphaRule) {
  EXPECT_FALSE(effective_alpha(0.05f).has_value());
  EXPECT_FALSE(effective_alpha(0.1f).has_value());
  EXPECT_FALSE(effective_alpha(0.0f).has_value());
  EXPECT_FALSE(effective_alpha(std::nanf("")).has_value());
  EXPECT_EQ(effective_alpha(0.11f).value(), 0.11f);
  EXPECT_EQ(effective_alpha(0.5f).value(), 0.5f);
  EXPECT_EQ(effective_alpha(0.7f).value(), 0.7f);
  EXPECT_EQ(effective_alpha(1.0f).value(), 0.7f);
}

TEST(PreferenceKeys, BlobKeyRoundTripAndErrors) {
  for (const std::string& user : std::vector<std::string>{std::string("alice"), std::string(""), std::string("a:b|c\n"), std::string(256, 'u')}) {
    const std::string k = make_blob_key(user, 0x0123456789abcdefULL);
    auto p = parse_blob_key(k);
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    EXPECT_EQ(p->user, user);
    EXPECT_EQ(p->content_hash, 0x0123456789abcdefULL);
  }
  EXPECT_EQ(make_blob_key("bob", 0xff), "pref1:00000000000000ff:bob");
  for (const std::string& bad : std::vector<std::string>{"", "pref1:", "pref1:0123:bob", "pref2:0123456789abcdef:bob", "pref1:0123456789ABCDEF:bob",
                                "pref1:0123456789abcdefxbob", "pref1:0123456789abcdef:" + std::string(257, 'u')}) {
    auto p = parse_blob_key(bad);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_EQ(p.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(p.error().message.find("blob_key"), std::string::npos) << p.error().message;
  }
  // The content hash depends on the tokens and on the model.
  const std::vector<int32_t> a{1, 2, 3}, b{1, 2, 4};
  EXPECT_NE(preference_hash(a, 7), preference_hash(b, 7));
  EXPECT_NE(preference_hash(a, 7), preference_hash(a, 8));
  EXPECT_EQ(preference_hash(a, 7), preference_hash(a, 7));
}

TEST_F(PrefTest, InjectedGreedyOutputEqualsReference) {
  for (float alpha : {0.3f, 0.7f}) {
    const RefRun ref = reference(alpha, kGen);
    auto e = make_engine(*model_);
    PreferenceInjector inj(nullptr, {});
    inj.attach(*e);
    auto r = generate_with_preference(*e, {.fill = fill_for("", alpha), .base = greedy(prompt_, kGen)});
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    EXPECT_EQ(r->gen.tokens, ref.tokens) << "alpha " << alpha;
    ASSERT_TRUE(r->fill.has_value());
    EXPECT_EQ(r->fill->source, "compute");
    EXPECT_GT(r->fill->compute_ms, 0.0);
  }
  // The test can fail: the preference and alpha change the computation.
  auto plain = make_engine(*model_);
  const std::vector<float> no_pref = run(*plain, prompt_, 0);
  const double vs_plain = nmse(reference(0.7f, 1).first_logits, no_pref);
  const double vs_alpha = nmse(reference(0.3f, 1).first_logits, reference(0.7f, 1).first_logits);
  std::printf("first-step logits NMSE: alpha 0.7 vs no preference %.3g, alpha 0.3 vs 0.7 %.3g\n", vs_plain, vs_alpha);
  EXPECT_GT(vs_plain, 1e-3);
  EXPECT_GT(vs_alpha, 1e-6);
}

TEST_F(PrefTest, AlphaAtOrBelowFloorRunsWithoutPreference) {
  // The request builder's decision: effective_alpha(0.05) says no injection, so no fill.
  auto plain_engine = make_engine(*model_);
  auto plain = generate(*plain_engine, greedy(prompt_, kGen));
  ASSERT_TRUE(plain.ok());
  auto e = make_engine(*model_);
  PreferenceInjector inj(nullptr, {});
  inj.attach(*e);
  const std::optional<float> a = effective_alpha(0.05f);
  PreferenceGenerateRequest req{.fill = std::nullopt, .base = greedy(prompt_, kGen)};
  if (a) req.fill = fill_for("u", *a);
  auto r = generate_with_preference(*e, req);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->gen.tokens, plain->tokens);
  EXPECT_FALSE(r->fill.has_value());
  // And the injector itself refuses such an alpha (and anything above the cap).
  for (float bad : {0.05f, 0.1f, 0.71f, 1.0f}) {
    auto f = fill_for("u", bad);
    f.pages = pages_at(0);
    auto st = inj.apply(*e, f);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(st.error().message.find("alpha"), std::string::npos);
  }
  // Alpha above the cap through the rule equals alpha 0.7.
  EXPECT_EQ(reference(*effective_alpha(0.95f), kGen).tokens, reference(0.7f, kGen).tokens);
}

TEST_F(PrefTest, KIsNeverScaledAndVIsScaledExactly) {
  auto unscaled_engine = make_engine(*model_);
  run(*unscaled_engine, pref_, 0);
  const std::vector<int32_t> pages = pages_at(0);
  const kvstore::PackedKv unscaled = read_pages(unscaled_engine->pool(), *model_, pages, static_cast<int32_t>(pref_.size()));

  auto store = l1_store();
  auto ps = local_store(*store);
  for (bool second : {false, true}) {  // computed, then from the kvstore (codec none)
    auto e = make_engine(*model_);
    PreferenceInjector inj(ps.get(), {.codec = {.codec = kvstore::Codec::kNone}, .blob_dtype = DType::kF32});
    KvFill f = fill_for("kate", 0.4f);
    f.pages = pages;
    auto r = inj.apply(*e, f);
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    EXPECT_EQ(r->source, second ? "kvstore" : "compute");
    ASSERT_TRUE(inj.flush(10000));
    const kvstore::PackedKv got = read_pages(e->pool(), *model_, pages, static_cast<int32_t>(pref_.size()));
    EXPECT_EQ(std::memcmp(got.k.data(), unscaled.k.data(), got.k.size()), 0) << "K differs from the unscaled prefill";
    const auto* gv = reinterpret_cast<const float*>(got.v.data());
    const auto* uv = reinterpret_cast<const float*>(unscaled.v.data());
    size_t bad = 0;
    for (size_t i = 0; i < got.v.size() / sizeof(float); ++i) bad += gv[i] != uv[i] * 0.4f;
    EXPECT_EQ(bad, 0u) << "V elements not equal to alpha * unscaled V";
  }
}

// Attention output of random queries over (K, V) of every layer and KV head, concatenated.
std::vector<float> attention(const kvstore::PackedKv& kv, uint32_t seed) {
  const auto& s = kv.shape;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const auto* k = reinterpret_cast<const float*>(kv.k.data());
  const auto* v = reinterpret_cast<const float*>(kv.v.data());
  std::vector<float> out;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  for (uint32_t l = 0; l < s.n_layers; ++l) {
    for (uint32_t h = 0; h < s.n_kv_heads; ++h) {
      for (int q = 0; q < 4; ++q) {
        std::vector<float> qv(s.head_dim), w(s.n_tokens);
        for (auto& x : qv) x = nd(rng);
        float mx = -1e30f;
        for (uint32_t t = 0; t < s.n_tokens; ++t) {
          const size_t base = ((static_cast<size_t>(l) * s.n_tokens + t) * s.n_kv_heads + h) * s.head_dim;
          float d = 0;
          for (uint32_t i = 0; i < s.head_dim; ++i) d += qv[i] * k[base + i];
          w[t] = d * scale;
          mx = std::max(mx, w[t]);
        }
        float sum = 0;
        for (auto& x : w) sum += (x = std::exp(x - mx));
        for (uint32_t i = 0; i < s.head_dim; ++i) {
          float o = 0;
          for (uint32_t t = 0; t < s.n_tokens; ++t)
            o += w[t] / sum * v[((static_cast<size_t>(l) * s.n_tokens + t) * s.n_kv_heads + h) * s.head_dim + i];
          out.push_back(o);
        }
      }
    }
  }
  return out;
}

// Documented tolerances (docs/preference.md): NMSE of the first step's logits and of the
// attention output, kvstore path vs computed path. Blobs are stored from f16 (the injector's
// default) except the exact cases, stored from f32 to pin the bit-exact round trip.
struct CodecCase {
  kvstore::Codec codec;
  uint32_t group;
  double max_logits_nmse;
  double max_attn_nmse;
  bool exact;
  DType blob = DType::kF16;
};

TEST_F(PrefTest, KvstoreRoundTripPerCodec) {
  const std::vector<CodecCase> cases = {{kvstore::Codec::kNone, 0, 0.0, 0.0, true, DType::kF32},
                                        {kvstore::Codec::kZstd, 0, 0.0, 0.0, true, DType::kF32},
                                        {kvstore::Codec::kNone, 0, 1e-8, 1e-5, false},  // f16 rounding only
                                        {kvstore::Codec::kInt8, 64, 1e-4, 1e-3, false},
                                        {kvstore::Codec::kInt4, 32, 2e-2, 0.15, false},
                                        {kvstore::Codec::kKivi, 64, 2e-4, 1e-2, false},
                                        {kvstore::Codec::kTiered, 0, 1e-5, 1e-3, false}};  // default step 0.1, recent 8
  const int32_t P = static_cast<int32_t>(pref_.size());
  for (const CodecCase& c : cases) {
    SCOPED_TRACE(kvstore::codec_name(c.codec));
    auto store = l1_store();
    auto ps = local_store(*store);
    kvstore::EncodeOptions enc{.codec = c.codec};
    if (c.group) enc.group_size = c.group;
    // Worker 1 computes and stores.
    auto e1 = make_engine(*model_);
    PreferenceInjector inj1(ps.get(), {.codec = enc, .blob_dtype = c.blob});
    inj1.attach(*e1);
    auto r1 = generate_with_preference(*e1, {.fill = fill_for("carol", 0.5f), .base = greedy(prompt_, kGen)});
    ASSERT_TRUE(r1.ok()) << r1.error().to_string();
    EXPECT_EQ(r1->fill->source, "compute");
    ASSERT_TRUE(inj1.flush(10000));
    EXPECT_EQ(inj1.stats().puts_done, 1u);
    const kvstore::PackedKv exact = read_pages(e1->pool(), *model_, pages_at(0), P);
    // Worker 2 (another engine, same model) is served from the kvstore, without tokens.
    auto e2 = make_engine(*model_);
    PreferenceInjector inj2(ps.get(), {.codec = enc, .blob_dtype = c.blob});
    inj2.attach(*e2);
    auto r2 = generate_with_preference(*e2, {.fill = fill_for("carol", 0.5f, /*with_tokens=*/false), .base = greedy(prompt_, kGen)});
    ASSERT_TRUE(r2.ok()) << r2.error().to_string();
    EXPECT_EQ(r2->fill->source, "kvstore");
    EXPECT_GT(r2->fill->kv_bytes, 0);
    EXPECT_EQ(inj2.stats().computed, 0u);
    const kvstore::PackedKv decoded = read_pages(e2->pool(), *model_, pages_at(0), P);
    // First-step logits of both paths (a fresh pass over the prompt at P on each pool).
    auto e1b = make_engine(*model_), e2b = make_engine(*model_);
    PreferenceInjector i1b(ps.get(), {.codec = enc, .blob_dtype = c.blob});
    KvFill f = fill_for("carol", 0.5f);
    f.pages = pages_at(0);
    // e1b: computed (the store already has the blob, so compute explicitly without a store).
    PreferenceInjector compute_only(nullptr, {});
    ASSERT_TRUE(compute_only.apply(*e1b, f).ok());
    ASSERT_TRUE(i1b.apply(*e2b, f).ok());
    const std::vector<float> l_exact = run(*e1b, prompt_, P), l_kv = run(*e2b, prompt_, P);
    const double logits_nmse = nmse(l_kv, l_exact);
    const double attn_nmse = nmse(attention(decoded, 7), attention(exact, 7));
    size_t same = 0;
    while (same < r1->gen.tokens.size() && r1->gen.tokens[same] == r2->gen.tokens[same]) ++same;
    std::printf("codec %s group %u: blob %lld bytes (f32 K+V %zu), logits NMSE %.3g, attention NMSE %.3g, "
                "greedy tokens equal to the computed path: first %zu of %d\n",
                kvstore::codec_name(c.codec), c.group, static_cast<long long>(r2->fill->kv_bytes), exact.k.size() * 2,
                logits_nmse, attn_nmse, same, kGen);
    if (c.exact) {
      EXPECT_EQ(r2->gen.tokens, r1->gen.tokens);
      EXPECT_EQ(logits_nmse, 0.0);
      EXPECT_EQ(std::memcmp(decoded.k.data(), exact.k.data(), exact.k.size()), 0);
      EXPECT_EQ(std::memcmp(decoded.v.data(), exact.v.data(), exact.v.size()), 0);
    } else {
      EXPECT_LE(logits_nmse, c.max_logits_nmse);
      EXPECT_LE(attn_nmse, c.max_attn_nmse);
      EXPECT_GT(logits_nmse, 0.0);  // it is lossy: the comparison is real
    }
  }
}

TEST_F(PrefTest, UsersNeverGetAnotherUsersBlob) {
  auto store = l1_store();
  auto ps = local_store(*store);
  auto e = make_engine(*model_);
  PreferenceInjector inj(ps.get(), {});
  KvFill a = fill_for("alice", 0.5f);
  a.pages = pages_at(0);
  auto ra = inj.apply(*e, a);
  ASSERT_TRUE(ra.ok());
  EXPECT_EQ(ra->source, "compute");
  ASSERT_TRUE(inj.flush(10000));
  // Bob has the same preference text: he computes his own, never reads Alice's blob.
  KvFill b = fill_for("bob", 0.5f);
  b.pages = pages_at(3);
  auto rb = inj.apply(*e, b);
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(rb->source, "compute");
  // Without tokens Bob cannot be served at all before his own blob exists.
  ASSERT_TRUE(inj.flush(10000));
  ASSERT_TRUE(store->remove({model_->fingerprint, "bob", hex16(preference_hash(pref_, model_->fingerprint))}).ok());
  KvFill b2 = fill_for("bob", 0.5f, false);
  b2.pages = pages_at(6);
  auto rb2 = inj.apply(*e, b2);
  ASSERT_FALSE(rb2.ok());
  EXPECT_EQ(rb2.error().code, ErrorCode::kNotFound);
  // Alice is still served from her own entry.
  KvFill a2 = fill_for("alice", 0.5f, false);
  a2.pages = pages_at(9);
  auto ra2 = inj.apply(*e, a2);
  ASSERT_TRUE(ra2.ok()) << ra2.error().to_string();
  EXPECT_EQ(ra2->source, "kvstore");
  // An empty user is computed and never cached.
  KvFill anon = fill_for("", 0.5f);
  anon.pages = pages_at(12);
  const uint64_t puts_before = inj.stats().puts_done;
  ASSERT_TRUE(inj.apply(*e, anon).ok());
  ASSERT_TRUE(inj.flush(10000));
  EXPECT_EQ(inj.stats().puts_done, puts_before);
}

TEST_F(PrefTest, BadFillsAreRefusedAndNothingIsScaled) {
  auto e = make_engine(*model_);
  PreferenceInjector inj(nullptr, {});
  run(*e, pref_, 0);
  const kvstore::PackedKv before = read_pages(e->pool(), *model_, pages_at(0), static_cast<int32_t>(pref_.size()));
  struct Bad {
    const char* what;
    KvFill fill;
    ErrorCode code;
    const char* needle;
  };
  KvFill ok = fill_for("u", 0.5f);
  ok.pages = pages_at(0);
  std::vector<Bad> bads;
  {
    KvFill f = ok;
    f.pages = {0};
    bads.push_back({"too few pages", f, ErrorCode::kInvalidArgument, "pages for"});
  }
  {
    KvFill f = ok;
    f.pages = pages_at(0);
    f.pages.back() = kPages;
    bads.push_back({"page outside", f, ErrorCode::kOutOfRange, "outside the pool"});
  }
  {
    KvFill f = ok;
    f.tokens[3] = f.tokens[3] == 5 ? 6 : 5;
    bads.push_back({"hash mismatch", f, ErrorCode::kInvalidArgument, "hash"});
  }
  {
    KvFill f = ok;
    f.tokens.pop_back();
    bads.push_back({"token count", f, ErrorCode::kInvalidArgument, "num_tokens"});
  }
  {
    KvFill f = ok;
    f.tokens[0] = 100000;
    bads.push_back({"token outside vocab", f, ErrorCode::kOutOfRange, "vocabulary"});
  }
  {
    KvFill f = ok;
    f.blob_key = "alice";
    bads.push_back({"malformed key", f, ErrorCode::kInvalidArgument, "blob_key"});
  }
  {
    KvFill f = ok;
    f.num_tokens = 0;
    bads.push_back({"no tokens", f, ErrorCode::kInvalidArgument, "num_tokens"});
  }
  {
    KvFill f = ok;
    f.tokens.clear();
    bads.push_back({"miss without tokens", f, ErrorCode::kNotFound, "no tokens"});
  }
  for (const Bad& b : bads) {
    auto r = inj.apply(*e, b.fill);
    ASSERT_FALSE(r.ok()) << b.what;
    EXPECT_EQ(r.error().code, b.code) << b.what << ": " << r.error().message;
    EXPECT_NE(r.error().message.find(b.needle), std::string::npos) << b.what << ": " << r.error().message;
  }
  const kvstore::PackedKv after = read_pages(e->pool(), *model_, pages_at(0), static_cast<int32_t>(pref_.size()));
  EXPECT_EQ(after.k, before.k);
  EXPECT_EQ(after.v, before.v);
  // Through execute(): the step fails naming the fill, and an engine without a handler refuses.
  auto bare = make_engine(*model_);
  StepPlan plan;
  plan.fills.push_back(ok);
  auto st = bare->execute(plan);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ErrorCode::kUnsupported);
  inj.attach(*e);
  plan.fills[0].alpha = 0.9f;
  st = e->execute(plan);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("fills[0]"), std::string::npos) << st.error().message;
}

class FailingStore final : public PreferenceStore {
 public:
  int gets = 0;
  Result<StoreGet> get(const kvstore::BlobKey&) override {
    ++gets;
    return make_error(ErrorCode::kUnavailable, "kvstore down");
  }
  Status put(const kvstore::BlobKey&, std::string) override { return make_error(ErrorCode::kUnavailable, "kvstore down"); }
};

TEST_F(PrefTest, KvstoreFailuresAreCountedNotFatal) {
  FailingStore fs;
  auto e = make_engine(*model_);
  PreferenceInjector inj(&fs, {});
  inj.attach(*e);
  auto r = generate_with_preference(*e, {.fill = fill_for("dave", 0.5f), .base = greedy(prompt_, 4)});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->fill->source, "compute");
  ASSERT_TRUE(inj.flush(10000));
  const InjectorStats s = inj.stats();
  EXPECT_EQ(s.store_errors, 1u);
  EXPECT_EQ(s.puts_failed, 1u);
  EXPECT_EQ(s.computed, 1u);
  // Within the backoff the next fill does not wait on the store at all.
  auto r2 = generate_with_preference(*e, {.fill = fill_for("dave", 0.5f), .base = greedy(prompt_, 2)});
  ASSERT_TRUE(r2.ok()) << r2.error().to_string();
  EXPECT_EQ(fs.gets, 1);
  EXPECT_EQ(inj.stats().store_skipped, 1u);
  // With no backoff every fill asks again.
  PreferenceInjector eager(&fs, {.store_backoff_ms = 0});
  KvFill f = fill_for("dave", 0.5f);
  f.pages = pages_at(0);
  ASSERT_TRUE(eager.apply(*e, f).ok());
  EXPECT_EQ(fs.gets, 2);
}

TEST_F(PrefTest, BlobOfAnotherShapeIsRefusedAndRecomputed) {
  auto store = l1_store();
  const int32_t P = static_cast<int32_t>(pref_.size());
  // A valid blob for the right key but with one token fewer.
  auto e0 = make_engine(*model_);
  run(*e0, pref_, 0);
  kvstore::PackedKv short_kv = read_pages(e0->pool(), *model_, pages_at(0), P - 1);
  auto blob = kvstore::encode_blob(short_kv, {.codec = kvstore::Codec::kNone});
  ASSERT_TRUE(blob.ok());
  const kvstore::BlobKey key{model_->fingerprint, "erin", hex16(preference_hash(pref_, model_->fingerprint))};
  ASSERT_TRUE(store->put(key, *blob).ok());
  auto ps = local_store(*store);
  auto e = make_engine(*model_);
  PreferenceInjector inj(ps.get(), {});
  KvFill f = fill_for("erin", 0.5f);
  f.pages = pages_at(0);
  auto r = inj.apply(*e, f);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->source, "compute");
  EXPECT_EQ(inj.stats().bad_blobs, 1u);
}

}  // namespace
}  // namespace tessera::worker::testing
