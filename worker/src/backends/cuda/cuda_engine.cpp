// The CUDA engine: creation, step metadata, the forward pass and decode graphs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "cuda_engine_impl.h"
#include "engine/engine_impl.h"  // check_model: the CPU engine's model checks, shared
#include "tessera/common/log.h"
#include "tessera/kernels/cuda/attention.h"
#include "tessera/kernels/cuda/ops.h"
#include "tessera/kernels/cuda/sampling.h"

namespace tessera::worker {

using cuda_backend::DeviceBuffer;
namespace kc = kernels::cuda;

int32_t cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

Result<int32_t> probe_cuda_devices() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return make_error(ErrorCode::kUnavailable, std::string("no CUDA device (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")");
  }
  if (n < 1) return make_error(ErrorCode::kUnavailable, "no CUDA device (cudaGetDeviceCount found 0 devices)");
  return static_cast<int32_t>(n);
}

CudaEngine::Impl::~Impl() {
  cudaSetDevice(opt.device);  // tensor-parallel ranks are destroyed from one thread
  for (auto& [b, g] : graphs) cudaGraphExecDestroy(g);
  if (pinned_meta != nullptr) cudaFreeHost(pinned_meta);
  if (pinned_logits != nullptr) cudaFreeHost(pinned_logits);
  if (pinned_tokens != nullptr) cudaFreeHost(pinned_tokens);
  if (cublas != nullptr) cublasDestroy(cublas);
  if (stream != nullptr) cudaStreamDestroy(stream);
}

namespace {

size_t elem_bytes(kc::HalfType) { return 2; }

}  // namespace

Result<std::unique_ptr<CudaEngine>> CudaEngine::create(const Model& model, const CudaEngineOptions& o) {
  // Options and model first (pure checks), then the device.
  if (!(o.memory_fraction > 0.0f && o.memory_fraction <= 1.0f)) {
    return make_error(ErrorCode::kInvalidArgument, "CUDA backend: memory_fraction must be in (0, 1]");
  }
  if (o.page_size <= 0 || o.max_batch_tokens <= 0 || o.max_seqs <= 0 || o.num_pages < 0 || o.max_context < 0) {
    return make_error(ErrorCode::kInvalidArgument, "CUDA backend: page_size, max_batch_tokens and max_seqs must be positive");
  }
  TS_TRY(check_model(model));
  TS_TRY(check_plain_llama(model.config(), "CUDA backend"));
  const ModelConfig& c = model.config();
  if (c.head_dim > kc::kMaxHeadDim) {
    return make_error(ErrorCode::kUnsupported, "not implemented yet: CUDA attention with head_dim " + std::to_string(c.head_dim) +
                                                   " > " + std::to_string(kc::kMaxHeadDim));
  }
  if (c.n_heads / c.n_kv_heads > kc::kMaxGroup) {
    return make_error(ErrorCode::kUnsupported, "not implemented yet: CUDA decode attention with more than " +
                                                   std::to_string(kc::kMaxGroup) + " query heads per KV head");
  }
  if (cuda_device_count() == 0) return make_error(ErrorCode::kUnavailable, "CUDA backend: no CUDA device is present");
  if (o.device < 0 || o.device >= cuda_device_count()) {
    return make_error(ErrorCode::kInvalidArgument, "CUDA backend: device " + std::to_string(o.device) + " does not exist");
  }
  auto im = std::make_unique<Impl>(model, o);
  TS_CUDA_TRY(cudaSetDevice(o.device));
  TS_CUDA_TRY(cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking));
  TS_CUBLAS_TRY(cublasCreate(&im->cublas));
  TS_CUBLAS_TRY(cublasSetStream(im->cublas, im->stream));
  int sms = 0;
  TS_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, o.device));
  im->num_sms = sms;
  TS_ASSIGN_OR_RETURN(im->w, cuda_backend::upload_weights(model, o.dtype, im->stream));

  const int64_t T = o.max_batch_tokens, S = o.max_seqs, dim = c.dim, hd = c.head_dim, hidden = c.hidden_dim;
  const int64_t q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd, eb = static_cast<int64_t>(elem_bytes(o.dtype));
  im->max_context = o.max_context > 0 ? o.max_context : std::max(c.max_seq_len, 4096);
  im->max_pages_per_seq = (im->max_context + o.page_size - 1) / o.page_size;
  im->max_tiles = static_cast<int32_t>(T + S);
  auto alloc = [](DeviceBuffer& b, int64_t bytes, const char* what) -> Status {
    TS_ASSIGN_OR_RETURN(b, DeviceBuffer::allocate(static_cast<size_t>(bytes), what));
    return ok_status();
  };
  TS_TRY(alloc(im->x, T * dim * 4, "x"));
  TS_TRY(alloc(im->xn, T * dim * eb, "xn"));
  TS_TRY(alloc(im->qkv, T * (q_dim + 2 * kv_dim) * 4, "qkv"));
  TS_TRY(alloc(im->att, T * q_dim * eb, "att"));
  TS_TRY(alloc(im->o, T * dim * 4, "o"));
  TS_TRY(alloc(im->gu, T * 2 * hidden * 4, "gate_up"));
  TS_TRY(alloc(im->h, T * hidden * eb, "h"));
  TS_TRY(alloc(im->xs, S * dim * eb, "xs"));
  TS_TRY(alloc(im->logits, S * c.vocab_size * 4, "logits"));
  TS_TRY(alloc(im->out_tokens, S * 4, "out_tokens"));
  size_t ws = 0;
  for (int32_t b = 1; b <= S; ++b) {
    const int32_t splits = kc::choose_decode_splits(b, c.n_kv_heads, im->max_context, im->num_sms);
    ws = std::max(ws, kc::decode_workspace_floats(b, c.n_heads, c.head_dim, splits));
  }
  const size_t attn_ws = (ws * 4 + 255) / 256 * 256;  // cuBLAS wants its workspace 256-byte aligned
  const size_t cublas_ws = size_t{32} << 20;
  TS_TRY(alloc(im->workspace, static_cast<int64_t>(attn_ws + cublas_ws), "attention + cuBLAS workspace"));
  TS_CUBLAS_TRY(cublasSetWorkspace(im->cublas, im->workspace.get<uint8_t>() + attn_ws, cublas_ws));
  // Meta: int32 arrays, then the int64 slots (8-byte aligned).
  const int64_t n_i32 = 2 * T + 2 * (S + 1) + S + S * im->max_pages_per_seq + S + 2 * im->max_tiles;
  const int64_t i32_bytes = (n_i32 * 4 + 7) / 8 * 8;
  im->meta_bytes = static_cast<size_t>(i32_bytes + T * 8);
  TS_TRY(alloc(im->meta, static_cast<int64_t>(im->meta_bytes), "step meta"));
  int32_t* p = im->meta.get<int32_t>();
  auto take = [&p](int64_t n) {
    int32_t* r = p;
    p += n;
    return r;
  };
  im->d_tokens = take(T);
  im->d_positions = take(T);
  im->d_token_indptr = take(S + 1);
  im->d_page_indptr = take(S + 1);
  im->d_start_pos = take(S);
  im->d_page_ids = take(S * im->max_pages_per_seq);
  im->d_out_rows = take(S);
  im->d_tile_seq = take(im->max_tiles);
  im->d_tile_row = take(im->max_tiles);
  im->d_slots = reinterpret_cast<int64_t*>(im->meta.get<uint8_t>() + i32_bytes);
  TS_CUDA_TRY(cudaMallocHost(&im->pinned_meta, im->meta_bytes));
  TS_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&im->pinned_logits), static_cast<size_t>(S * c.vocab_size) * 4));
  TS_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&im->pinned_tokens), static_cast<size_t>(S) * 4));

  // The page pool: what is left of memory_fraction of the device after weights and scratch.
  const size_t page_bytes = 2 * static_cast<size_t>(o.page_size) * static_cast<size_t>(kv_dim) * elem_bytes(o.dtype);
  const size_t all_layers = page_bytes * static_cast<size_t>(c.n_layers);
  int64_t pages = o.num_pages;
  if (pages == 0) {
    size_t free_b = 0, total_b = 0;
    TS_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    const double budget = static_cast<double>(o.memory_fraction) * static_cast<double>(total_b) - static_cast<double>(total_b - free_b);
    pages = budget > 0 ? static_cast<int64_t>(budget / static_cast<double>(all_layers)) : 0;
    pages = std::min<int64_t>(pages, 0x7fffffff / std::max(1, o.page_size));
  }
  if (pages < 1) {
    return make_error(ErrorCode::kResourceExhausted, "CUDA backend: no room for K/V pages within memory_fraction " +
                                                         std::to_string(o.memory_fraction) + " after " +
                                                         std::to_string(im->w.bytes) + " bytes of weights");
  }
  im->num_pages = static_cast<int32_t>(pages);
  TS_ASSIGN_OR_RETURN(im->pool, DeviceBuffer::allocate(all_layers * static_cast<size_t>(pages), "K/V page pool"));
  TS_CUDA_TRY(cudaMemsetAsync(im->pool.get(), 0, im->pool.bytes(), im->stream));
  for (int32_t l = 0; l < c.n_layers; ++l) {
    im->kv_layers.push_back(im->pool.get<uint8_t>() + static_cast<size_t>(l) * page_bytes * static_cast<size_t>(pages));
  }
  TS_CUDA_TRY(cudaStreamSynchronize(im->stream));
  im->backend = make_cuda_backend(*im);
  im->executor = std::make_unique<StepExecutor>(*im->backend);
  TS_LOG(kInfo) << "cuda engine: device " << o.device << ", " << kc::half_type_name(o.dtype) << " weights "
                << im->w.bytes / (1 << 20) << " MiB, " << im->num_pages << " pages of " << o.page_size << " ("
                << im->pool.bytes() / (1 << 20) << " MiB)";
  return std::unique_ptr<CudaEngine>(new CudaEngine(std::move(im)));
}

CudaEngine::CudaEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaEngine::~CudaEngine() = default;
const Model& CudaEngine::model() const { return impl_->model; }
int32_t CudaEngine::num_pages() const { return impl_->num_pages; }
int32_t CudaEngine::page_size() const { return impl_->opt.page_size; }
size_t CudaEngine::weight_bytes() const { return impl_->w.bytes; }
size_t CudaEngine::pool_bytes() const { return impl_->pool.bytes(); }
int32_t CudaEngine::graphs_captured() const { return static_cast<int32_t>(impl_->graphs.size()); }

Status CudaEngine::Impl::gemm(const void* wt, int64_t rows, int64_t cols, const void* xin, int64_t n, float* y) {
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t t = opt.dtype == kc::HalfType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
  // Row-major Y[n, rows] = X[n, cols] W[rows, cols]^T, i.e. column-major Y^T = W^T' X^T.
  TS_CUBLAS_TRY(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(n),
                             static_cast<int>(cols), &alpha, wt, t, static_cast<int>(cols), xin, t, static_cast<int>(cols),
                             &beta, y, CUDA_R_32F, static_cast<int>(rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return ok_status();
}

Status CudaEngine::Impl::enqueue_forward(int32_t T, int32_t S, int32_t n_tiles, int32_t n_out, bool decode_only) {
  const ModelConfig& c = cfg;
  const int64_t dim = c.dim, hd = c.head_dim, hidden = c.hidden_dim;
  const int64_t q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd, qkv_w = q_dim + 2 * kv_dim;
  const kc::HalfType dt = opt.dtype;
  float* xp = x.get<float>();
  float* op = o.get<float>();
  float* qkvp = qkv.get<float>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  TS_CUDA_TRY(kc::embedding_gather(dt, w.embeddings, dim, d_tokens, T, xp, stream));
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const cuda_backend::DeviceLayer& L = w.layers[static_cast<size_t>(l)];
    TS_CUDA_TRY(kc::rmsnorm_residual(xp, l == 0 ? nullptr : op, L.attn_norm, dt, xn.get(), T, dim, c.rms_eps, stream));
    TS_TRY(gemm(L.wqkv, qkv_w, dim, xn.get(), T, qkvp));
    TS_CUDA_TRY(kc::rope_write_kv({.qkv = qkvp, .qkv_stride = qkv_w, .bias = L.bqkv, .n_tokens = T, .n_heads = c.n_heads,
                                   .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim, .positions = d_positions,
                                   .slots = d_slots, .kv_type = dt, .kv = kv_layers[static_cast<size_t>(l)],
                                   .page_size = opt.page_size, .theta = c.rope_theta,
                                   .interleaved = c.rope_layout == RopeLayout::kInterleaved},
                                  stream));
    const kc::PagedKvView view{.kv_type = dt, .kv = kv_layers[static_cast<size_t>(l)], .page_size = opt.page_size,
                               .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim, .page_indptr = d_page_indptr,
                               .page_ids = d_page_ids};
    if (decode_only) {
      const int32_t splits = kc::choose_decode_splits(S, c.n_kv_heads, max_context, num_sms);
      TS_CUDA_TRY(kc::decode_attention({.q = qkvp, .q_stride = qkv_w, .out = att.get(), .out_stride = q_dim, .kv = view,
                                        .n_heads = c.n_heads, .scale = scale, .n_seqs = S, .positions = d_positions,
                                        .n_splits = splits, .workspace = workspace.get<float>()},
                                       stream));
    } else {
      TS_CUDA_TRY(kc::prefill_attention({.q = qkvp, .q_stride = qkv_w, .out = att.get(), .out_stride = q_dim, .kv = view,
                                         .n_heads = c.n_heads, .scale = scale, .n_seqs = S, .token_indptr = d_token_indptr,
                                         .start_pos = d_start_pos, .n_tiles = n_tiles, .tile_seq = d_tile_seq,
                                         .tile_row = d_tile_row},
                                        stream));
    }
    TS_TRY(gemm(L.wo, dim, q_dim, att.get(), T, op));
    if (comm != nullptr) TS_TRY(comm->all_reduce_sum(op, static_cast<size_t>(T * dim), stream));
    TS_CUDA_TRY(kc::rmsnorm_residual(xp, op, L.ffn_norm, dt, xn.get(), T, dim, c.rms_eps, stream));
    TS_TRY(gemm(L.wgu, 2 * hidden, dim, xn.get(), T, gu.get<float>()));
    TS_CUDA_TRY(kc::swiglu(gu.get<float>(), T, hidden, dt, h.get(), stream));
    TS_TRY(gemm(L.wdown, dim, hidden, h.get(), T, op));
    if (comm != nullptr) TS_TRY(comm->all_reduce_sum(op, static_cast<size_t>(T * dim), stream));
  }
  if (n_out == 0) return ok_status();
  TS_CUDA_TRY(kc::rmsnorm_residual(xp, op, w.final_norm, dt, xn.get(), T, dim, c.rms_eps, stream));
  TS_CUDA_TRY(kc::gather_rows(dt, xn.get(), dim, d_out_rows, n_out, xs.get(), stream));
  return gemm(w.output, c.vocab_size, dim, xs.get(), n_out, logits.get<float>());
}

Status CudaEngine::Impl::build_meta(std::span<const SeqInput> batch) {
  cuda_backend::StepMeta& s = m;
  s.tokens.clear();
  s.positions.clear();
  s.slots.clear();
  s.start_pos.clear();
  s.page_ids.clear();
  s.out_rows.clear();
  s.tile_seq.clear();
  s.tile_row.clear();
  s.token_indptr.assign(1, 0);
  s.page_indptr.assign(1, 0);
  s.decode_only = true;
  for (const SeqInput& in : batch) {
    for (size_t i = 0; i < in.tokens.size(); ++i) {
      s.tokens.push_back(in.tokens[i]);
      s.positions.push_back(in.start_pos + static_cast<int32_t>(i));
      s.slots.push_back(in.slot_mapping[i]);
    }
    const int64_t end = in.start_pos + static_cast<int64_t>(in.tokens.size());
    const int64_t np = (end + opt.page_size - 1) / opt.page_size;
    s.page_ids.insert(s.page_ids.end(), in.block_table.begin(), in.block_table.begin() + np);
    s.page_indptr.push_back(static_cast<int32_t>(s.page_ids.size()));
    s.token_indptr.push_back(static_cast<int32_t>(s.tokens.size()));
    s.start_pos.push_back(in.start_pos);
    if (in.tokens.size() != 1) s.decode_only = false;
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].want_logits) s.out_rows.push_back(s.token_indptr[i + 1] - 1);
  }
  if (s.decode_only) {
    // Decode graphs compute every row's logits (the batch size is the only captured shape).
    s.out_rows.clear();
    for (size_t i = 0; i < batch.size(); ++i) s.out_rows.push_back(static_cast<int32_t>(i));
  } else {
    kc::build_prefill_tiles(s.token_indptr.data(), static_cast<int32_t>(batch.size()),
                            kc::prefill_tile_tokens(cfg.n_heads / cfg.n_kv_heads), s.tile_seq, s.tile_row);
  }
  return ok_status();
}

Status CudaEngine::Impl::upload_meta() {
  // Stage each used segment in the pinned buffer at its device offset, then copy it.
  auto* base = static_cast<uint8_t*>(pinned_meta);
  auto put = [&](const auto& v, const void* dev) -> Status {
    if (v.empty()) return ok_status();
    const size_t off = static_cast<const uint8_t*>(dev) - meta.get<uint8_t>();
    const size_t bytes = v.size() * sizeof(v[0]);
    std::memcpy(base + off, v.data(), bytes);
    TS_CUDA_TRY(cudaMemcpyAsync(const_cast<void*>(dev), base + off, bytes, cudaMemcpyHostToDevice, stream));
    return ok_status();
  };
  TS_TRY(put(m.tokens, d_tokens));
  TS_TRY(put(m.positions, d_positions));
  TS_TRY(put(m.token_indptr, d_token_indptr));
  TS_TRY(put(m.page_indptr, d_page_indptr));
  TS_TRY(put(m.start_pos, d_start_pos));
  TS_TRY(put(m.page_ids, d_page_ids));
  TS_TRY(put(m.out_rows, d_out_rows));
  TS_TRY(put(m.tile_seq, d_tile_seq));
  TS_TRY(put(m.tile_row, d_tile_row));
  TS_TRY(put(m.slots, d_slots));
  return ok_status();
}

Status CudaEngine::Impl::launch(std::span<const SeqInput> batch) {
  TS_CUDA_TRY(cudaSetDevice(opt.device));
  TS_TRY(build_meta(batch));
  TS_TRY(upload_meta());
  const auto T = static_cast<int32_t>(m.tokens.size()), S = static_cast<int32_t>(batch.size());
  const auto n_out = static_cast<int32_t>(m.out_rows.size());
  if (m.decode_only && opt.cuda_graphs) {
    auto it = graphs.find(S);
    if (it == graphs.end()) {
      cudaGraph_t graph = nullptr;
      TS_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      Status st = enqueue_forward(T, S, 0, n_out, true);
      const cudaError_t end = cudaStreamEndCapture(stream, &graph);
      TS_TRY(st);
      TS_TRY(cuda_backend::cuda_status(end, "cudaStreamEndCapture"));
      cudaGraphExec_t exec = nullptr;
      const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      TS_TRY(cuda_backend::cuda_status(inst, "cudaGraphInstantiate"));
      it = graphs.emplace(S, exec).first;
    }
    TS_CUDA_TRY(cudaGraphLaunch(it->second, stream));
  } else {
    TS_TRY(enqueue_forward(T, S, static_cast<int32_t>(m.tile_seq.size()), n_out, m.decode_only));
  }
  return ok_status();
}

Result<std::vector<int32_t>> CudaEngine::Impl::run_greedy(std::span<const SeqInput> batch) {
  TS_TRY(launch(batch));
  const auto n_out = static_cast<int32_t>(m.out_rows.size());
  TS_CUDA_TRY(kc::argmax_rows(logits.get<float>(), cfg.vocab_size, cfg.vocab_size, n_out, out_tokens.get<int32_t>(), stream));
  TS_CUDA_TRY(cudaMemcpyAsync(pinned_tokens, out_tokens.get(), static_cast<size_t>(n_out) * 4, cudaMemcpyDeviceToHost, stream));
  TS_CUDA_TRY(cudaStreamSynchronize(stream));
  // One token per sequence that asked for logits, in batch order (decode steps computed all rows).
  std::vector<int32_t> out;
  for (size_t i = 0, row = 0; i < batch.size(); ++i) {
    if (m.decode_only) row = i;
    if (batch[i].want_logits) out.push_back(pinned_tokens[row++]);
  }
  return out;
}

Result<std::span<float>> CudaEngine::Impl::run(std::span<const SeqInput> batch) {
  TS_TRY(launch(batch));
  const auto n_out = static_cast<int32_t>(m.out_rows.size());
  if (n_out == 0) {
    TS_CUDA_TRY(cudaStreamSynchronize(stream));
    return std::span<float>{};
  }
  // Logits of the sequences that asked for them, in batch order.
  const size_t vocab = static_cast<size_t>(cfg.vocab_size);
  if (m.decode_only) {
    size_t row = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!batch[i].want_logits) continue;
      TS_CUDA_TRY(cudaMemcpyAsync(pinned_logits + row * vocab, logits.get<float>() + i * vocab, vocab * 4,
                                  cudaMemcpyDeviceToHost, stream));
      ++row;
    }
    TS_CUDA_TRY(cudaStreamSynchronize(stream));
    return std::span<float>(pinned_logits, row * vocab);
  }
  TS_CUDA_TRY(cudaMemcpyAsync(pinned_logits, logits.get(), static_cast<size_t>(n_out) * vocab * 4, cudaMemcpyDeviceToHost,
                              stream));
  TS_CUDA_TRY(cudaStreamSynchronize(stream));
  return std::span<float>(pinned_logits, static_cast<size_t>(n_out) * vocab);
}

Status CudaEngine::Impl::copy_page(int32_t src, int32_t dst) {
  const size_t page_bytes = 2 * static_cast<size_t>(opt.page_size) * static_cast<size_t>(cfg.n_kv_heads * cfg.head_dim) * 2;
  for (void* layer : kv_layers) {
    auto* b = static_cast<uint8_t*>(layer);
    TS_CUDA_TRY(cudaMemcpyAsync(b + static_cast<size_t>(dst) * page_bytes, b + static_cast<size_t>(src) * page_bytes,
                                page_bytes, cudaMemcpyDeviceToDevice, stream));
  }
  return ok_status();
}

}  // namespace tessera::worker
