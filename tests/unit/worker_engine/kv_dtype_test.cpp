// Quality gate of the f16 and int8 page pools (docs/kv.md): the same model through an f32 pool
// and through a reduced one, on every kernel path.
// - stories260K (GQA 8/4, head_dim 8; int8 groups of 8), the greedy.json prompts, 48 tokens each;
// - a synthetic GQA llama (8 heads / 2 kv heads, head_dim 64: int8 groups of 32 and the AVX-512
//   register path), random weights, 64 tokens after a 24-token prompt.
// Free-running greedy: f16 must generate exactly the f32 tokens. Teacher-forced over the f32
// greedy sequence (each position sees the same history): argmax agreement counted and the
// logits' NMSE = sum (a - b)^2 / sum b^2 over all positions, against stated bounds.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "synth_model.h"
#include "tessera/testing/paths.h"
#include "tessera/tokenizer/tokenizer.h"
#include "tessera/worker/engine.h"

namespace tessera::worker {
namespace {

using kernels::KvDtype;

std::vector<kernels::Isa> isas() {
  std::vector<kernels::Isa> out;
  for (auto i : {kernels::Isa::kScalar, kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
    if (kernels::isa_supported(i)) out.push_back(i);
  }
  return out;
}

std::unique_ptr<Engine> make_engine(const Model& m, KvDtype dt, kernels::Isa isa) {
  auto e = Engine::create(m, {.pool = {.num_pages = 16, .page_size = 16, .dtype = dt}, .threads = 2, .isa = isa});
  EXPECT_TRUE(e.ok()) << e.error().to_string();
  return std::move(e).value();
}

std::vector<int32_t> greedy(Engine& e, const std::vector<int32_t>& prompt, int32_t n) {
  GenerateRequest req;
  req.prompt = prompt;
  req.max_tokens = n;
  req.sampling.temperature = 0.0f;
  auto out = generate(e, req);
  EXPECT_TRUE(out.ok()) << out.error().to_string();
  return out.ok() ? out->tokens : std::vector<int32_t>{};
}

// Logits after each prefix of seq of length >= prompt_len (a prefill, then one decode per token).
std::vector<std::vector<float>> teacher_forced(Engine& e, const std::vector<int32_t>& seq, size_t prompt_len) {
  const int32_t ps = e.pool().page_size();
  std::vector<int32_t> table;
  for (int32_t p = 0; p * ps < static_cast<int32_t>(seq.size()); ++p) table.push_back(p);
  std::vector<int64_t> slots(seq.size());
  for (size_t i = 0; i < seq.size(); ++i) slots[i] = static_cast<int64_t>(i);
  std::vector<std::vector<float>> out;
  size_t done = 0;
  while (done < seq.size()) {
    const size_t n = done == 0 ? prompt_len : 1;
    const SeqInput in{.tokens = std::span(seq).subspan(done, n), .start_pos = static_cast<int32_t>(done),
                      .block_table = table, .slot_mapping = std::span(slots).subspan(done, n), .want_logits = true};
    auto l = e.forward(std::span(&in, 1));
    EXPECT_TRUE(l.ok()) << l.error().to_string();
    if (!l.ok()) return out;
    out.emplace_back(l->begin(), l->end());
    done += n;
  }
  return out;
}

size_t argmax(const std::vector<float>& v) { return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin()); }

struct Quality {
  int agree = 0, positions = 0;
  double num = 0.0, den = 0.0;
  double nmse() const { return den > 0.0 ? num / den : 0.0; }
};

void compare(const Model& m, const std::vector<std::vector<int32_t>>& prompts, int32_t n_gen, KvDtype dt,
             kernels::Isa isa, Quality* q, bool* greedy_equal) {
  auto ref = make_engine(m, KvDtype::kF32, isa);
  auto low = make_engine(m, dt, isa);
  for (const auto& prompt : prompts) {
    const std::vector<int32_t> want = greedy(*ref, prompt, n_gen);
    if (greedy(*low, prompt, n_gen) != want) *greedy_equal = false;
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), want.begin(), want.end() - 1);
    const auto a = teacher_forced(*ref, seq, prompt.size());
    const auto b = teacher_forced(*low, seq, prompt.size());
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ++q->positions;
      if (argmax(a[i]) == argmax(b[i])) ++q->agree;
      for (size_t j = 0; j < a[i].size(); ++j) {
        const double d = static_cast<double>(b[i][j]) - a[i][j];
        q->num += d * d;
        q->den += static_cast<double>(a[i][j]) * a[i][j];
      }
    }
  }
}

struct Bound {
  KvDtype dtype;
  double min_agree;  // fraction of teacher-forced positions with the f32 argmax
  double max_nmse;
  bool greedy_identical;
};

void gate(const Model& m, const std::vector<std::vector<int32_t>>& prompts, int32_t n_gen, const std::vector<Bound>& bounds,
          const std::string& what) {
  for (kernels::Isa isa : isas()) {
    for (const Bound& b : bounds) {
      Quality q;
      bool equal = true;
      compare(m, prompts, n_gen, b.dtype, isa, &q, &equal);
      std::printf("%s %s isa=%s: argmax %d/%d, logits NMSE %.3g, free-running greedy %s\n", what.c_str(),
                  kernels::kv_dtype_name(b.dtype), kernels::isa_name(isa), q.agree, q.positions, q.nmse(),
                  equal ? "identical" : "differs");
      EXPECT_GE(q.agree, b.min_agree * q.positions) << what << " " << kernels::kv_dtype_name(b.dtype);
      EXPECT_LE(q.nmse(), b.max_nmse) << what << " " << kernels::kv_dtype_name(b.dtype);
      EXPECT_GT(q.nmse(), 0.0) << "the reduced pool changed nothing: is it in use?";
      if (b.greedy_identical) {
        EXPECT_TRUE(equal) << what << " " << kernels::kv_dtype_name(b.dtype);
      }
    }
  }
}

TEST(KvDtypeQuality, Stories260K) {
  auto model = load_model(tessera::testing::shared_path("models/stories260K/stories260K.bin"));
  ASSERT_TRUE(model.ok()) << model.error().to_string();
  auto tok = load_tokenizer(tessera::testing::shared_path("models/stories260K/tok512.bin"));
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  std::ifstream in(tessera::testing::shared_path("models/stories260K/greedy.json"));
  const auto j = nlohmann::json::parse(in);
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : j.at("cases")) prompts.push_back((*tok)->encode(c.at("prompt").get<std::string>(), true));
  ASSERT_GE(prompts.size(), 4u);
  gate(**model, prompts, 48,
       {{KvDtype::kF16, 1.0, 1e-6, true}, {KvDtype::kInt8, 0.97, 5e-4, false}}, "stories260K");
}

TEST(KvDtypeQuality, SyntheticGqaLlamaHeadDim64) {
  testing::SynthSpec s;
  s.dim = 256;
  s.hidden_dim = 384;
  s.n_layers = 3;
  s.n_heads = 8;
  s.n_kv_heads = 2;
  s.head_dim = 64;
  s.vocab_size = 300;
  s.seed = 11;
  testing::SynthModel m(s);
  std::vector<std::vector<int32_t>> prompts;
  for (int p = 0; p < 3; ++p) {
    std::vector<int32_t> t;
    for (int i = 0; i < 24; ++i) t.push_back((p * 131 + i * 17 + 5) % s.vocab_size);
    prompts.push_back(t);
  }
  gate(m, prompts, 64, {{KvDtype::kF16, 1.0, 1e-6, true}, {KvDtype::kInt8, 0.97, 2e-4, false}}, "synthetic GQA hd64");
}

TEST(KvDtypePool, MemoryBudgetBuysMorePages) {
  auto model = load_model(tessera::testing::shared_path("models/stories260K/stories260K.bin"));
  ASSERT_TRUE(model.ok()) << model.error().to_string();
  const ModelConfig& c = (*model)->config();
  int32_t pages[3];
  int i = 0;
  for (KvDtype dt : {KvDtype::kF32, KvDtype::kF16, KvDtype::kInt8}) {
    auto e = Engine::create(**model, {.pool = {.num_pages = 1, .page_size = 16, .dtype = dt, .memory_mb = 8}, .threads = 1});
    ASSERT_TRUE(e.ok()) << e.error().to_string();
    EXPECT_EQ((*e)->pool().dtype(), dt);
    EXPECT_EQ(static_cast<size_t>((*e)->pool().num_pages()), (size_t{8} << 20) / kv_page_bytes(c, 16, dt));
    EXPECT_LE((*e)->pool().bytes(), size_t{8} << 20);
    EXPECT_EQ((*e)->backend().geometry().num_pages, (*e)->pool().num_pages());  // what register announces
    pages[i++] = (*e)->pool().num_pages();
  }
  // head_dim 8: f16 rows are 16 bytes, int8 rows 8 codes + one fp16 scale = 10 bytes (vs 32).
  EXPECT_GE(pages[1], 2 * pages[0]);
  EXPECT_GE(pages[2], 3 * pages[0]);
  auto tiny = Engine::create(**model, {.pool = {.num_pages = 1, .page_size = 4096, .dtype = KvDtype::kF32, .memory_mb = 1}, .threads = 1});
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.error().message.find("holds no f32 page"), std::string::npos) << tiny.error().message;
  // The float views exist for f32 pools only; read_kv/write_kv convert.
  auto e = Engine::create(**model, {.pool = {.num_pages = 2, .page_size = 4, .dtype = KvDtype::kInt8}, .threads = 1});
  ASSERT_TRUE(e.ok());
  const auto row = static_cast<size_t>((*e)->pool().token_floats());
  std::vector<float> k(row), v(row), k2(row), v2(row);
  for (size_t j = 0; j < row; ++j) {
    k[j] = 0.1f * static_cast<float>(j) - 1.0f;
    v[j] = 0.5f - 0.03f * static_cast<float>(j);
  }
  const int64_t slot = 5;
  ASSERT_TRUE((*e)->backend().write_kv(1, std::span(&slot, 1), k, v).ok());
  ASSERT_TRUE((*e)->backend().read_kv(1, std::span(&slot, 1), k2, v2).ok());
  for (size_t j = 0; j < row; ++j) {
    EXPECT_NEAR(k2[j], k[j], 2.2 / 127 / 2 * 1.01) << j;  // half an int8 step of the group's max |x|
    EXPECT_NEAR(v2[j], v[j], 0.5 / 127 / 2 * 1.01) << j;
  }
}

}  // namespace
}  // namespace tessera::worker
