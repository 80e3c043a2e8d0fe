// The built-in placement rules of each architecture (placement.h, default_rules): what Tessera
// does without a rules file, written as rules. They only name what exists; every choice is auto
// (the backend's device and kernels) and keep (the stored type).
#include "tessera/placement/placement.h"
#include "tessera/common/check.h"

namespace tessera::placement {
namespace {

// Per family: what its attention and MLP tensors are (comments in the YAML text).
struct FamilyNotes {
  const char* attention;
  const char* ffn;
};

FamilyNotes notes_of(const std::string& a) {
  if (a == "phi3") {
    return {"attn_qkv (fused Q, K, V: used as row views), attn_output", "ffn_up (fused gate and up rows), ffn_down"};
  }
  if (a == "qwen2") return {"attn_q/k/v (with biases), attn_output", "ffn_gate, ffn_up, ffn_down (SwiGLU)"};
  if (a == "gemma2") return {"attn_q/k/v, attn_output", "ffn_gate, ffn_up, ffn_down (GeGLU)"};
  if (a == "qwen2moe" || a == "qwen3moe" || a == "deepseek2") {
    return {"attention matrices", "dense MLP layers (DeepSeek's first layers), if any"};
  }
  return {"attn_q/k/v, attn_output", "ffn_gate, ffn_up, ffn_down (SwiGLU)"};
}

}  // namespace

std::string default_rules_yaml(const std::string& architecture) {
  const FamilyNotes n = notes_of(architecture);
  std::string y;
  y += "# Built-in placement rules for " + architecture + ": device auto (the backend's), type keep, op auto.\n";
  y += "rules:\n";
  y += "  - kind: embedding    # token_embd: rows dequantized per token (cpu); also the output head when tied\n";
  y += "  - kind: output       # output.weight: the LM head, a matmul\n";
  y += std::string("  - kind: attention    # ") + n.attention + "\n";
  y += std::string("  - kind: ffn          # ") + n.ffn + "\n";
  y += "  - kind: [router, expert, shared_expert]   # MoE: ffn_gate_inp, ffn_*_exps, ffn_*_shexp\n";
  y += "  - kind: [norm, bias, rope]                # f32, applied inside each layer's fused code\n";
  y += "  - match: '.*'        # anything else: kept as stored (not read by the forward pass)\n";
  return y;
}

RuleSet default_rules(const std::string& architecture) {
  Result<RuleSet> set = parse_rules(default_rules_yaml(architecture), "built-in " + architecture);
  TS_CHECK(set.ok()) << set.error().message;
  for (Rule& r : set->rules) r.builtin = true;
  return std::move(*set);
}

}  // namespace tessera::placement
