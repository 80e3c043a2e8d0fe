// Device buffers, CUDA error conversion and the weight upload; see cuda_engine_impl.h.
#include <cstring>
#include <string>

#include "cuda_engine_impl.h"
#include "tessera/kernels/cuda/ops.h"

namespace tessera::worker::cuda_backend {

using kernels::cuda::HalfType;

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return ok_status();
  return make_error(ErrorCode::kInternal, std::string("CUDA: ") + what + " failed: " + cudaGetErrorName(e) + " (" +
                                              cudaGetErrorString(e) + ")");
}

Status cublas_status(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return ok_status();
  return make_error(ErrorCode::kInternal, std::string("cuBLAS: ") + what + " failed: " + cublasGetStatusName(s));
}

DeviceBuffer::~DeviceBuffer() {
  if (p_ != nullptr) cudaFree(p_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_ != nullptr) cudaFree(p_);
    p_ = o.p_;
    bytes_ = o.bytes_;
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

Result<DeviceBuffer> DeviceBuffer::allocate(size_t bytes, const std::string& what) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  const cudaError_t e = cudaMalloc(&b.p_, bytes);
  if (e != cudaSuccess) {
    return make_error(ErrorCode::kResourceExhausted, "CUDA: cannot allocate " + std::to_string(bytes) + " bytes for " + what +
                                                         ": " + cudaGetErrorString(e));
  }
  b.bytes_ = bytes;
  return b;
}

namespace {

size_t half_bytes(int64_t rows, int64_t cols) { return static_cast<size_t>(rows) * static_cast<size_t>(cols) * 2; }

struct Uploader {
  DeviceWeights& w;
  HalfType dtype;
  cudaStream_t stream;
  DeviceBuffer staging;

  Result<void*> alloc(size_t bytes, const std::string& what) {
    TS_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(bytes, what));
    void* p = b.get();
    w.bytes += bytes;
    w.buffers.push_back(std::move(b));
    return p;
  }

  // Converts tensor t into dst (rows x cols of dtype), through a device staging copy.
  Status convert(const Tensor& t, void* dst, const std::string& what) {
    const size_t src_bytes = dtype_row_bytes(t.dtype, t.cols) * static_cast<size_t>(t.rows);
    if (staging.bytes() < src_bytes) {
      TS_CUDA_TRY(cudaStreamSynchronize(stream));  // the old staging buffer may still be read
      TS_ASSIGN_OR_RETURN(staging, DeviceBuffer::allocate(src_bytes, "weight staging"));
    } else {
      TS_CUDA_TRY(cudaStreamSynchronize(stream));  // previous conversion done before overwriting
    }
    // Stream-ordered: the conversion kernel below runs after the copy (a plain cudaMemcpy from
    // pageable memory may return before its DMA lands, and runs on the legacy stream).
    TS_CUDA_TRY(cudaMemcpyAsync(staging.get(), t.data, src_bytes, cudaMemcpyHostToDevice, stream));
    const cudaError_t e = kernels::cuda::convert_weights(t.dtype, staging.get(), t.rows, t.cols, dtype, dst, stream);
    if (e == cudaErrorInvalidValue) {
      return make_error(ErrorCode::kUnsupported, std::string("not implemented yet: CUDA upload of ") + dtype_name(t.dtype) +
                                                     " weights (tensor " + what + ")");
    }
    return cuda_status(e, "convert_weights");
  }

  Result<float*> f32(const Tensor& t, const std::string& what) {
    if (t.dtype != DType::kF32) return make_error(ErrorCode::kUnsupported, "CUDA upload: " + what + " must be f32");
    const size_t bytes = static_cast<size_t>(t.rows * t.cols) * sizeof(float);
    TS_ASSIGN_OR_RETURN(void* p, alloc(bytes, what));
    TS_CUDA_TRY(cudaMemcpyAsync(p, t.data, bytes, cudaMemcpyHostToDevice, stream));
    TS_CUDA_TRY(cudaStreamSynchronize(stream));  // t.data is the caller's; do not outlive the call
    return static_cast<float*>(p);
  }

  // Stacks tensors (same cols) row-wise into one [sum rows, cols] half matrix.
  Result<void*> stacked(std::initializer_list<const Tensor*> parts, const std::string& what) {
    int64_t rows = 0;
    const int64_t cols = (*parts.begin())->cols;
    for (const Tensor* t : parts) rows += t->rows;
    TS_ASSIGN_OR_RETURN(void* p, alloc(half_bytes(rows, cols), what));
    int64_t at = 0;
    for (const Tensor* t : parts) {
      TS_TRY(convert(*t, static_cast<uint8_t*>(p) + half_bytes(at, cols), what));
      at += t->rows;
    }
    return p;
  }
};

}  // namespace

Result<DeviceWeights> upload_weights(const Model& model, HalfType dtype, cudaStream_t stream) {
  const ModelConfig& c = model.config();
  DeviceWeights w;
  Uploader up{w, dtype, stream, {}};
  TS_ASSIGN_OR_RETURN(w.embeddings, up.stacked({&model.tok_embeddings}, "token_embd"));
  if (model.output.data == model.tok_embeddings.data && model.output.dtype == model.tok_embeddings.dtype) {
    w.output = w.embeddings;
  } else {
    TS_ASSIGN_OR_RETURN(w.output, up.stacked({&model.output}, "output"));
  }
  TS_ASSIGN_OR_RETURN(w.final_norm, up.f32(model.final_norm, "output_norm"));
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = model.layers[static_cast<size_t>(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    DeviceLayer d;
    TS_ASSIGN_OR_RETURN(d.attn_norm, up.f32(lw.attn_norm, p + "attn_norm"));
    TS_ASSIGN_OR_RETURN(d.ffn_norm, up.f32(lw.ffn_norm, p + "ffn_norm"));
    TS_ASSIGN_OR_RETURN(d.wqkv, up.stacked({&lw.wq, &lw.wk, &lw.wv}, p + "attn_qkv"));
    TS_ASSIGN_OR_RETURN(d.wo, up.stacked({&lw.wo}, p + "attn_output"));
    TS_ASSIGN_OR_RETURN(d.wgu, up.stacked({&lw.w_gate, &lw.w_up}, p + "ffn_gate_up"));
    TS_ASSIGN_OR_RETURN(d.wdown, up.stacked({&lw.w_down}, p + "ffn_down"));
    if (c.attn_bias) {
      const int64_t nq = lw.bq.cols, nk = lw.bk.cols, nv = lw.bv.cols;
      std::vector<float> b(static_cast<size_t>(nq + nk + nv));
      std::memcpy(b.data(), lw.bq.f32(), static_cast<size_t>(nq) * 4);
      std::memcpy(b.data() + nq, lw.bk.f32(), static_cast<size_t>(nk) * 4);
      std::memcpy(b.data() + nq + nk, lw.bv.f32(), static_cast<size_t>(nv) * 4);
      TS_ASSIGN_OR_RETURN(void* bp, up.alloc(b.size() * 4, p + "attn_qkv.bias"));
      TS_CUDA_TRY(cudaMemcpyAsync(bp, b.data(), b.size() * 4, cudaMemcpyHostToDevice, stream));
      TS_CUDA_TRY(cudaStreamSynchronize(stream));  // b is a local vector
      d.bqkv = static_cast<float*>(bp);
    }
    w.layers.push_back(d);
  }
  TS_CUDA_TRY(cudaStreamSynchronize(stream));
  return w;
}

}  // namespace tessera::worker::cuda_backend
