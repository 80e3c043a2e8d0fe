// K/V offload on the worker (tessera/worker/kv_offload.h) over the real stories260K engine and an
// in-process kvstore: pages spilled from one engine's pool and reloaded into another's hold the
// same K/V — bit for bit with a lossless codec, within the codec's tolerance otherwise — and give
// the same logits; spills read pages before the plan overwrites them; misses, other codecs, other
// pool dtypes and wrong blobs load nothing; the executor's capability and refusal; the wire form.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <variant>
#include <vector>

#include <filesystem>

#include "tessera/common/kv_digest.h"
#include "tessera/common/protocol.h"
#include "tessera/kvstore/store.h"
#include "tessera/model/model_synth.h"
#include "tessera/testing/paths.h"
#include "tessera/worker/engine.h"
#include "tessera/worker/kv_offload.h"
#include "tessera/worker/preference_local.h"

namespace tessera::worker {
namespace {

constexpr int32_t kPage = 16;
constexpr uint64_t kNs = 0x5eedULL;

class KvOffloadTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = load_model(tessera::testing::shared_path("models/stories260K/stories260K.bin"));
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() { delete model_; }

  void SetUp() override {
    auto s = kvstore::Store::create(kvstore::StoreConfig{});
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    store_ = std::move(s).value();
    pstore_ = local_store(*store_);
    for (int32_t i = 0; i < 50; ++i) tokens_.push_back(1 + (i * 37) % 500);  // 3 full pages + 2 tokens
    tags_ = tags_of("ns-a", tokens_);
  }

  // The tags of the full pages of `tokens` in namespace `ns` (as the scheduler computes them).
  static std::vector<KvTag> tags_of(std::string_view ns, const std::vector<int32_t>& tokens) {
    KvPrefixDigest d(ns);
    std::vector<KvTag> out;
    for (size_t at = 0; at + kPage <= tokens.size(); at += kPage) {
      d.add_page(std::span(tokens).subspan(at, kPage));
      out.push_back(d.tag());
    }
    return out;
  }

  static std::unique_ptr<Engine> engine() {
    auto e = Engine::create(*model_, {.pool = {.num_pages = 16, .page_size = kPage, .mla_decompressed = mla_decompressed_}, .threads = 1});
    EXPECT_TRUE(e.ok()) << e.error().to_string();
    return std::move(e).value();
  }

  // One prefill step of `tokens` from `start` over `table` through the StepExecutor (sampling greedy).
  static StepPlan prefill(uint64_t step, uint64_t id, std::vector<int32_t> tokens, int32_t start, std::vector<int32_t> table) {
    SeqPlan s;
    s.request_id = id;
    s.start_pos = start;
    for (size_t i = 0; i < tokens.size(); ++i) {
      const int32_t pos = start + static_cast<int32_t>(i);
      s.slot_mapping.push_back(static_cast<int64_t>(table[static_cast<size_t>(pos / kPage)]) * kPage + pos % kPage);
    }
    s.tokens = std::move(tokens);
    s.block_table = std::move(table);
    s.sample = true;
    s.sampling.temperature = 0.0f;
    StepPlan p;
    p.step_id = step;
    p.seqs.push_back(std::move(s));
    return p;
  }

  // Logits of the last two prompt tokens recomputed over `table` (positions 48, 49).
  static std::vector<float> tail_logits(Engine& e, const std::vector<int32_t>& tokens, const std::vector<int32_t>& table) {
    std::vector<int64_t> slots;
    for (int32_t pos = 48; pos < 50; ++pos) slots.push_back(static_cast<int64_t>(table[static_cast<size_t>(pos / kPage)]) * kPage + pos % kPage);
    const std::vector<int32_t> tail(tokens.begin() + 48, tokens.end());
    const SeqInput in{.tokens = tail, .start_pos = 48, .block_table = table, .slot_mapping = slots, .want_logits = true};
    auto r = e.forward(std::span<const SeqInput>(&in, 1));
    EXPECT_TRUE(r.ok()) << r.error().to_string();
    return r.ok() ? std::vector<float>(r->begin(), r->end()) : std::vector<float>{};
  }

  static std::vector<float> page_kv(Engine& e, std::span<const int32_t> pages) {
    auto kv = read_pages(e.executor().backend(), pages, static_cast<int32_t>(pages.size()) * kPage);
    EXPECT_TRUE(kv.ok());
    std::vector<float> out(kv->k.size() / 4 + kv->v.size() / 4);
    std::memcpy(out.data(), kv->k.data(), kv->k.size());
    std::memcpy(out.data() + kv->k.size() / 4, kv->v.data(), kv->v.size());
    return out;
  }

  // Computes the prompt on engine A (pages 0..3), spills pages 0..2 under hashes 11..13, reloads
  // them into engine B's pages 5..7; returns what B loaded.
  struct RoundTrip {
    std::unique_ptr<Engine> a, b;
    ReloadResult reload;
    std::vector<float> original, reloaded;  // K/V of the three pages
  };
  RoundTrip round_trip(OffloadOptions options) {
    RoundTrip rt{engine(), engine(), {}, {}, {}};
    KvOffloader off(pstore_.get(), options);
    rt.a->executor().set_offload_handler(&off);
    rt.b->executor().set_offload_handler(&off);
    EXPECT_TRUE(rt.a->executor().execute(prefill(1, 1, tokens_, 0, {0, 1, 2, 3})).ok());
    const std::vector<int32_t> pages{0, 1, 2};
    rt.original = page_kv(*rt.a, pages);
    StepPlan spill;
    spill.step_id = 2;
    for (int32_t i = 0; i < 3; ++i)
      spill.spills.push_back(KvSpill{.page = i, .hash = 11u + static_cast<uint64_t>(i), .ns_hash = kNs, .tag = tags_[static_cast<size_t>(i)]});
    auto spilled = rt.a->executor().execute(spill);
    EXPECT_TRUE(spilled.ok());
    EXPECT_TRUE(off.flush(10000));
    auto done = off.take_offloaded();  // with whatever the spill step's result already reported
    if (spilled.ok()) done.insert(done.end(), spilled->offloaded.begin(), spilled->offloaded.end());
    std::sort(done.begin(), done.end());
    EXPECT_EQ(done, (std::vector<uint64_t>{11, 12, 13}));
    StepPlan reload;
    reload.step_id = 1;
    reload.reloads.push_back(
        KvReload{.request_id = 9, .ns_hash = kNs, .pages = {5, 6, 7}, .hashes = {11, 12, 13}, .tags = {tags_[0], tags_[1], tags_[2]}});
    auto res = rt.b->executor().execute(reload);
    EXPECT_TRUE(res.ok()) << res.error().to_string();
    if (res.ok() && res->reloads.size() == 1) rt.reload = res->reloads[0];
    rt.reloaded = page_kv(*rt.b, std::vector<int32_t>{5, 6, 7});
    rt.a->executor().set_offload_handler(nullptr);
    rt.b->executor().set_offload_handler(nullptr);
    return rt;
  }

  static inline Model* model_ = nullptr;
  static inline bool mla_decompressed_ = false;  // an MLA model's pool with per-head K and V
  std::unique_ptr<kvstore::Store> store_;
  std::unique_ptr<PreferenceStore> pstore_;
  std::vector<int32_t> tokens_;
  std::vector<KvTag> tags_;  // of tokens_' three full pages in namespace "ns-a"
};

TEST_F(KvOffloadTest, LosslessCodecReloadsBitExactKvAndLogits) {
  RoundTrip rt = round_trip({.codec = {.codec = kvstore::Codec::kZstd}, .blob_dtype = DType::kF32});
  EXPECT_EQ(rt.reload.pages, 3);
  EXPECT_GT(rt.reload.kv_bytes, 0);
  ASSERT_EQ(rt.original.size(), rt.reloaded.size());
  EXPECT_EQ(rt.original, rt.reloaded) << "zstd from f32 must round-trip bit for bit";
  // The continuation over the reloaded pages: the same logits as over the computed ones.
  const auto la = tail_logits(*rt.a, tokens_, {0, 1, 2, 3});
  const auto lb = tail_logits(*rt.b, tokens_, {5, 6, 7, 8});
  EXPECT_EQ(la, lb);
}

TEST_F(KvOffloadTest, Int8CodecReloadsWithinTolerance) {
  RoundTrip rt = round_trip({});  // the default: int8 groups of 64 from f16
  EXPECT_EQ(rt.reload.pages, 3);
  ASSERT_EQ(rt.original.size(), rt.reloaded.size());
  double err = 0, ref = 0;
  for (size_t i = 0; i < rt.original.size(); ++i) {
    err += std::pow(static_cast<double>(rt.original[i]) - rt.reloaded[i], 2);
    ref += std::pow(static_cast<double>(rt.original[i]), 2);
  }
  const double rel = std::sqrt(err / ref);
  EXPECT_GT(rel, 0.0) << "int8 is lossy";
  EXPECT_LE(rel, 0.01) << "K/V relative RMS error";  // docs/kvstore.md: 0.0068 on real K/V
  const auto la = tail_logits(*rt.a, tokens_, {0, 1, 2, 3});
  const auto lb = tail_logits(*rt.b, tokens_, {5, 6, 7, 8});
  ASSERT_EQ(la.size(), lb.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    num += std::pow(static_cast<double>(la[i]) - lb[i], 2);
    den += std::pow(static_cast<double>(la[i]), 2);
  }
  EXPECT_LE(num / den, 1e-3) << "logits NMSE";
  const auto vocab = static_cast<size_t>(model_->config().vocab_size);
  for (size_t row = 0; row < la.size() / vocab; ++row) {
    const auto a0 = la.begin() + static_cast<ptrdiff_t>(row * vocab), b0 = lb.begin() + static_cast<ptrdiff_t>(row * vocab);
    EXPECT_EQ(std::max_element(a0, a0 + static_cast<ptrdiff_t>(vocab)) - a0, std::max_element(b0, b0 + static_cast<ptrdiff_t>(vocab)) - b0)
        << "greedy token of row " << row;
  }
}

TEST_F(KvOffloadTest, SpillReadsPagesBeforeThePlanOverwritesThem) {
  auto e = engine();
  KvOffloader off(pstore_.get(), {.codec = {.codec = kvstore::Codec::kNone}, .blob_dtype = DType::kF32});
  e->executor().set_offload_handler(&off);
  ASSERT_TRUE(e->executor().execute(prefill(1, 1, tokens_, 0, {0, 1, 2, 3})).ok());
  const auto before = page_kv(*e, std::vector<int32_t>{0});
  // The same plan spills page 0 and prefills another request into it (the scheduler reuses an
  // evicted page at once).
  StepPlan p = prefill(2, 2, std::vector<int32_t>(16, 7), 0, {0});
  p.spills.push_back(KvSpill{.page = 0, .hash = 21, .ns_hash = kNs, .tag = tags_[0]});
  ASSERT_TRUE(e->executor().execute(p).ok());
  ASSERT_NE(page_kv(*e, std::vector<int32_t>{0}), before);
  ASSERT_TRUE(off.flush(10000));
  auto b = engine();
  b->executor().set_offload_handler(&off);
  StepPlan r;
  r.step_id = 1;
  r.reloads.push_back(KvReload{.request_id = 3, .ns_hash = kNs, .pages = {4}, .hashes = {21}, .tags = {tags_[0]}});
  auto res = b->executor().execute(r);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->reloads.at(0).pages, 1);
  EXPECT_EQ(page_kv(*b, std::vector<int32_t>{4}), before);
}

TEST_F(KvOffloadTest, MissesOtherCodecsOtherPoolDtypesAndBadBlobsLoadNothing) {
  RoundTrip rt = round_trip({});  // hashes 11..13 stored with int8 from f16, pool f32
  auto e = engine();
  auto reload = [&](KvOffloader& off, std::vector<uint64_t> hashes) {
    e->executor().set_offload_handler(&off);
    StepPlan r;
    r.step_id = 1;
    std::vector<int32_t> pages;
    std::vector<KvTag> tags;  // hash 11 + i is page i's
    for (size_t i = 0; i < hashes.size(); ++i) {
      pages.push_back(8 + static_cast<int32_t>(i));
      tags.push_back(tags_[i % 3]);
    }
    r.reloads.push_back(KvReload{.request_id = 1, .ns_hash = kNs, .pages = pages, .hashes = std::move(hashes), .tags = tags});
    auto res = e->executor().execute(r);
    EXPECT_TRUE(res.ok()) << res.error().to_string();
    e->executor().set_offload_handler(nullptr);
    return res.ok() ? res->reloads.at(0).pages : -1;
  };
  KvOffloader same(pstore_.get(), {});
  EXPECT_EQ(reload(same, {11, 99, 13}), 1) << "stops at the first miss";
  KvOffloader zstd(pstore_.get(), {.codec = {.codec = kvstore::Codec::kZstd}});
  EXPECT_EQ(reload(zstd, {11, 12}), 0) << "a blob written with another codec is never used";
  OffloadOptions f16pool;
  f16pool.pool_dtype = "f16";
  KvOffloader other_pool(pstore_.get(), f16pool);
  EXPECT_EQ(reload(other_pool, {11}), 0) << "nor one from another pool dtype";
  // A blob of the wrong shape under a valid key (as another model's page size would give).
  kvstore::PackedKv wrong;
  wrong.fingerprint = model_->fingerprint;
  wrong.dtype = DType::kF32;
  wrong.shape = {static_cast<uint32_t>(model_->config().n_layers), 8, static_cast<uint32_t>(model_->config().n_kv_heads),
                 static_cast<uint32_t>(model_->config().head_dim)};
  wrong.k.assign(wrong.region_bytes(), 0);
  wrong.v.assign(wrong.region_bytes(), 0);
  wrong.tag = tags_[0];  // the right tag: the shape is what is wrong
  auto blob = kvstore::encode_blob(wrong, {.codec = kvstore::Codec::kNone});
  ASSERT_TRUE(blob.ok());
  ASSERT_TRUE(pstore_->put(same.key_for(model_->fingerprint, kNs, 77), *blob).ok());
  EXPECT_EQ(reload(same, {77}), 0);
  EXPECT_EQ(same.stats().bad_blobs, 1u);
  EXPECT_EQ(same.stats().reload_missed_pages, 2u);
}

// A block-hash collision, crafted or by chance: the K/V of another prefix (another tenant's
// tokens), put through the kvstore under exactly the victim's key. The reload refuses it (its
// tag names the other prefix: counted, logged, a miss), writes nothing into the pool, and the
// victim's prompt computed over the refused pages gives exactly a full recompute's logits.
TEST_F(KvOffloadTest, AnotherPrefixsBlobUnderTheVictimsKeyIsRefused) {
  const OffloadOptions options{.codec = {.codec = kvstore::Codec::kZstd}, .blob_dtype = DType::kF32};
  KvOffloader off(pstore_.get(), options);
  // The attacker's page: other tokens in another namespace, spilled under the victim's hash 31.
  std::vector<int32_t> theirs(tokens_.size());
  for (size_t i = 0; i < theirs.size(); ++i) theirs[i] = 3 + static_cast<int32_t>(i * 11) % 400;
  auto a = engine();
  a->executor().set_offload_handler(&off);
  ASSERT_TRUE(a->executor().execute(prefill(1, 1, theirs, 0, {0, 1, 2, 3})).ok());
  StepPlan spill;
  spill.step_id = 2;
  spill.spills.push_back(KvSpill{.page = 0, .hash = 31, .ns_hash = kNs, .tag = tags_of("ns-evil", theirs)[0]});
  ASSERT_TRUE(a->executor().execute(spill).ok());
  ASSERT_TRUE(off.flush(10000));
  // Through the real kvstore: the blob is there under the victim's key, tagged as the attacker's.
  auto stored = pstore_->get(off.key_for(model_->fingerprint, kNs, 31));
  ASSERT_TRUE(stored.ok() && stored->found);
  auto header = kvstore::peek_blob_header(stored->blob);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->tag, tags_of("ns-evil", theirs)[0]);
  // The victim's reload of hash 31 with its own tag.
  auto b = engine();
  b->executor().set_offload_handler(&off);
  const auto before = page_kv(*b, std::vector<int32_t>{5});
  StepPlan r;
  r.step_id = 1;
  r.reloads.push_back(KvReload{.request_id = 2, .ns_hash = kNs, .pages = {5}, .hashes = {31}, .tags = {tags_[0]}});
  auto res = b->executor().execute(r);
  ASSERT_TRUE(res.ok()) << res.error().to_string();
  EXPECT_EQ(res->reloads.at(0).pages, 0) << "another prefix's K/V are never loaded";
  EXPECT_EQ(off.stats().mismatched_blobs, 1u);
  EXPECT_EQ(off.stats().reload_missed_pages, 1u);
  EXPECT_EQ(off.stats().bad_blobs, 0u);
  EXPECT_EQ(page_kv(*b, std::vector<int32_t>{5}), before) << "nothing was written into the pool";
  // The same reload without tags (a scheduler that predates them) loads nothing either.
  r.reloads[0].tags.clear();
  res = b->executor().execute(r);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->reloads.at(0).pages, 0);
  // The scheduler then prefills the victim's prompt over those pages: a full recompute.
  ASSERT_TRUE(b->executor().execute(prefill(3, 2, tokens_, 0, {5, 6, 7, 8})).ok());
  auto fresh = engine();
  ASSERT_TRUE(fresh->executor().execute(prefill(1, 1, tokens_, 0, {0, 1, 2, 3})).ok());
  EXPECT_EQ(tail_logits(*b, tokens_, {5, 6, 7, 8}), tail_logits(*fresh, tokens_, {0, 1, 2, 3}));
  a->executor().set_offload_handler(nullptr);
  b->executor().set_offload_handler(nullptr);
}

TEST_F(KvOffloadTest, ExecutorAdvertisesAndRequiresTheCapability) {
  auto e = engine();
  StepPlan p;
  p.step_id = 1;
  p.spills.push_back(KvSpill{.page = 0, .hash = 1});
  auto refused = e->executor().execute(p);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(refused.error().message.find("kv_offload"), std::string::npos) << refused.error().message;
  auto caps = e->executor().capabilities();
  EXPECT_EQ(std::count(caps.begin(), caps.end(), "kv_offload"), 0);
  KvOffloader off(pstore_.get(), {});
  e->executor().set_offload_handler(&off);
  caps = e->executor().capabilities();
  EXPECT_EQ(std::count(caps.begin(), caps.end(), "kv_offload"), 1);
  p.spills[0].page = 99;  // outside the 16-page pool
  auto bad = e->executor().execute(p);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kOutOfRange);
  e->executor().set_offload_handler(nullptr);
}

// The same round trips over a DeepSeek-V2 (multi-head latent attention) engine: its pool holds
// one latent row per token and layer (geometry: 1 head of kv_lora_rank + rope values), which is
// what a page blob carries, with a V region of zeros.
class KvOffloadMlaTest : public KvOffloadTest {
 protected:
  static void SetUpTestSuite() {
    dir_ = tessera::testing::make_temp_dir("tessera-offload-mla");
    const std::string path = dir_ + "/deepseek-v2-reduced.gguf";
    ASSERT_TRUE(synth_model({.like = "deepseek-v2-reduced", .dtype = DType::kF32, .out_path = path, .seed = 5}).ok());
    auto m = load_model(path);
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    ASSERT_TRUE((*m)->config().is_mla());
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
    std::filesystem::remove_all(dir_);
  }
  // K (the latent rows) and V of `kv` as page_kv lays them out: the V half must be zero.
  static void expect_zero_v(const std::vector<float>& kv) {
    const size_t half = kv.size() / 2;
    EXPECT_TRUE(std::all_of(kv.begin() + static_cast<ptrdiff_t>(half), kv.end(), [](float x) { return x == 0.0f; }));
    EXPECT_TRUE(std::any_of(kv.begin(), kv.begin() + static_cast<ptrdiff_t>(half), [](float x) { return x != 0.0f; }));
  }
  static size_t latent_k_bytes() {  // f32 K region of the three pages
    const ModelConfig& c = model_->config();
    return size_t{3} * kPage * static_cast<size_t>(c.n_layers) * static_cast<size_t>(c.kv_lora_rank + c.rope_dim) * 4;
  }
  static inline std::string dir_;
};

TEST_F(KvOffloadMlaTest, LatentPagesReloadBitExactWithZstd) {
  const PoolGeometry g = engine()->executor().backend().geometry();
  EXPECT_EQ(g.n_kv_heads, 1);
  EXPECT_EQ(g.head_dim, model_->config().kv_lora_rank + model_->config().rope_dim);
  EXPECT_TRUE(engine()->executor().backend().capabilities().kv_pages);
  EXPECT_FALSE(engine()->executor().backend().capabilities().kv_fill) << "no per-head V for preference alpha";
  RoundTrip rt = round_trip({.codec = {.codec = kvstore::Codec::kZstd}, .blob_dtype = DType::kF32});
  EXPECT_EQ(rt.reload.pages, 3);
  ASSERT_EQ(rt.original.size(), rt.reloaded.size());
  expect_zero_v(rt.original);
  EXPECT_EQ(rt.original, rt.reloaded) << "zstd from f32 must round-trip the latent rows bit for bit";
  const auto la = tail_logits(*rt.a, tokens_, {0, 1, 2, 3});
  const auto lb = tail_logits(*rt.b, tokens_, {5, 6, 7, 8});
  ASSERT_FALSE(la.empty());
  EXPECT_EQ(la, lb);
}

TEST_F(KvOffloadMlaTest, LossyCodecsStoreTheLatentOnceWithinTolerance) {
  for (const kvstore::Codec codec : {kvstore::Codec::kInt8, kvstore::Codec::kTiered}) {
    RoundTrip rt = round_trip({.codec = {.codec = codec}});
    EXPECT_EQ(rt.reload.pages, 3) << static_cast<int>(codec);
    // int8 of the f16 latent is ~1 byte per value (tiered codes the latent at K's fine step:
    // ~1.5 bytes); a second copy as V would double either.
    const size_t bound = latent_k_bytes() * (codec == kvstore::Codec::kInt8 ? 35 : 50) / 100;
    EXPECT_LT(static_cast<size_t>(rt.reload.kv_bytes), bound) << "codec " << static_cast<int>(codec);
    ASSERT_EQ(rt.original.size(), rt.reloaded.size());
    expect_zero_v(rt.reloaded);
    double err = 0, ref = 0;
    for (size_t i = 0; i < rt.original.size(); ++i) {
      ASSERT_TRUE(std::isfinite(rt.reloaded[i])) << i;
      err += std::pow(static_cast<double>(rt.original[i]) - rt.reloaded[i], 2);
      ref += std::pow(static_cast<double>(rt.original[i]), 2);
    }
    EXPECT_LE(std::sqrt(err / ref), 0.02) << "latent relative RMS error, codec " << static_cast<int>(codec);
    const auto la = tail_logits(*rt.a, tokens_, {0, 1, 2, 3});
    const auto lb = tail_logits(*rt.b, tokens_, {5, 6, 7, 8});
    ASSERT_EQ(la.size(), lb.size());
    const auto vocab = static_cast<ptrdiff_t>(model_->config().vocab_size);
    EXPECT_EQ(std::max_element(la.end() - vocab, la.end()) - la.end(), std::max_element(lb.end() - vocab, lb.end()) - lb.end())
        << "greedy token after the reloaded prefix, codec " << static_cast<int>(codec);
  }
}

// An MLA model on the decompressed pool (per-head K and V, two planes): the blob carries V too.
// The offloader decides by the pool, not the model (V was zero-filled when it asked is_mla()).
TEST_F(KvOffloadMlaTest, DecompressedPoolPagesKeepTheirV) {
  mla_decompressed_ = true;
  const PoolGeometry g = engine()->executor().backend().geometry();
  EXPECT_EQ(g.planes, 2);
  EXPECT_EQ(g.n_kv_heads, model_->config().n_kv_heads);
  RoundTrip rt = round_trip({.codec = {.codec = kvstore::Codec::kZstd}, .blob_dtype = DType::kF32});
  mla_decompressed_ = false;
  EXPECT_EQ(rt.reload.pages, 3);
  ASSERT_EQ(rt.original.size(), rt.reloaded.size());
  const size_t half = rt.original.size() / 2;
  EXPECT_TRUE(std::any_of(rt.original.begin() + static_cast<ptrdiff_t>(half), rt.original.end(), [](float x) { return x != 0.0f; }))
      << "V of a decompressed pool is spilled, not zero-filled";
  EXPECT_EQ(rt.original, rt.reloaded);
  const auto la = tail_logits(*rt.a, tokens_, {0, 1, 2, 3});
  const auto lb = tail_logits(*rt.b, tokens_, {5, 6, 7, 8});
  ASSERT_FALSE(la.empty());
  EXPECT_EQ(la, lb);
}

TEST(KvOffloadWire, PlanAndResultFieldsRoundTrip) {
  protocol::StepPlanMsg m{.id = 5, .plan = {}};
  m.plan.step_id = 3;
  const KvTag t1{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, t2{0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80};
  m.plan.spills = {KvSpill{.page = 4, .hash = 0xfeedfacecafebeefULL, .ns_hash = 9, .tag = t1}, KvSpill{.page = 5, .hash = 1}};
  m.plan.reloads = {KvReload{.request_id = 8, .ns_hash = 9, .pages = {1, 2}, .hashes = {10, 11}, .tags = {t1, t2}}};
  auto d = protocol::decode(protocol::encode(m));
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  const auto& plan = std::get<protocol::StepPlanMsg>(*d).plan;
  ASSERT_EQ(plan.spills.size(), 2u);
  EXPECT_EQ(plan.spills[0].page, 4);
  EXPECT_EQ(plan.spills[0].tag, t1);
  EXPECT_EQ(plan.spills[1].tag, KvTag{}) << "no tag on the wire: none";
  EXPECT_EQ(plan.spills[0].hash, 0xfeedfacecafebeefULL);
  EXPECT_EQ(plan.spills[0].ns_hash, 9u);
  ASSERT_EQ(plan.reloads.size(), 1u);
  EXPECT_EQ(plan.reloads[0].pages, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(plan.reloads[0].hashes, (std::vector<uint64_t>{10, 11}));
  EXPECT_EQ(plan.reloads[0].tags, (std::vector<KvTag>{t1, t2}));
  protocol::StepResultMsg r{.id = 5, .result = {}};
  r.result.step_id = 3;
  r.result.reloads = {ReloadResult{.request_id = 8, .pages = 1, .kv_bytes = 100, .transfer_ms = 0.5}};
  r.result.offloaded = {0xfeedfacecafebeefULL};
  auto dr = protocol::decode(protocol::encode(r));
  ASSERT_TRUE(dr.ok()) << dr.error().to_string();
  const auto& res = std::get<protocol::StepResultMsg>(*dr).result;
  ASSERT_EQ(res.reloads.size(), 1u);
  EXPECT_EQ(res.reloads[0].pages, 1);
  EXPECT_EQ(res.reloads[0].kv_bytes, 100);
  EXPECT_EQ(res.offloaded, r.result.offloaded);
  // Reload pages and tags of different lengths are refused, naming the field.
  m.plan.reloads[0].tags = {t1};
  auto bad_tags = protocol::decode(protocol::encode(m));
  ASSERT_FALSE(bad_tags.ok());
  EXPECT_NE(bad_tags.error().message.find("tags"), std::string::npos) << bad_tags.error().message;
  m.plan.reloads[0].tags.clear();
  // Reload pages and hashes of different lengths are refused, naming the field.
  m.plan.reloads[0].hashes = {10};
  auto bad = protocol::decode(protocol::encode(m));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("reloads"), std::string::npos) << bad.error().message;
}

}  // namespace
}  // namespace tessera::worker
