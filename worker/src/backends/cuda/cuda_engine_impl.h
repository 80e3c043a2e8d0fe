// Private: the CUDA engine's state, device buffers and error conversion (see cuda_backend.h).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/kernels/cuda/types.h"
#include "tessera/worker/cuda_backend.h"

namespace tessera::worker::cuda_backend {

// Converts a CUDA/cuBLAS status to a Status naming the call (the one conversion point).
Status cuda_status(cudaError_t e, const char* what);
Status cublas_status(cublasStatus_t s, const char* what);
#define TS_CUDA_TRY(call) TS_TRY(::tessera::worker::cuda_backend::cuda_status((call), #call))
#define TS_CUBLAS_TRY(call) TS_TRY(::tessera::worker::cuda_backend::cublas_status((call), #call))

// Owning device allocation (cudaMalloc / cudaFree); movable, not copyable.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr, o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  static Result<DeviceBuffer> allocate(size_t bytes, const std::string& what);
  template <class T = void>
  T* get() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// The device all-reduce seam for tensor parallelism (NCCL); nullptr when world == 1.
class DeviceComm {
 public:
  virtual ~DeviceComm() = default;
  // In-place sum of n floats at `data` (device) across ranks, enqueued on `stream`.
  virtual Status all_reduce_sum(float* data, size_t n, cudaStream_t stream) = 0;
};

struct DeviceLayer {
  float* attn_norm = nullptr;  // [dim]
  float* ffn_norm = nullptr;   // [dim]
  void* wqkv = nullptr;        // [q_dim + 2 kv_dim, dim] half
  float* bqkv = nullptr;       // [q_dim + 2 kv_dim] or nullptr
  void* wo = nullptr;          // [dim, q_dim] half
  void* wgu = nullptr;         // [2 hidden, dim] half (gate rows, then up rows)
  void* wdown = nullptr;       // [dim, hidden] half
};

struct DeviceWeights {
  std::vector<DeviceBuffer> buffers;  // owns everything below
  void* embeddings = nullptr;         // [vocab, dim] half
  void* output = nullptr;             // [vocab, dim] half (== embeddings when tied)
  float* final_norm = nullptr;        // [dim]
  std::vector<DeviceLayer> layers;
  size_t bytes = 0;
};

Result<DeviceWeights> upload_weights(const Model& model, kernels::cuda::HalfType dtype, cudaStream_t stream);

// Host-built description of one step, uploaded in one copy (see Meta in cuda_engine.cpp).
struct StepMeta {
  std::vector<int32_t> tokens, positions, token_indptr, start_pos, page_indptr, page_ids, out_rows, tile_seq, tile_row;
  std::vector<int64_t> slots;
  bool decode_only = false;
};

}  // namespace tessera::worker::cuda_backend

namespace tessera::worker {

struct CudaEngine::Impl {
  const Model& model;
  ModelConfig cfg;
  CudaEngineOptions opt;
  int32_t num_pages = 0;
  int32_t max_context = 0;
  int32_t num_sms = 0;
  int32_t decode_splits = 1;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cuda_backend::DeviceComm* comm = nullptr;  // not owned; tensor parallelism only
  cuda_backend::DeviceWeights w;
  std::vector<void*> kv_layers;  // per layer [num_pages, 2, page_size, n_kv, hd] half
  cuda_backend::DeviceBuffer pool;
  // Scratch (sized for max_batch_tokens / max_seqs).
  cuda_backend::DeviceBuffer x, xn, qkv, att, o, gu, h, logits, xs, workspace, meta, out_tokens;
  void* pinned_meta = nullptr;    // host staging of the step meta (cudaMallocHost)
  float* pinned_logits = nullptr;  // host copy of the logits
  int32_t* pinned_tokens = nullptr;
  size_t meta_bytes = 0;
  // Device views into `meta`.
  int32_t *d_tokens = nullptr, *d_positions = nullptr, *d_token_indptr = nullptr, *d_start_pos = nullptr,
          *d_page_indptr = nullptr, *d_page_ids = nullptr, *d_out_rows = nullptr, *d_tile_seq = nullptr,
          *d_tile_row = nullptr;
  int64_t* d_slots = nullptr;
  int32_t max_pages_per_seq = 0, max_tiles = 0;
  std::map<int32_t, cudaGraphExec_t> graphs;  // decode batch size -> captured forward
  cuda_backend::StepMeta m;  // reused
  std::unique_ptr<Backend> backend;     // the "cuda" entry points over this Impl (cuda_execute.cpp)
  std::unique_ptr<StepExecutor> executor;  // borrows *backend

  Impl(const Model& mod, const CudaEngineOptions& options) : model(mod), cfg(mod.config()), opt(options) {}
  ~Impl();

  Status build_meta(std::span<const SeqInput> batch);
  Status upload_meta();
  // Enqueues the forward of the uploaded step on `stream`; n_out rows of logits.
  Status enqueue_forward(int32_t n_tokens, int32_t n_seqs, int32_t n_tiles, int32_t n_out, bool decode_only);
  Status gemm(const void* w, int64_t rows, int64_t cols, const void* x, int64_t n, float* y);
  // Uploads the step and enqueues its forward (graph replay for decode-only steps).
  Status launch(std::span<const SeqInput> batch);
  // launch + copy back the logits rows of the sequences with want_logits.
  Result<std::span<float>> run(std::span<const SeqInput> batch);
  // launch + device argmax: one token per sequence with want_logits, no logits copy.
  Result<std::vector<int32_t>> run_greedy(std::span<const SeqInput> batch);
  Status copy_page(int32_t src, int32_t dst);
};

// The "cuda" Backend over one engine's state (which must outlive it).
std::unique_ptr<Backend> make_cuda_backend(CudaEngine::Impl& impl);

}  // namespace tessera::worker
