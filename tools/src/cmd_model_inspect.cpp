// `tessera model inspect PATH [--json] [--rules FILE [--backend cpu|cuda]]`: format,
// architecture, shapes, dtypes, parameter count, fingerprint and vocabulary summary of a model
// file or directory; with --rules, the model is loaded as a worker would load it with
// --placement-rules FILE, and each tensor's placement (rule, device, type, op) is printed.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/common/config.h"
#include "tessera/placement/placement.h"
#include "tessera/tools/command.h"
#include "tessera/model/model.h"

namespace tessera::tools {
namespace {


struct NamedTensor {
  std::string name;
  const Tensor* t;
};

// Top-level tensors and layer 0's (the other layers have the same shapes and dtypes), plus the
// first routed layer's after DeepSeek-V2's leading dense layers.
std::vector<NamedTensor> representative_tensors(const Model& m) {
  std::vector<NamedTensor> out = {{"token_embd", &m.tok_embeddings}, {"output_norm", &m.final_norm}};
  if (!m.config().tied_embeddings) out.push_back({"output", &m.output});
  std::vector<size_t> shown = {0};
  if (m.config().n_dense_lead > 0 && m.config().n_dense_lead < static_cast<int32_t>(m.layers.size())) {
    shown.push_back(static_cast<size_t>(m.config().n_dense_lead));
  }
  for (size_t li : shown) {
    if (li >= m.layers.size()) break;
    const LayerWeights& w = m.layers[li];
    const std::pair<const char*, const Tensor*> layer[] = {
        {"attn_norm", &w.attn_norm}, {"attn_q", &w.wq}, {"attn_k", &w.wk}, {"attn_v", &w.wv},
        {"attn_q.bias", &w.bq}, {"attn_k.bias", &w.bk}, {"attn_v.bias", &w.bv}, {"attn_q_norm", &w.attn_q_norm},
        {"attn_k_norm", &w.attn_k_norm}, {"attn_q_a", &w.attn_q_a}, {"attn_q_a_norm", &w.attn_q_a_norm},
        {"attn_q_b", &w.attn_q_b}, {"attn_kv_a_mqa", &w.attn_kv_a_mqa}, {"attn_kv_a_norm", &w.attn_kv_a_norm},
        {"attn_kv_b", &w.attn_kv_b}, {"attn_output", &w.wo},
        {"ffn_norm", &w.ffn_norm}, {"ffn_gate", &w.w_gate}, {"ffn_up", &w.w_up}, {"ffn_down", &w.w_down},
        {"ffn_gate_inp", &w.ffn_gate_inp}, {"ffn_gate_exps", &w.ffn_gate_exps}, {"ffn_up_exps", &w.ffn_up_exps},
        {"ffn_down_exps", &w.ffn_down_exps}, {"ffn_gate_inp_shexp", &w.ffn_gate_inp_shexp},
        {"ffn_gate_shexp", &w.ffn_gate_shexp}, {"ffn_up_shexp", &w.ffn_up_shexp}, {"ffn_down_shexp", &w.ffn_down_shexp}};
    for (const auto& [name, t] : layer) {
      const std::string label = std::string("blk.*.") + name;
      const bool listed = std::any_of(out.begin(), out.end(), [&](const NamedTensor& n) { return n.name == label; });
      if (!t->empty() && !listed) out.push_back({label, t});
    }
  }
  return out;
}

// Weight bytes per dtype over every tensor (tied output counted once).
std::map<std::string, int64_t> bytes_by_dtype(const Model& m) {
  std::map<std::string, int64_t> out;
  auto add = [&](const Tensor& t) {
    if (!t.empty()) out[dtype_name(t.dtype)] += t.rows * static_cast<int64_t>(dtype_row_bytes(t.dtype, t.cols));
  };
  add(m.tok_embeddings);
  add(m.final_norm);
  if (!m.config().tied_embeddings) add(m.output);
  for (const auto& w : m.layers) {
    for (const Tensor* t : {&w.attn_norm, &w.wq, &w.wk, &w.wv, &w.wo, &w.bq, &w.bk, &w.bv, &w.ffn_norm, &w.w_gate,
                            &w.w_up, &w.w_down, &w.ffn_gate_inp, &w.ffn_gate_exps, &w.ffn_up_exps, &w.ffn_down_exps,
                            &w.ffn_gate_inp_shexp, &w.ffn_gate_shexp, &w.ffn_up_shexp, &w.ffn_down_shexp,
                            &w.attn_q_norm, &w.attn_k_norm, &w.attn_q_a, &w.attn_q_a_norm, &w.attn_q_b,
                            &w.attn_kv_a_mqa, &w.attn_kv_a_norm, &w.attn_kv_b}) {
      add(*t);
    }
  }
  return out;
}

// The family features a model uses, in words (empty for a plain Llama).
std::vector<std::string> features(const Model& m) {
  const ModelConfig& c = m.config();
  std::vector<std::string> out;
  char buf[160];
  if (!c.rope_freq_factors.empty()) {
    const char* source = c.rope_longrope ? (c.rope_longrope_long ? "LongRoPE long" : "LongRoPE short") : "rope_freqs";
    std::snprintf(buf, sizeof buf, "RoPE frequency factors (%s, %zu values, %.3g..%.3g)", source, c.rope_freq_factors.size(),
                  *std::min_element(c.rope_freq_factors.begin(), c.rope_freq_factors.end()),
                  *std::max_element(c.rope_freq_factors.begin(), c.rope_freq_factors.end()));
    out.emplace_back(buf);
  }
  if (c.rope_freq_scale != 1.0f && !c.rope_yarn) out.push_back("linear RoPE scaling x" + std::to_string(c.rope_freq_scale));
  if (c.rope_attn_factor != 1.0f) {
    std::snprintf(buf, sizeof buf, "RoPE attention factor %.4g", static_cast<double>(c.rope_attn_factor));
    out.emplace_back(buf);
  }
  if (c.attn_bias) out.emplace_back("Q/K/V biases");
  // Phi-3's fused tensors are loaded as adjacent row views of one tensor.
  auto adjacent = [](const Tensor& a, const Tensor& b) {
    return b.data == static_cast<const uint8_t*>(a.data) + a.rows * dtype_row_bytes(a.dtype, a.cols);
  };
  if (c.architecture == "phi3" && !m.layers.empty() && adjacent(m.layers[0].wq, m.layers[0].wk)) {
    out.emplace_back("fused attn_qkv");
  }
  if (c.architecture == "phi3" && !m.layers.empty() && adjacent(m.layers[0].w_gate, m.layers[0].w_up)) {
    out.emplace_back("fused gate/up (ffn_up)");
  }
  if (c.embedding_scale != 1.0f) {
    std::snprintf(buf, sizeof buf, "embeddings x %g", c.embedding_scale);
    out.emplace_back(buf);
  }
  if (c.attn_scale > 0.0f) {
    std::snprintf(buf, sizeof buf, "attention scale %g", c.attn_scale);
    out.emplace_back(buf);
  }
  if (c.attn_softcap > 0.0f) out.push_back("attention soft-cap " + std::to_string(c.attn_softcap).substr(0, 6));
  if (c.final_softcap > 0.0f) out.push_back("final logit soft-cap " + std::to_string(c.final_softcap).substr(0, 6));
  if (c.sliding_window > 0) {
    out.push_back("sliding window " + std::to_string(c.sliding_window) +
                  (c.swa_every == 1 ? " (every layer)" : " (every " + std::to_string(c.swa_every) + "nd layer from 0)"));
  }
  if (c.post_norms) out.emplace_back("post-attention and post-MLP norms");
  if (c.qk_norm) out.emplace_back("per-head Q/K RMSNorm (attn_q_norm, attn_k_norm)");
  if (c.is_mla()) {
    std::snprintf(buf, sizeof buf, "multi-head latent attention: latent %d, %s, heads of %d + %d rope, V %d (cache: decompressed)",
                  c.kv_lora_rank, c.q_lora_rank > 0 ? ("q LoRA " + std::to_string(c.q_lora_rank)).c_str() : "plain attn_q",
                  c.head_dim - c.rope_dim, c.rope_dim, c.v_head_dim);
    out.emplace_back(buf);
  }
  if (c.rope_yarn) {
    std::snprintf(buf, sizeof buf, "YaRN RoPE (factor %g over %d, log multiplier %g)", 1.0f / c.rope_freq_scale, c.yarn_orig_ctx,
                  c.yarn_log_mul);
    out.emplace_back(buf);
  }
  if (c.is_moe()) {
    std::snprintf(buf, sizeof buf, "mixture of experts: %d experts of %d, top %d (%s)", c.n_experts, c.expert_hidden_dim,
                  c.n_experts_used, c.expert_weights_norm ? "softmax over the chosen" : "softmax over all");
    out.emplace_back(buf);
    if (c.shared_expert_hidden_dim > 0) {
      const bool gated = c.architecture != "deepseek2";
      out.push_back("shared expert of " + std::to_string(c.shared_expert_hidden_dim) + (gated ? " with a sigmoid gate" : " (ungated)"));
    }
    if (c.expert_weights_scale != 1.0f) {
      std::snprintf(buf, sizeof buf, "expert weights x %g", c.expert_weights_scale);
      out.emplace_back(buf);
    }
    if (c.n_dense_lead > 0) out.push_back("first " + std::to_string(c.n_dense_lead) + " layer(s) dense (" + std::to_string(c.hidden_dim) + ")");
  }
  out.emplace_back(c.ffn_act == FfnActivation::kGeluTanh ? "GeGLU (gelu-tanh)" : "SwiGLU");
  return out;
}

std::string token_text(const VocabSpec& v, int32_t id) {
  if (id < 0 || id >= static_cast<int32_t>(v.tokens.size())) return "";
  return v.tokens[static_cast<size_t>(id)];
}

struct Args {
  std::string path;
  bool json = false;
  std::string rules;
  std::string backend = "cpu";
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string share_text(float share) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(share));
  return buf;
}

nlohmann::json placement_json(const std::vector<placement::Decision>& ds) {
  nlohmann::json out = nlohmann::json::array();
  for (const placement::Decision& d : ds) {
    out.push_back({{"tensor", d.tensor}, {"kind", placement::kind_name(d.kind)}, {"shape", d.shape},
                   {"layer", d.layer ? nlohmann::json(*d.layer) : nlohmann::json(nullptr)},
                   {"stored", dtype_name(d.from)}, {"type", dtype_name(d.to)},
                   {"device", placement::device_name(d.device)}, {"op", placement::op_name(d.op)},
                   {"thread_share", d.thread_share}, {"rule", d.rule}});
  }
  return out;
}

void print_placement(const std::vector<placement::Decision>& ds, const Args& a) {
  std::printf("placement:    rules %s, backend %s (%s)\n", a.rules.c_str(), a.backend.c_str(),
              placement::summarize(ds).c_str());
  size_t wn = 6, wr = 4;
  for (const placement::Decision& d : ds) {
    wn = std::max(wn, d.tensor.size());
    wr = std::max(wr, d.rule.size());
  }
  std::printf("  %-*s %-13s %-16s %-6s %-6s %-6s %-16s %-7s %s\n", static_cast<int>(wn), "tensor", "kind", "shape",
              "stored", "type", "device", "op", "threads", "rule");
  for (const placement::Decision& d : ds) {
    std::printf("  %-*s %-13s %-16s %-6s %-6s %-6s %-16s %-7s %s\n", static_cast<int>(wn), d.tensor.c_str(),
                placement::kind_name(d.kind), shape_text(d.shape).c_str(), dtype_name(d.from), dtype_name(d.to),
                placement::device_name(d.device), placement::op_name(d.op), share_text(d.thread_share).c_str(),
                d.rule.c_str());
  }
}

int run_inspect(const std::vector<std::string>& args) {
  Args a;
  config::Options o("tessera model inspect", "model-inspect");
  o.add(a.path, {.name = "path", .help = "a .gguf file, a llama2.c .bin checkpoint, or a Hugging Face model directory (required)"});
  o.add(a.json, {.name = "json", .help = "print one JSON object instead of text"});
  o.add(a.rules, {.name = "rules",
                  .help = "placement rules (YAML) to load the model with, as tessera-worker --placement-rules does; "
                          "prints which rule placed each tensor and its device, type and operator"});
  o.add(a.backend, {.name = "backend", .help = "with --rules: the worker backend to plan for",
                    .choices = {"cpu", "cuda"}});
  o.positional("path");
  o.describe("Format, architecture, shapes, dtypes, parameter count, fingerprint and vocabulary summary of a model "
             "file or directory");
  if (auto exit_code = config::parse_command_line(o, args)) return *exit_code;
  if (a.path.empty()) {
    std::fprintf(stderr, "usage: tessera model inspect PATH [--json]; see tessera model inspect --help\n");
    return 2;
  }
  const std::string& path = a.path;
  const bool json = a.json;
  LoadOptions load_options;
  std::vector<placement::Decision> placed;
  if (!a.rules.empty()) {
    auto rules = placement::load_rules_file(a.rules);
    if (!rules.ok()) {
      std::fprintf(stderr, "tessera model inspect: --rules: %s\n", rules.error().message.c_str());
      return 1;
    }
    load_options.placer = placement::make_placer(std::make_shared<const placement::RuleSet>(std::move(*rules)),
                                                 {.backend = a.backend, .why = "--backend " + a.backend}, &placed);
  }
  auto loaded = load_model(path, load_options);
  if (!loaded.ok()) {
    std::fprintf(stderr, "tessera model inspect: %s\n", loaded.error().to_string().c_str());
    return 1;
  }
  const Model& m = **loaded;
  const ModelConfig& c = m.config();
  const VocabSpec& v = m.vocab;
  const auto tensors = representative_tensors(m);
  const auto bytes = bytes_by_dtype(m);
  char fp[24];
  std::snprintf(fp, sizeof fp, "%016" PRIx64, m.fingerprint);
  const char* layout = c.rope_layout == RopeLayout::kInterleaved ? "interleaved" : "halves";

  if (json) {
    nlohmann::json j;
    j["path"] = path;
    j["format"] = model_format_name(m.format());
    j["architecture"] = c.architecture;
    j["family"] = c.family.empty() ? c.architecture : c.family;
    j["features"] = features(m);
    j["config"] = {{"dim", c.dim}, {"hidden_dim", c.hidden_dim}, {"n_layers", c.n_layers}, {"n_heads", c.n_heads},
                   {"n_kv_heads", c.n_kv_heads}, {"head_dim", c.head_dim}, {"vocab_size", c.vocab_size},
                   {"max_seq_len", c.max_seq_len}, {"rms_eps", c.rms_eps}, {"rope_theta", c.rope_theta},
                   {"rope_layout", layout}, {"attn_bias", c.attn_bias}, {"tied_embeddings", c.tied_embeddings}};
    j["parameter_count"] = m.parameter_count();
    j["fingerprint"] = fp;
    j["weight_bytes"] = bytes;
    nlohmann::json ts = nlohmann::json::array();
    for (const auto& [name, t] : tensors) {
      ts.push_back({{"name", name}, {"dtype", dtype_name(t->dtype)}, {"shape", {t->rows, t->cols}}});
    }
    j["tensors"] = ts;
    if (!a.rules.empty()) j["placement"] = placement_json(placed);
    j["vocab"] = {{"model", v.model}, {"pre", v.pre}, {"tokens", v.tokens.size()}, {"merges", v.merges.size()},
                  {"bos_id", v.bos_id}, {"eos_id", v.eos_id}, {"unk_id", v.unk_id}, {"pad_id", v.pad_id},
                  {"add_bos", v.add_bos}, {"add_space_prefix", v.add_space_prefix},
                  {"has_chat_template", !v.chat_template.empty()}};
    // Token texts may hold arbitrary bytes: replace invalid UTF-8 rather than throw.
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("path:         %s\n", path.c_str());
  std::printf("format:       %s\n", model_format_name(m.format()));
  std::printf("architecture: %s (family %s)\n", c.architecture.c_str(), (c.family.empty() ? c.architecture : c.family).c_str());
  {
    std::string f;
    for (const std::string& s : features(m)) f += (f.empty() ? "" : ", ") + s;
    std::printf("features:     %s\n", f.c_str());
  }
  std::printf("shape:        dim %d, hidden %d, layers %d, heads %d, kv heads %d, head_dim %d, vocab %d, context %d\n",
              c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.vocab_size, c.max_seq_len);
  std::printf("              rms_eps %g, rope_theta %g, rope layout %s, qkv bias %s, tied embeddings %s\n", c.rms_eps,
              c.rope_theta, layout, c.attn_bias ? "yes" : "no", c.tied_embeddings ? "yes" : "no");
  std::printf("parameters:   %" PRId64 "\n", m.parameter_count());
  std::printf("fingerprint:  %s\n", fp);
  std::printf("weights:     ");
  for (const auto& [dt, n] : bytes) std::printf(" %s %.2f MiB", dt.c_str(), static_cast<double>(n) / (1 << 20));
  std::printf("\ntensors:\n");
  for (const auto& [name, t] : tensors) {
    std::printf("  %-20s %-5s [%" PRId64 ", %" PRId64 "]\n", name.c_str(), dtype_name(t->dtype), t->rows, t->cols);
  }
  if (v.tokens.empty()) {
    std::printf("vocab:        none embedded (use a separate tokenizer file)\n");
  } else {
    std::printf("vocab:        %s (pre '%s'), %zu tokens, %zu merges, bos %d '%s', eos %d '%s', add_bos %s, chat template %s\n",
                v.model.c_str(), v.pre.c_str(), v.tokens.size(), v.merges.size(), v.bos_id,
                token_text(v, v.bos_id).c_str(), v.eos_id, token_text(v, v.eos_id).c_str(), v.add_bos ? "yes" : "no",
                v.chat_template.empty() ? "no" : "yes");
  }
  if (!a.rules.empty()) print_placement(placed, a);
  return 0;
}

TESSERA_COMMAND("model inspect", "print a model's format, architecture, shapes, dtypes and parameter count", run_inspect);

}  // namespace
}  // namespace tessera::tools
