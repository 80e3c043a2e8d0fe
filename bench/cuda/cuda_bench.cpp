// CUDA benchmarks (docs/cuda.md has the commands):
//   cuda_bench attention [--batch B] [--context L] [--peak-gbs G]
//       paged decode attention, Llama-3-8B heads (32 query / 8 KV heads, head_dim 128, bf16,
//       pages of 16): bytes of K/V read per second against the device's peak bandwidth.
//   cuda_bench decode [--peak-gbs G]
//       batch-1 decode step of a synthesized ~1.1B Llama (dim 2048, 16 layers, 32/8 heads,
//       hidden 8192, vocab 32000, bf16) through CudaEngine::forward (CUDA graph), against
//       the bound weight bytes / peak bandwidth.
//   cuda_bench throughput [--context L]
//       decode tokens/s of the same model at batch sizes 1, 2, 4, ... 256.
// Peak bandwidth defaults to 2 * memory clock * bus width from the device attributes; pass
// --peak-gbs for the vendor's figure (H100 SXM 3350, H200 4800).
#include <cuda_runtime.h>  // typed cudaMalloc overloads

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "synth_model.h"
#include "tessera/common/config.h"
#include "tessera/kernels/cuda/attention.h"
#include "tessera/worker/cuda_backend.h"

namespace {

using tessera::kernels::cuda::HalfType;
namespace kc = tessera::kernels::cuda;

#define CHECK_CUDA(call)                                                                    \
  do {                                                                                      \
    const cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_));               \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

struct Args {
  std::string mode;
  int batch = 64;
  int context = 4096;
  double peak_gbs = 0.0;
};

double device_peak_gbs() {
  int clock_khz = 0, bus_bits = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
  return 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
}

int bench_attention(const Args& a) {
  const int n_heads = 32, n_kv = 8, hd = 128, ps = 16, B = a.batch, L = a.context;
  const int pages_per_seq = (L + ps - 1) / ps, num_pages = B * pages_per_seq;
  const size_t pool_bytes = static_cast<size_t>(num_pages) * 2 * ps * n_kv * hd * 2;
  void* kv = nullptr;
  float *q = nullptr, *ws = nullptr;
  void* out = nullptr;
  int32_t *indptr = nullptr, *ids = nullptr, *pos = nullptr;
  CHECK_CUDA(cudaMalloc(&kv, pool_bytes));
  CHECK_CUDA(cudaMemset(kv, 0, pool_bytes));
  CHECK_CUDA(cudaMalloc(&q, static_cast<size_t>(B) * n_heads * hd * 4));
  CHECK_CUDA(cudaMemset(q, 0, static_cast<size_t>(B) * n_heads * hd * 4));
  CHECK_CUDA(cudaMalloc(&out, static_cast<size_t>(B) * n_heads * hd * 2));
  std::vector<int32_t> h_indptr(static_cast<size_t>(B) + 1), h_ids(static_cast<size_t>(num_pages)), h_pos(static_cast<size_t>(B), L - 1);
  for (int s = 0; s <= B; ++s) h_indptr[static_cast<size_t>(s)] = s * pages_per_seq;
  std::iota(h_ids.begin(), h_ids.end(), 0);
  std::shuffle(h_ids.begin(), h_ids.end(), std::mt19937_64(1));
  CHECK_CUDA(cudaMalloc(&indptr, h_indptr.size() * 4));
  CHECK_CUDA(cudaMalloc(&ids, h_ids.size() * 4));
  CHECK_CUDA(cudaMalloc(&pos, h_pos.size() * 4));
  CHECK_CUDA(cudaMemcpy(indptr, h_indptr.data(), h_indptr.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(ids, h_ids.data(), h_ids.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(pos, h_pos.data(), h_pos.size() * 4, cudaMemcpyHostToDevice));
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int splits = kc::choose_decode_splits(B, n_kv, L, sms);
  CHECK_CUDA(cudaMalloc(&ws, kc::decode_workspace_floats(B, n_heads, hd, splits) * 4));
  const kc::DecodeAttentionArgs args{
      .q = q, .q_stride = n_heads * hd, .out = out, .out_stride = n_heads * hd,
      .kv = {.kv_type = HalfType::kBF16, .kv = kv, .page_size = ps, .n_kv_heads = n_kv, .head_dim = hd,
             .page_indptr = indptr, .page_ids = ids},
      .n_heads = n_heads, .scale = 0.088f, .n_seqs = B, .positions = pos, .n_splits = splits, .workspace = ws};
  for (int i = 0; i < 3; ++i) CHECK_CUDA(kc::decode_attention(args, nullptr));
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  const int iters = 50;
  cudaEventRecord(t0);
  for (int i = 0; i < iters; ++i) CHECK_CUDA(kc::decode_attention(args, nullptr));
  cudaEventRecord(t1);
  CHECK_CUDA(cudaEventSynchronize(t1));
  float ms = 0;
  cudaEventElapsedTime(&ms, t0, t1);
  const double sec = ms / 1e3 / iters;
  const double bytes = static_cast<double>(B) * L * 2 * n_kv * hd * 2;  // K and V read once
  const double gbs = bytes / sec / 1e9, peak = a.peak_gbs > 0 ? a.peak_gbs : device_peak_gbs();
  std::printf("decode attention: batch %d context %d splits %d: %.1f us, %.0f GB/s = %.1f%% of %.0f GB/s peak\n", B, L,
              splits, sec * 1e6, gbs, 100.0 * gbs / peak, peak);
  return 0;
}

tessera::worker::testing::SynthSpec one_b_spec() {
  tessera::worker::testing::SynthSpec s;
  s.dim = 2048;
  s.hidden_dim = 8192;
  s.n_layers = 16;
  s.n_heads = 32;
  s.n_kv_heads = 8;
  s.head_dim = 64;
  s.vocab_size = 32000;
  s.dtype = tessera::DType::kBF16;
  s.rope_layout = tessera::RopeLayout::kHalves;
  return s;
}

// Decode steps of `batch` sequences at context `context`; returns seconds per step.
double decode_steps(tessera::worker::CudaEngine& e, int batch, int context, int steps) {
  const int ps = e.page_size(), pages = (context + steps + ps) / ps;
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(batch));
  for (int s = 0; s < batch; ++s) {
    for (int p = 0; p < pages; ++p) tables[static_cast<size_t>(s)].push_back((s * pages + p) % e.num_pages());
  }
  std::vector<int32_t> tok(static_cast<size_t>(batch), 7);
  std::vector<std::vector<int64_t>> slots(static_cast<size_t>(batch), std::vector<int64_t>(1));
  std::vector<tessera::worker::SeqInput> in(static_cast<size_t>(batch));
  auto run = [&](int pos) {
    for (int s = 0; s < batch; ++s) {
      const auto& t = tables[static_cast<size_t>(s)];
      slots[static_cast<size_t>(s)][0] = static_cast<int64_t>(t[static_cast<size_t>(pos / ps)]) * ps + pos % ps;
      in[static_cast<size_t>(s)] = {.tokens = std::span<const int32_t>(tok).subspan(static_cast<size_t>(s), 1), .start_pos = pos,
                                    .block_table = t, .slot_mapping = slots[static_cast<size_t>(s)], .want_logits = true};
    }
    auto r = e.forward(in);
    if (!r.ok()) std::fprintf(stderr, "forward: %s\n", r.error().to_string().c_str());
  };
  run(context);  // captures the graph for this batch size
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i <= steps; ++i) run(context + i);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
}

int bench_model(const Args& a) {
  std::printf("synthesizing the ~1.1B model (bf16) ...\n");
  tessera::worker::testing::SynthModel model(one_b_spec());
  auto e = tessera::worker::CudaEngine::create(
      model, {.dtype = HalfType::kBF16, .memory_fraction = 0.85f, .max_batch_tokens = 2048, .max_seqs = 256,
              .max_context = 8192});
  if (!e.ok()) {
    std::fprintf(stderr, "%s\n", e.error().to_string().c_str());
    return 1;
  }
  const double weight_gb = static_cast<double>((*e)->weight_bytes()) / 1e9;
  const double peak = a.peak_gbs > 0 ? a.peak_gbs : device_peak_gbs();
  if (a.mode == "decode") {
    const double sec = decode_steps(**e, 1, 128, 100);
    const double bound = weight_gb / peak;
    std::printf("batch-1 decode step: %.1f us; weights %.2f GB / %.0f GB/s = %.1f us bound -> %.1f%% of the bound\n", sec * 1e6,
                weight_gb, peak, bound * 1e6, 100.0 * bound / sec);
  } else {
    for (int b = 1; b <= 256; b *= 2) {
      const double sec = decode_steps(**e, b, a.context, 20);
      std::printf("batch %3d context %d: %.2f ms/step, %.0f tokens/s\n", b, a.context, sec * 1e3, b / sec);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  tessera::config::Options options("cuda_bench", "cuda-bench");
  options.add(a.mode, {.name = "mode", .help = "attention, decode or throughput (required; may be given positionally)"});
  options.add(a.batch, {.name = "batch", .help = "attention: sequences", .min = 1, .max = 1 << 20});
  options.add(a.context, {.name = "context", .help = "attention / throughput: context length", .min = 1, .max = 1 << 24});
  options.add(a.peak_gbs, {.name = "peak-gbs", .help = "memory bandwidth to compare with (0 = from the device's clocks)",
                           .min = 0, .max = 1e6});
  options.positional("mode");
  options.describe("CUDA attention, batch-1 decode and decode-throughput benchmarks (needs a GPU)");
  if (auto exit_code = tessera::config::parse_command_line(options, std::vector<std::string>(argv + 1, argv + argc)))
    return *exit_code;
  if (a.mode.empty()) {
    std::fprintf(stderr, "usage: cuda_bench attention|decode|throughput [--batch B] [--context L] [--peak-gbs G]\n");
    return 2;
  }
  if (tessera::worker::cuda_device_count() == 0) {
    std::fprintf(stderr, "cuda_bench: no CUDA device\n");
    return 1;
  }
  if (a.mode == "attention") return bench_attention(a);
  if (a.mode == "decode" || a.mode == "throughput") return bench_model(a);
  std::fprintf(stderr, "unknown mode %s\n", a.mode.c_str());
  return 2;
}
