// Placement rules without a model file: parsing (every error names file:line), first-match
// precedence, conflicts (a shadowed rule), every planning refusal, and MoE tensor names.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessera/placement/placement.h"
#include "tessera/testing/status.h"

namespace tessera::placement {
namespace {

// A dense Llama-like model of 2 layers (dim 256, so K-quants fit) and the MoE tensors of one
// Qwen2-MoE-like layer (llama.cpp's names).
std::vector<TensorDesc> dense() {
  std::vector<TensorDesc> t = {{"token_embd.weight", DType::kF32, {1024, 256}}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    for (const char* n : {"attn_q", "attn_output"}) t.push_back({p + n + ".weight", DType::kF32, {256, 256}});
    for (const char* n : {"attn_k", "attn_v"}) t.push_back({p + n + ".weight", DType::kF32, {64, 256}});
    for (const char* n : {"ffn_gate", "ffn_up"}) t.push_back({p + n + ".weight", DType::kF32, {512, 256}});
    t.push_back({p + "ffn_down.weight", DType::kF32, {256, 512}});
    for (const char* n : {"attn_norm", "ffn_norm"}) t.push_back({p + n + ".weight", DType::kF32, {256}});
  }
  t.push_back({"output_norm.weight", DType::kF32, {256}});
  t.push_back({"output.weight", DType::kQ8_0, {1024, 256}});
  return t;
}

std::vector<TensorDesc> moe() {
  std::vector<TensorDesc> t = {{"token_embd.weight", DType::kF16, {1024, 256}}};
  const std::string p = "blk.0.";
  for (const char* n : {"attn_q", "attn_k", "attn_v", "attn_output"}) t.push_back({p + n + ".weight", DType::kF16, {256, 256}});
  t.push_back({p + "attn_q.bias", DType::kF32, {256}});
  t.push_back({p + "ffn_gate_inp.weight", DType::kF32, {8, 256}});
  for (const char* n : {"ffn_gate_exps", "ffn_up_exps"}) t.push_back({p + n + ".weight", DType::kF16, {8, 512, 256}});
  t.push_back({p + "ffn_down_exps.weight", DType::kF16, {8, 256, 512}});
  t.push_back({p + "ffn_gate_inp_shexp.weight", DType::kF32, {256}});
  for (const char* n : {"ffn_gate_shexp", "ffn_up_shexp"}) t.push_back({p + n + ".weight", DType::kF16, {512, 256}});
  t.push_back({p + "ffn_down_shexp.weight", DType::kF16, {256, 512}});
  t.push_back({p + "attn_norm.weight", DType::kF32, {256}});
  t.push_back({"output.weight", DType::kF16, {1024, 256}});
  return t;
}

Target cpu() { return {.backend = "cpu", .why = "test", .isa_supported = [](kernels::Isa) { return true; }}; }
Target cuda() { return {.backend = "cuda", .why = "test", .isa_supported = [](kernels::Isa) { return true; }}; }

Result<std::vector<Decision>> place(const std::string& yaml, const std::vector<TensorDesc>& t, const Target& target) {
  TS_ASSIGN_OR_RETURN(RuleSet rules, parse_rules(yaml, "r.yaml"));
  return plan(rules, default_rules("llama"), t, target);
}

// The error message of a parse or plan that must fail.
std::string error_of(const std::string& yaml, const std::vector<TensorDesc>& t = dense(), const Target& target = cpu()) {
  auto r = place(yaml, t, target);
  EXPECT_FALSE(r.ok()) << yaml;
  if (r.ok()) return "";
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << r.error().message;
  return r.error().message;
}

const Decision& find(const std::vector<Decision>& ds, const std::string& name) {
  for (const Decision& d : ds) {
    if (d.tensor == name) return d;
  }
  ADD_FAILURE() << "no decision for " << name;
  static Decision none;
  return none;
}

TEST(PlacementRules, ClassifiesDenseAndMoeNames) {
  EXPECT_EQ(classify("token_embd.weight"), Kind::kEmbedding);
  EXPECT_EQ(classify("output.weight"), Kind::kOutput);
  EXPECT_EQ(classify("blk.3.attn_qkv.weight"), Kind::kAttention);
  EXPECT_EQ(classify("blk.3.attn_kv_a_mqa.weight"), Kind::kAttention);
  EXPECT_EQ(classify("blk.3.attn_kv_a_norm.weight"), Kind::kNorm);
  EXPECT_EQ(classify("blk.3.ffn_down.weight"), Kind::kFfn);
  EXPECT_EQ(classify("blk.3.ffn_gate_inp.weight"), Kind::kRouter);
  EXPECT_EQ(classify("blk.3.ffn_gate_inp_shexp.weight"), Kind::kRouter);
  EXPECT_EQ(classify("blk.3.ffn_up_exps.weight"), Kind::kExpert);
  EXPECT_EQ(classify("blk.3.ffn_down_shexp.weight"), Kind::kSharedExpert);
  EXPECT_EQ(classify("blk.3.attn_q.bias"), Kind::kBias);
  EXPECT_EQ(classify("rope_freqs.weight"), Kind::kRope);
  EXPECT_EQ(classify("blk.x.attn_q.weight"), Kind::kOther);
  EXPECT_EQ(layer_of("blk.17.ffn_up.weight"), 17);
  EXPECT_EQ(layer_of("output.weight"), std::nullopt);
}

TEST(PlacementRules, WithoutRulesTheBuiltInsKeepEverything) {
  auto ds = place("rules:\n", dense(), cpu());
  ASSERT_OK(ds);
  ASSERT_EQ(ds->size(), dense().size());
  for (const Decision& d : *ds) {
    EXPECT_EQ(d.to, d.from) << d.tensor;
    EXPECT_EQ(d.device, Device::kCpu);
    EXPECT_EQ(d.thread_share, 1.0f);
    EXPECT_EQ(d.rule.rfind("built-in llama:", 0), 0u) << d.rule;
  }
  EXPECT_EQ(find(*ds, "token_embd.weight").op, Op::kEmbeddingLookup);
  EXPECT_EQ(find(*ds, "blk.0.attn_q.weight").op, Op::kMatmul);
  EXPECT_EQ(find(*ds, "blk.0.attn_norm.weight").op, Op::kNone);
  auto on_gpu = place("rules:\n", dense(), cuda());
  ASSERT_OK(on_gpu);
  EXPECT_EQ(find(*on_gpu, "blk.0.attn_q.weight").device, Device::kCuda);
  EXPECT_EQ(find(*on_gpu, "blk.0.attn_q.weight").op, Op::kCuda);
}

TEST(PlacementRules, FirstMatchingRuleWins) {
  const std::string yaml =
      "rules:\n"
      "  - match: 'blk\\.0\\.attn_.*'\n"  // line 2
      "    kind: attention\n"
      "    type: q4_k\n"
      "    op: matmul_avx2\n"
      "    thread_share: 0.5\n"
      "  - kind: [attention, ffn]\n"  // line 7: attention of layer 1, every ffn
      "    layers: 0-1\n"
      "    type: q8_0\n"
      "  - layers: 1\n"  // line 10: nothing of layer 1 is left but norms
      "    kind: norm\n";
  auto ds = place(yaml, dense(), cpu());
  ASSERT_OK(ds);
  const Decision& q0 = find(*ds, "blk.0.attn_q.weight");
  EXPECT_EQ(q0.rule, "r.yaml:2");
  EXPECT_EQ(q0.to, DType::kQ4_K);
  EXPECT_EQ(q0.op, Op::kMatmulAvx2);
  EXPECT_EQ(q0.thread_share, 0.5f);
  const Decision& q1 = find(*ds, "blk.1.attn_q.weight");
  EXPECT_EQ(q1.rule, "r.yaml:7");
  EXPECT_EQ(q1.to, DType::kQ8_0);
  EXPECT_EQ(q1.op, Op::kMatmul);
  EXPECT_EQ(find(*ds, "blk.0.ffn_down.weight").rule, "r.yaml:7");
  EXPECT_EQ(find(*ds, "blk.1.ffn_norm.weight").rule, "r.yaml:10");
  EXPECT_EQ(find(*ds, "blk.0.ffn_norm.weight").rule, "built-in llama:8");  // layers 1 only
  EXPECT_EQ(find(*ds, "output.weight").to, DType::kQ8_0);                 // kept as stored
  EXPECT_EQ(find(*ds, "output.weight").rule, "built-in llama:4");
  // Reversed, the broad rule takes everything the narrow one matched: a conflict, reported.
  const std::string reversed =
      "rules:\n"
      "  - kind: [attention, ffn]\n"
      "    type: q8_0\n"
      "  - match: 'blk\\.0\\.attn_(q|k|v|output)\\.weight'\n"
      "    type: q4_k\n";
  EXPECT_EQ(error_of(reversed),
            "r.yaml:4: the rule places no tensor: every tensor it matches was placed by an earlier rule (e.g. "
            "blk.0.attn_q.weight by the rule at r.yaml:2)");
}

TEST(PlacementRules, ParseErrorsNameFileAndLine) {
  EXPECT_EQ(error_of("rules:\n  - match: 'blk\\.(\\d+'\n").rfind("r.yaml:2: match: 'blk\\.(\\d+' is not a valid regular expression (", 0),
            0u);
  EXPECT_EQ(error_of("rules:\n  - kind: ffn\n    devcie: cpu\n"),
            "r.yaml:3: unknown key 'devcie' (match, layers, kind, device, type, allow_requantize, op, thread_share)");
  EXPECT_NE(error_of("rules:\n  - kind: experts\n").find("r.yaml:2: kind: unknown kind 'experts' (embedding, output, "
                                                          "attention, ffn, router, expert, shared_expert, norm, bias, rope, other)"),
            std::string::npos);
  EXPECT_EQ(error_of("rules:\n  - kind: ffn\n    device: gpu\n"), "r.yaml:3: device: unknown device 'gpu' (auto, cpu, cuda)");
  EXPECT_NE(error_of("rules:\n  - kind: ffn\n    type: q4_k_m\n").find("r.yaml:3: type: unknown type 'q4_k_m' (keep, f32, "),
            std::string::npos);
  EXPECT_EQ(error_of("rules:\n  - kind: ffn\n    op: marlin\n"),
            "r.yaml:3: op: unknown operator 'marlin' (auto, matmul, matmul_scalar, matmul_avx2, matmul_avx512, "
            "embedding_lookup, cuda)");
  EXPECT_EQ(error_of("rules:\n  - kind: ffn\n    thread_share: 1.5\n"),
            "r.yaml:3: thread_share: '1.5' is not a share of the threads in (0, 1] (e.g. 0.5)");
  EXPECT_EQ(error_of("rules:\n  - kind: ffn\n    layers: 5-2\n"), "r.yaml:3: layers: 5-2 is an empty range");
  EXPECT_EQ(error_of("rules:\n  - kind: ffn\n    layers: [1, x]\n"), "r.yaml:3: layers: 'x' is not a layer number (0, 1, ...)");
  EXPECT_EQ(error_of("rules:\n  - kind: ffn\n    kind: norm\n"), "r.yaml:3: key 'kind' appears twice in one rule");
  EXPECT_EQ(error_of("rules:\n  - kind: ffn\n    allow_requantize: maybe\n"),
            "r.yaml:3: allow_requantize must be true or false");
  EXPECT_EQ(error_of("rules:\n  - just a string\n"),
            "r.yaml:2: rule 1 is not a map of match, layers, kind, device, type, allow_requantize, op, thread_share");
  EXPECT_EQ(error_of("placement:\n  - kind: ffn\n"), "r.yaml:1: unknown key 'placement' (the file holds 'rules')");
  EXPECT_EQ(error_of("rules: ffn\n"), "r.yaml:1: 'rules' must be a list of rules");
  EXPECT_EQ(error_of(""), "r.yaml:1: empty file; expected a map with a 'rules' list");
  EXPECT_NE(error_of("rules:\n  - kind: [ffn\n").find("r.yaml:3: YAML: "), std::string::npos);
  auto missing = load_rules_file("/nonexistent/rules.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kIoError);
}

TEST(PlacementRules, PlanningRefusalsNameRuleAndTensor) {
  // A rule that matches nothing.
  EXPECT_EQ(error_of("rules:\n  - match: 'blk\\.9\\..*'\n"),
            "r.yaml:2: the rule matches no tensor of this model (21 tensors: token_embd.weight, blk.0.attn_q.weight, "
            "blk.0.attn_output.weight, blk.0.attn_k.weight, ...)");
  // Devices: cuda on the cpu backend; cpu on the cuda backend (hybrid not implemented).
  EXPECT_EQ(error_of("rules:\n  - kind: attention\n    device: cuda\n"),
            "r.yaml:2: device cuda: this worker runs the cpu backend (test); cuda placements need --backend cuda and a "
            "GPU (blk.0.attn_q.weight)");
  EXPECT_EQ(error_of("rules:\n  - kind: expert\n    device: cpu\n", moe(), cuda()),
            "r.yaml:2: device cpu: the cuda backend holds every weight on the GPU (hybrid cpu/cuda placement is not "
            "implemented yet) (blk.0.ffn_gate_exps.weight)");
  // Conversions the tensor does not allow.
  EXPECT_EQ(error_of("rules:\n  - kind: norm\n    type: q8_0\n"),
            "r.yaml:2: type q8_0: kind norm is kept in f32 (type keep or f32) (blk.0.attn_norm.weight)");
  EXPECT_EQ(error_of("rules:\n  - kind: ffn\n    type: q4_k\n", [] {
              auto t = dense();
              t.push_back({"blk.1.ffn_x.weight", DType::kF32, {4, 4}});
              for (auto& d : t) {
                if (d.name == "blk.0.ffn_down.weight") d.shape = {256, 320};
              }
              return t;
            }()),
            "r.yaml:2: type q4_k: the row length 320 is not a multiple of q4_k's block of 256 (blk.0.ffn_down.weight)");
  EXPECT_EQ(error_of("rules:\n  - kind: output\n    type: q4_0\n"),
            "r.yaml:2: type q4_0: the tensor is stored as q8_0; requantizing compounds the rounding of both types "
            "(convert from a float file, or set allow_requantize: true) (output.weight)");
  ASSERT_OK(place("rules:\n  - kind: output\n    type: q4_0\n    allow_requantize: true\n", dense(), cpu()));
  ASSERT_OK(place("rules:\n  - kind: output\n    type: f16\n", dense(), cpu()));  // dequantizing is exact
  EXPECT_EQ(error_of("rules:\n  - kind: router\n    type: q8_0\n", moe()),
            "r.yaml:2: type q8_0: expert routers stay in a float type (f32, f16, bf16), as llama.cpp keeps them "
            "(blk.0.ffn_gate_inp.weight)");
  EXPECT_EQ(error_of("rules:\n  - kind: attention\n    type: f16\n", dense(), cuda()),
            "r.yaml:2: type f16: cuda placements keep the stored type (the cuda backend converts every weight to its "
            "--cuda-dtype when uploading) (blk.0.attn_q.weight)");
  // Operators the kind, the device or this CPU cannot run.
  EXPECT_EQ(error_of("rules:\n  - kind: norm\n    op: matmul\n"),
            "r.yaml:2: op matmul applies to matrices the backend multiplies (kinds output, attention, ffn, router, "
            "expert, shared_expert), not to kind norm (blk.0.attn_norm.weight)");
  EXPECT_EQ(error_of("rules:\n  - kind: ffn\n    op: embedding_lookup\n"),
            "r.yaml:2: op embedding_lookup applies to the embedding, not to kind ffn (blk.0.ffn_gate.weight)");
  EXPECT_EQ(error_of("rules:\n  - kind: ffn\n    op: cuda\n"),
            "r.yaml:2: op cuda runs on device cuda, this tensor is placed on cpu (blk.0.ffn_gate.weight)");
  EXPECT_EQ(error_of("rules:\n  - kind: ffn\n    op: matmul\n", dense(), cuda()),
            "r.yaml:2: op matmul runs on the cpu; this tensor is placed on cuda (op cuda or auto) (blk.0.ffn_gate.weight)");
  const Target no_avx512{.backend = "cpu", .why = "test",
                         .isa_supported = [](kernels::Isa isa) { return isa != kernels::Isa::kAvx512; }};
  EXPECT_EQ(error_of("rules:\n  - kind: ffn\n    op: matmul_avx512\n", dense(), no_avx512),
            "r.yaml:2: op matmul_avx512: this CPU cannot run the avx512 kernels (blk.0.ffn_gate.weight)");
  // Thread shares apply to cpu matmuls only.
  EXPECT_EQ(error_of("rules:\n  - kind: embedding\n    thread_share: 0.5\n"),
            "r.yaml:2: thread_share applies to cpu matmuls, not to kind embedding on cpu (token_embd.weight)");
  EXPECT_EQ(error_of("rules:\n  - kind: attention\n    thread_share: 0.5\n", dense(), cuda()),
            "r.yaml:2: thread_share applies to cpu matmuls, not to kind attention on cuda (blk.0.attn_q.weight)");
}

// The target MoE configuration of docs/models.md: routed experts quantized on the CPU, the rest
// on the GPU. Today it is refused (hybrid), on either backend; its all-CPU form plans.
TEST(PlacementRules, MoeTargetConfiguration) {
  const std::string target_config =
      "rules:\n"
      "  - kind: expert\n"
      "    device: cpu\n"
      "    type: q4_k\n"
      "    thread_share: 1\n"
      "  - match: '.*'\n"
      "    device: cuda\n";
  EXPECT_NE(error_of(target_config, moe(), cuda()).find("hybrid cpu/cuda placement is not implemented yet"),
            std::string::npos);
  EXPECT_NE(error_of(target_config, moe(), cpu()).find("device cuda: this worker runs the cpu backend"), std::string::npos);
  const std::string all_cpu =
      "rules:\n"
      "  - kind: expert\n"
      "    type: q4_k\n"
      "  - kind: [shared_expert, attention]\n"
      "    type: q8_0\n"
      "    thread_share: 0.5\n";
  auto ds = place(all_cpu, moe(), cpu());
  ASSERT_OK(ds);
  EXPECT_EQ(find(*ds, "blk.0.ffn_up_exps.weight").to, DType::kQ4_K);
  EXPECT_EQ(find(*ds, "blk.0.ffn_down_exps.weight").to, DType::kQ4_K);
  EXPECT_EQ(find(*ds, "blk.0.ffn_up_shexp.weight").to, DType::kQ8_0);
  EXPECT_EQ(find(*ds, "blk.0.ffn_up_shexp.weight").thread_share, 0.5f);
  EXPECT_EQ(find(*ds, "blk.0.ffn_gate_inp.weight").to, DType::kF32);
  EXPECT_EQ(find(*ds, "blk.0.ffn_gate_inp.weight").rule, "built-in llama:7");
  EXPECT_EQ(find(*ds, "blk.0.ffn_gate_inp_shexp.weight").kind, Kind::kRouter);
}

TEST(PlacementRules, BuiltInRulesParse) {
  for (const char* arch : {"llama", "mistral", "qwen2", "gemma2", "phi3", "qwen2moe", "deepseek2", "unknown"}) {
    const RuleSet set = default_rules(arch);
    EXPECT_EQ(set.rules.size(), 7u) << arch;
    EXPECT_TRUE(set.rules.back().builtin);
    EXPECT_NE(default_rules_yaml(arch).find(std::string("Built-in placement rules for ") + arch), std::string::npos);
  }
}

}  // namespace
}  // namespace tessera::placement
