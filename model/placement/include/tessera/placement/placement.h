// Placement rules: where and how each weight tensor of a model lives and runs, chosen by an
// ordered list of rules matched against tensor names (the idea of ktransformers' YAML
// operator-replacement rules, in Tessera's terms). docs/models.md "Placement rules" is the
// user's reference; this header is the contract.
//
// A rule (one YAML map) selects tensors by
//   match: a regular expression (ECMAScript) that must match the whole canonical (GGUF) name,
//   layers: a block range ("3", "0-11", [0, 11]); a rule with layers matches only blk.N.* tensors,
//   kind: one kind or a list (kind_name below),
// all optional (a rule without selectors matches every tensor), and chooses
//   device: auto (the backend's) | cpu | cuda,
//   type: keep | any DType name (f32, f16, bf16, q8_0, ..., iq4_xs): converted at load,
//   allow_requantize: true to allow converting one block-quantized type into another,
//   op: auto | matmul | matmul_scalar | matmul_avx2 | matmul_avx512 | embedding_lookup | cuda,
//   thread_share: (0, 1], the share of the backend's threads the tensor's matmuls use.
//
// Precedence: the first rule (in file order) that matches a tensor places it, whatever the
// later rules say; the family's built-in rules (default_rules) come after the file's, so they
// place what the file leaves unmatched, and end with a catch-all. A rule of the file that
// places no tensor (it matches none, or only tensors earlier rules took) is an error; built-in
// rules are exempt.
//
// Errors (kInvalidArgument, message "<file>:<line>: <why>", the line of the rule or key at
// fault): YAML syntax, an unknown key / kind / device / type / op, a bad regex or layer range,
// thread_share outside (0, 1]; at planning, naming the rule and a tensor: a rule that places
// nothing, cuda on the cpu backend (or cpu on the cuda backend: hybrid placement is not
// implemented), an op the kind or device cannot run or this CPU lacks, a conversion the tensor
// does not allow (norms, biases and rope factors stay f32; routers stay float; the row length
// must be a multiple of the target's block; requantizing needs allow_requantize; cuda
// placements keep the stored type), thread_share on a cuda tensor or a tensor without matmul.
//
// Threads: RuleSet is immutable after parsing and safe to share; plan() is a pure function.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/dtype.h"
#include "tessera/common/result.h"
#include "tessera/kernels/isa.h"
#include "tessera/model/model.h"

namespace tessera::placement {

// What a tensor is, from its canonical name (classify()).
enum class Kind : uint8_t {
  kEmbedding,     // token_embd.weight
  kOutput,        // output.weight (the LM head)
  kAttention,     // blk.N.attn_*.weight matrices (q, k, v, output, fused qkv, DeepSeek's q_a/kv_a...)
  kFfn,           // blk.N.ffn_{gate,up,down}.weight (dense MLP)
  kRouter,        // blk.N.ffn_gate_inp.weight, blk.N.ffn_gate_inp_shexp.weight (MoE gates)
  kExpert,        // blk.N.ffn_{gate,up,down}_exps.weight (routed experts, [n_expert, rows, cols])
  kSharedExpert,  // blk.N.ffn_{gate,up,down}_shexp.weight
  kNorm,          // *_norm.weight
  kBias,          // *.bias
  kRope,          // rope_freqs.weight
  kOther,         // anything else
};
const char* kind_name(Kind k);  // "embedding", "output", "attention", "ffn", "router", "expert", ...
std::optional<Kind> parse_kind(std::string_view name);
Kind classify(std::string_view tensor_name);
// The block number of a blk.N.* name; nullopt for top-level tensors.
std::optional<int32_t> layer_of(std::string_view tensor_name);
// Kinds whose tensors are matrices multiplied by the backend's matmul kernels.
bool is_matmul_kind(Kind k);

enum class Device : uint8_t { kAuto, kCpu, kCuda };
const char* device_name(Device d);  // "auto", "cpu", "cuda"

enum class Op : uint8_t { kAuto, kMatmul, kMatmulScalar, kMatmulAvx2, kMatmulAvx512, kEmbeddingLookup, kCuda, kNone };
const char* op_name(Op op);  // kNone: "-" (norms, biases: applied inside the fused layer code)
std::optional<Op> parse_op(std::string_view name);

struct Rule {
  std::string origin;  // "rules.yaml:12" (the rule's first line), or "built-in llama:3"
  bool builtin = false;
  // Selectors.
  std::string match;  // the regex's source; "" = any name
  std::optional<std::regex> regex;
  std::optional<std::pair<int32_t, int32_t>> layers;  // inclusive
  std::vector<Kind> kinds;                            // empty = any kind
  // Choices.
  Device device = Device::kAuto;
  std::optional<DType> type;  // nullopt = keep
  bool allow_requantize = false;
  Op op = Op::kAuto;
  std::optional<float> thread_share;
  // Where each key was written, for errors about its value ("rules.yaml:14").
  std::string type_origin, op_origin, device_origin, share_origin;

  bool matches(std::string_view name, Kind kind, std::optional<int32_t> layer) const;
};

struct RuleSet {
  std::string source;  // the file path, or "built-in <family>"
  std::vector<Rule> rules;
};

// Parses rules from YAML text: a map with one key, `rules`, holding a list of rule maps (an
// empty list is allowed: the built-in rules alone). `source` names the text in errors.
Result<RuleSet> parse_rules(std::string_view yaml, const std::string& source);
// Reads and parses a file (kIoError when unreadable).
Result<RuleSet> load_rules_file(const std::string& path);

// The built-in rules of an architecture (what Tessera does without a rules file, as rules):
// dense families (llama, mistral, qwen2, gemma2, phi3) and MoE names (qwen2moe, qwen3moe,
// mixtral as llama with experts, deepseek2) alike. Every rule has device auto, type keep.
RuleSet default_rules(const std::string& architecture);
// Their YAML text (docs, `tessera model inspect --rules`).
std::string default_rules_yaml(const std::string& architecture);

// What the tensors will run on.
struct Target {
  std::string backend = "cpu";  // "cpu", "cuda" (cuda-tp counts as cuda)
  std::string why;              // how the backend was chosen, quoted in refusals ("no CUDA device")
  // Which CPU kernel paths this machine runs (kernels::isa_supported unless a test says).
  std::function<bool(kernels::Isa)> isa_supported;
};

// One tensor's placement.
struct Decision {
  std::string tensor;
  std::vector<int64_t> shape;
  Kind kind = Kind::kOther;
  std::optional<int32_t> layer;
  std::string rule;  // the placing rule's origin
  DType from = DType::kF32, to = DType::kF32;
  Device device = Device::kCpu;  // resolved (never auto)
  Op op = Op::kNone;             // resolved (never auto)
  float thread_share = 1.0f;
};

// Places every tensor: `rules` first, then `defaults`. Errors as in the file comment.
Result<std::vector<Decision>> plan(const RuleSet& rules, const RuleSet& defaults, std::span<const TensorDesc> tensors,
                                   const Target& target);

// A LoadOptions::placer that plans with `rules` (plus the model architecture's default_rules)
// and records the decisions in `*report` (which must outlive the load; may be null).
TensorPlacer make_placer(std::shared_ptr<const RuleSet> rules, Target target, std::vector<Decision>* report);

// One line for logs: "48 tensors; cpu: 1 embedding_lookup, 36 matmul, 11 no op; converted at
// load: 4 f32->q8_0" (ops by device, thread shares other than 1 in parentheses).
std::string summarize(const std::vector<Decision>& decisions);

}  // namespace tessera::placement
