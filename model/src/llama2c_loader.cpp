// llama2.c checkpoints (Karpathy's run.c "version 0" export): a header of 7 int32
//   dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
// (a negative vocab_size means an untied classifier follows the weights), then fp32 arrays:
//   token_embedding[vocab, dim], rms_att[L, dim], wq[L, dim, dim], wk[L, kv_dim, dim],
//   wv[L, kv_dim, dim], wo[L, dim, dim], rms_ffn[L, dim], w1[L, hidden, dim],
//   w2[L, dim, hidden], w3[L, hidden, dim], rms_final[dim],
//   freq_cis_real[seq_len, head_size/2], freq_cis_imag[seq_len, head_size/2], [wcls[vocab, dim]].
// Weights are [out, in] row-major; RoPE pairs are interleaved.
#include <cstring>

#include "loaded_model.h"

namespace tessera::loaders {
namespace {

constexpr size_t kHeaderBytes = 7 * sizeof(int32_t);

// Walks the fp32 arrays in file order, handing out RawTensors and checking bounds.
class Cursor {
 public:
  Cursor(const FileBytes& file, size_t offset) : file_(file), offset_(offset) {}

  // Appends `count` tensors of shape `shape` named name_of(i) to `out`.
  Status take(TensorMap& out, const std::string& base, int count, std::vector<int64_t> shape) {
    uint64_t elems = 1;
    for (int64_t d : shape) {
      if (mul_overflows(elems, static_cast<uint64_t>(d), &elems)) return overflow(base);
    }
    uint64_t bytes = 0;
    if (mul_overflows(elems, sizeof(float), &bytes)) return overflow(base);
    for (int i = 0; i < count; ++i) {
      const std::string canonical = count == 1 && base.find('%') == std::string::npos ? base : layer_name(base, i);
      uint64_t end = 0;
      if (add_overflows(offset_, bytes, &end)) return overflow(base);
      if (end > file_.size()) {
        return make_error(ErrorCode::kTruncatedFile,
                          file_.path() + ": llama2.c checkpoint ends at byte " + std::to_string(file_.size()) +
                              " inside tensor " + canonical + " (needs bytes up to " + std::to_string(end) + ")");
      }
      if (!canonical.empty()) {
        out[canonical] = RawTensor{.name = canonical + " (llama2.c)", .dtype = DType::kF32, .shape = shape,
                                   .data = file_.data() + offset_, .nbytes = static_cast<size_t>(bytes)};
      }
      offset_ = static_cast<size_t>(end);
    }
    return ok_status();
  }

  size_t offset() const { return offset_; }

 private:
  static std::string layer_name(const std::string& pattern, int layer) {
    const size_t pos = pattern.find('%');
    if (pos == std::string::npos) return pattern;
    return pattern.substr(0, pos) + std::to_string(layer) + pattern.substr(pos + 1);
  }
  Error overflow(const std::string& what) const {
    return make_error(ErrorCode::kCorruptFile, file_.path() + ": llama2.c header sizes overflow in tensor " + what);
  }

  const FileBytes& file_;
  size_t offset_;
};

}  // namespace

Result<std::unique_ptr<Model>> load_llama2c(std::shared_ptr<const FileBytes> file, const LoadOptions& options) {
  const std::string& path = file->path();
  if (file->size() < kHeaderBytes) {
    return make_error(ErrorCode::kTruncatedFile, path + ": " + std::to_string(file->size()) +
                                                     " bytes is too short for a llama2.c header (28 bytes)");
  }
  int32_t h[7];
  std::memcpy(h, file->data(), sizeof h);
  // export.py's newer formats start with the magic "ak42" and a version (1: fp32, 2: int8).
  if (static_cast<uint32_t>(h[0]) == 0x616b3432u) {
    return make_error(ErrorCode::kUnsupported, path + ": not implemented yet: llama2.c export version " +
                                                   std::to_string(h[1]) +
                                                   " (\"ak42\" header); re-export with the legacy format (version 0)");
  }
  const char* names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; ++i) {
    if (h[i] == 0 || (h[i] < 0 && i != 5) || h[i] == INT32_MIN) {
      return make_error(ErrorCode::kCorruptFile, path + ": not a llama2.c checkpoint (header " + names[i] + " = " +
                                                     std::to_string(h[i]) + ")");
    }
  }
  auto model = std::make_unique<LoadedModel>(ModelFormat::kLlama2c, path);
  ModelConfig& c = model->mutable_config();
  c.architecture = "llama";
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.vocab_size = h[5] < 0 ? -h[5] : h[5];
  c.max_seq_len = h[6];
  c.tied_embeddings = h[5] > 0;
  c.rms_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.rope_layout = RopeLayout::kInterleaved;
  if (c.dim % c.n_heads != 0) {
    return make_error(ErrorCode::kCorruptFile, path + ": llama2.c header dim = " + std::to_string(c.dim) +
                                                   " is not a multiple of n_heads = " + std::to_string(c.n_heads));
  }
  c.head_dim = c.dim / c.n_heads;
  TS_TRY(validate_config(c, path));

  const int64_t dim = c.dim, hidden = c.hidden_dim, vocab = c.vocab_size;
  const int64_t kv_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  const int L = c.n_layers;
  TensorMap t;
  Cursor cur(*file, kHeaderBytes);
  TS_TRY(cur.take(t, "token_embd.weight", 1, {vocab, dim}));
  TS_TRY(cur.take(t, "blk.%.attn_norm.weight", L, {dim}));
  TS_TRY(cur.take(t, "blk.%.attn_q.weight", L, {dim, dim}));
  TS_TRY(cur.take(t, "blk.%.attn_k.weight", L, {kv_dim, dim}));
  TS_TRY(cur.take(t, "blk.%.attn_v.weight", L, {kv_dim, dim}));
  TS_TRY(cur.take(t, "blk.%.attn_output.weight", L, {dim, dim}));
  TS_TRY(cur.take(t, "blk.%.ffn_norm.weight", L, {dim}));
  TS_TRY(cur.take(t, "blk.%.ffn_gate.weight", L, {hidden, dim}));
  TS_TRY(cur.take(t, "blk.%.ffn_down.weight", L, {dim, hidden}));
  TS_TRY(cur.take(t, "blk.%.ffn_up.weight", L, {hidden, dim}));
  TS_TRY(cur.take(t, "output_norm.weight", 1, {dim}));
  // freq_cis_real / freq_cis_imag: precomputed RoPE tables we do not use; skip them.
  TS_TRY(cur.take(t, "", 2, {c.max_seq_len, c.head_dim / 2}));
  if (!c.tied_embeddings) TS_TRY(cur.take(t, "output.weight", 1, {vocab, dim}));
  if (cur.offset() != file->size()) {
    return make_error(ErrorCode::kCorruptFile, path + ": llama2.c checkpoint has " +
                                                   std::to_string(file->size() - cur.offset()) +
                                                   " bytes after the last tensor (header does not match the file)");
  }
  TS_TRY(assemble_model(*model, t, path, options));
  model->retain(std::move(file));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace tessera::loaders
