// Tensor kinds, rule matching and plan() (placement.h): the first matching rule places each
// tensor; every choice is resolved (auto -> the backend's) and checked against the tensor, the
// backend and this CPU.
#include <algorithm>
#include <map>
#include <sstream>

#include "tessera/placement/placement.h"

namespace tessera::placement {
namespace {

constexpr const char* kKindNames[] = {"embedding", "output", "attention", "ffn",  "router", "expert",
                                      "shared_expert", "norm", "bias",  "rope", "other"};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

struct Fail {
  const Rule& rule;
  const TensorDesc& t;
  Error operator()(const std::string& why) const {
    return make_error(ErrorCode::kInvalidArgument, rule.origin + ": " + why + " (" + t.name + ")");
  }
};

MatmulPath path_of(Op op) {
  switch (op) {
    case Op::kMatmulScalar: return MatmulPath::kScalar;
    case Op::kMatmulAvx2: return MatmulPath::kAvx2;
    case Op::kMatmulAvx512: return MatmulPath::kAvx512;
    default: return MatmulPath::kBackend;
  }
}

std::optional<kernels::Isa> isa_of(Op op) {
  switch (op) {
    case Op::kMatmulScalar: return kernels::Isa::kScalar;
    case Op::kMatmulAvx2: return kernels::Isa::kAvx2;
    case Op::kMatmulAvx512: return kernels::Isa::kAvx512;
    default: return std::nullopt;
  }
}

bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// Resolves and checks the op of one placement.
Result<Op> resolve_op(const Rule& r, const TensorDesc& t, Kind kind, Device device, const Target& target) {
  const Fail fail{r, t};
  const bool matmul = is_matmul_kind(kind);
  Op op = r.op;
  if (op == Op::kAuto) {
    if (device == Device::kCuda) return matmul || kind == Kind::kEmbedding ? Op::kCuda : Op::kNone;
    if (matmul) return Op::kMatmul;
    return kind == Kind::kEmbedding ? Op::kEmbeddingLookup : Op::kNone;
  }
  const std::string k = kind_name(kind);
  if (op == Op::kCuda) {
    if (device != Device::kCuda) return fail("op cuda runs on device cuda, this tensor is placed on cpu");
    if (!matmul && kind != Kind::kEmbedding) return fail("op cuda: kind " + k + " has no operator of its own");
    return op;
  }
  if (device == Device::kCuda) {
    return fail(std::string("op ") + op_name(op) + " runs on the cpu; this tensor is placed on cuda (op cuda or auto)");
  }
  if (op == Op::kEmbeddingLookup) {
    if (kind != Kind::kEmbedding) return fail("op embedding_lookup applies to the embedding, not to kind " + k);
    return op;
  }
  // matmul and its forced-ISA variants
  if (!matmul) {
    return fail(std::string("op ") + op_name(op) + " applies to matrices the backend multiplies (kinds output, attention, "
                                                  "ffn, router, expert, shared_expert), not to kind " + k);
  }
  if (std::optional<kernels::Isa> isa = isa_of(op)) {
    const bool runs = target.isa_supported ? target.isa_supported(*isa) : kernels::isa_supported(*isa);
    if (!runs) return fail(std::string("op ") + op_name(op) + ": this CPU cannot run the " + kernels::isa_name(*isa) + " kernels");
  }
  return op;
}

Result<DType> resolve_type(const Rule& r, const TensorDesc& t, Kind kind, Device device) {
  const Fail fail{r, t};
  const DType to = r.type.value_or(t.dtype);
  if (to == t.dtype) return to;
  const std::string what = std::string("type ") + dtype_name(to) + ": ";
  if (device == Device::kCuda) {
    return fail(what + "cuda placements keep the stored type (the cuda backend converts every weight to its "
                       "--cuda-dtype when uploading)");
  }
  if (kind == Kind::kNorm || kind == Kind::kBias || kind == Kind::kRope) {
    if (to == DType::kF32) return to;
    return fail(what + "kind " + kind_name(kind) + " is kept in f32 (type keep or f32)");
  }
  if (kind == Kind::kOther) return fail(what + "the forward pass does not read this tensor as a matrix (type keep)");
  if (kind == Kind::kRouter && !is_float(to)) {
    return fail(what + "expert routers stay in a float type (f32, f16, bf16), as llama.cpp keeps them");
  }
  const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
  if (cols % dtype_block_size(to) != 0) {
    return fail(what + "the row length " + std::to_string(cols) + " is not a multiple of " + dtype_name(to) +
                "'s block of " + std::to_string(dtype_block_size(to)));
  }
  if (dtype_is_quantized(t.dtype) && dtype_is_quantized(to) && !r.allow_requantize) {
    return fail(what + "the tensor is stored as " + dtype_name(t.dtype) +
                "; requantizing compounds the rounding of both types (convert from a float file, or set "
                "allow_requantize: true)");
  }
  return to;
}

}  // namespace

const char* kind_name(Kind k) { return kKindNames[static_cast<int>(k)]; }

std::optional<Kind> parse_kind(std::string_view name) {
  for (int k = 0; k <= static_cast<int>(Kind::kOther); ++k) {
    if (name == kKindNames[k]) return static_cast<Kind>(k);
  }
  return std::nullopt;
}

std::optional<int32_t> layer_of(std::string_view name) {
  if (!starts_with(name, "blk.")) return std::nullopt;
  int64_t n = 0;
  size_t i = 4;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && n < (1 << 24); ++i) n = n * 10 + (name[i] - '0');
  if (i == 4 || i >= name.size() || name[i] != '.') return std::nullopt;
  return static_cast<int32_t>(n);
}

Kind classify(std::string_view name) {
  if (name == "token_embd.weight") return Kind::kEmbedding;
  if (name == "output.weight") return Kind::kOutput;
  if (name == "rope_freqs.weight") return Kind::kRope;
  if (ends_with(name, "_norm.weight") || ends_with(name, "_norm.bias")) return Kind::kNorm;
  if (ends_with(name, ".bias")) return Kind::kBias;
  if (!layer_of(name) || !ends_with(name, ".weight")) return Kind::kOther;
  const std::string_view base = name.substr(name.find('.', 4) + 1);  // after "blk.N."
  if (starts_with(base, "ffn_gate_inp")) return Kind::kRouter;       // ffn_gate_inp, ffn_gate_inp_shexp
  if (starts_with(base, "ffn_") && base.find("_exps.") != std::string_view::npos) return Kind::kExpert;
  if (starts_with(base, "ffn_") && base.find("_shexp.") != std::string_view::npos) return Kind::kSharedExpert;
  if (base == "ffn_gate.weight" || base == "ffn_up.weight" || base == "ffn_down.weight") return Kind::kFfn;
  if (starts_with(base, "attn_")) return Kind::kAttention;
  return Kind::kOther;
}

bool is_matmul_kind(Kind k) {
  return k == Kind::kOutput || k == Kind::kAttention || k == Kind::kFfn || k == Kind::kRouter || k == Kind::kExpert ||
         k == Kind::kSharedExpert;
}

const char* device_name(Device d) {
  switch (d) {
    case Device::kAuto: return "auto";
    case Device::kCpu: return "cpu";
    case Device::kCuda: return "cuda";
  }
  return "?";
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kAuto: return "auto";
    case Op::kMatmul: return "matmul";
    case Op::kMatmulScalar: return "matmul_scalar";
    case Op::kMatmulAvx2: return "matmul_avx2";
    case Op::kMatmulAvx512: return "matmul_avx512";
    case Op::kEmbeddingLookup: return "embedding_lookup";
    case Op::kCuda: return "cuda";
    case Op::kNone: return "-";
  }
  return "?";
}

std::optional<Op> parse_op(std::string_view name) {
  for (Op op : {Op::kAuto, Op::kMatmul, Op::kMatmulScalar, Op::kMatmulAvx2, Op::kMatmulAvx512, Op::kEmbeddingLookup,
                Op::kCuda}) {
    if (name == op_name(op)) return op;
  }
  return std::nullopt;
}

bool Rule::matches(std::string_view name, Kind kind, std::optional<int32_t> layer) const {
  if (!kinds.empty() && std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) return false;
  if (layers && !(layer && *layer >= layers->first && *layer <= layers->second)) return false;
  return !regex || std::regex_match(name.begin(), name.end(), *regex);
}

Result<std::vector<Decision>> plan(const RuleSet& rules, const RuleSet& defaults, std::span<const TensorDesc> tensors,
                                   const Target& target) {
  std::vector<const Rule*> order;
  for (const Rule& r : rules.rules) order.push_back(&r);
  for (const Rule& r : defaults.rules) order.push_back(&r);
  const bool cpu_backend = target.backend == "cpu";
  // Per rule of the file: tensors it placed, and the first tensor it matched but an earlier rule took.
  std::vector<int64_t> placed(rules.rules.size(), 0);
  std::vector<std::pair<const TensorDesc*, const Rule*>> shadowed(rules.rules.size(), {nullptr, nullptr});
  std::vector<Decision> out;
  out.reserve(tensors.size());
  for (const TensorDesc& t : tensors) {
    const Kind kind = classify(t.name);
    const std::optional<int32_t> layer = layer_of(t.name);
    const Rule* winner = nullptr;
    for (size_t i = 0; i < order.size(); ++i) {
      if (!order[i]->matches(t.name, kind, layer)) continue;
      if (winner == nullptr) {
        winner = order[i];
        if (i < placed.size()) ++placed[i];
      } else if (i < shadowed.size() && shadowed[i].first == nullptr) {
        shadowed[i] = {&t, winner};
      }
    }
    if (winner == nullptr) {
      return make_error(ErrorCode::kInvalidArgument, rules.source + ": no rule places " + t.name +
                                                         " (the built-in rules end with a catch-all; was it removed?)");
    }
    const Rule& r = *winner;
    const Fail fail{r, t};
    Decision d{.tensor = t.name, .shape = t.shape, .kind = kind, .layer = layer, .rule = r.origin, .from = t.dtype};
    d.device = r.device != Device::kAuto ? r.device : (cpu_backend ? Device::kCpu : Device::kCuda);
    if (d.device == Device::kCuda && cpu_backend) {
      return fail("device cuda: this worker runs the cpu backend" + (target.why.empty() ? "" : " (" + target.why + ")") +
                  "; cuda placements need --backend cuda and a GPU");
    }
    if (d.device == Device::kCpu && !cpu_backend) {
      return fail("device cpu: the " + target.backend +
                  " backend holds every weight on the GPU (hybrid cpu/cuda placement is not implemented yet)");
    }
    TS_ASSIGN_OR_RETURN(d.op, resolve_op(r, t, kind, d.device, target));
    TS_ASSIGN_OR_RETURN(d.to, resolve_type(r, t, kind, d.device));
    if (r.thread_share) {
      if (d.device != Device::kCpu || !is_matmul_kind(kind)) {
        return fail(std::string("thread_share applies to cpu matmuls, not to kind ") + kind_name(kind) + " on " +
                    device_name(d.device));
      }
      d.thread_share = *r.thread_share;
    }
    out.push_back(std::move(d));
  }
  for (size_t i = 0; i < rules.rules.size(); ++i) {
    if (placed[i] > 0) continue;
    const Rule& r = rules.rules[i];
    if (shadowed[i].first != nullptr) {
      return make_error(ErrorCode::kInvalidArgument,
                        r.origin + ": the rule places no tensor: every tensor it matches was placed by an earlier rule "
                                   "(e.g. " + shadowed[i].first->name + " by the rule at " + shadowed[i].second->origin + ")");
    }
    std::string examples;
    for (size_t k = 0; k < tensors.size() && k < 4; ++k) examples += (k ? ", " : "") + tensors[k].name;
    return make_error(ErrorCode::kInvalidArgument, r.origin + ": the rule matches no tensor of this model (" +
                                                       std::to_string(tensors.size()) + " tensors: " + examples + ", ...)");
  }
  return out;
}

TensorPlacer make_placer(std::shared_ptr<const RuleSet> rules, Target target, std::vector<Decision>* report) {
  return [rules = std::move(rules), target = std::move(target), report](
             const ModelConfig& config, std::span<const TensorDesc> tensors) -> Result<std::vector<TensorChoice>> {
    const RuleSet defaults = default_rules(config.architecture);
    TS_ASSIGN_OR_RETURN(std::vector<Decision> decisions, plan(*rules, defaults, tensors, target));
    std::vector<TensorChoice> choices;
    choices.reserve(decisions.size());
    for (const Decision& d : decisions) {
      choices.push_back({.dtype = d.to, .exec = {.path = path_of(d.op), .thread_share = d.thread_share}});
    }
    if (report != nullptr) *report = std::move(decisions);
    return choices;
  };
}

std::string summarize(const std::vector<Decision>& decisions) {
  std::map<std::string, std::map<std::string, int>> by_device;  // device -> "op (thread share x)" -> count
  std::map<std::string, int> converted;                          // "f32->q8_0" -> count
  for (const Decision& d : decisions) {
    std::string op = d.op == Op::kNone ? "no op" : op_name(d.op);
    if (d.thread_share != 1.0f) {
      std::ostringstream share;
      share << op << " (thread share " << d.thread_share << ")";
      op = share.str();
    }
    ++by_device[device_name(d.device)][op];
    if (d.to != d.from) ++converted[std::string(dtype_name(d.from)) + "->" + dtype_name(d.to)];
  }
  std::ostringstream os;
  os << decisions.size() << " tensors";
  for (const auto& [device, ops] : by_device) {
    os << "; " << device << ":";
    const char* sep = " ";
    for (const auto& [op, n] : ops) {
      os << sep << n << " " << op;
      sep = ", ";
    }
  }
  os << "; converted at load:";
  if (converted.empty()) os << " none";
  const char* sep = " ";
  for (const auto& [conv, n] : converted) {
    os << sep << n << " " << conv;
    sep = ", ";
  }
  return os.str();
}

}  // namespace tessera::placement
