// Load-time weight repack (CpuBackend::repack_weights, engine_impl.h): packed copies of the
// matmul weights (dense ones, and each routed expert's and the shared expert's) for the
// kernels' interleaved path (kernels/packed_weights.h).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

#include "engine_impl.h"
#include "tessera/kernels/isa.h"

namespace tessera::worker {

const kernels::PackedWeights* CpuBackend::packed_for(const Tensor& w) const {
  if (packed_.empty()) return nullptr;
  const auto it = packed_.find({w.data, w.rows});
  return it == packed_.end() ? nullptr : &it->second;
}

CpuBackend::RepackStats CpuBackend::repack_weights() {
  RepackStats st;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  auto add = [&](const Tensor& w) {
    if (w.empty() || packed_.count({w.data, w.rows}) > 0) return;
    const kernels::Isa isa = isa_for(w);
    if (!kernels::packed_matmul_supports(w.dtype, isa)) return;
    kernels::PackedWeights p = kernels::pack_for_matmul(w.dtype, w.data, w.rows, w.cols, isa);
    if (p.empty()) return;
    ++st.tensors;
    st.packed_bytes += p.bytes();
    packed_.emplace(WeightKey{w.data, w.rows}, std::move(p));
    // Without AMX the matmuls read the packed copy only; with AMX, batches of kQBlockAmxMinN
    // tokens or more (prefill) run the AMX tiles over the original layout, so its pages stay
    // (not Q8_0's: its AMX tiles read the packed copy too).
    // Dropping file pages is always safe: touched again, they are read back from the file; so
    // the tied embedding's pages go too, and embed() faults in just the rows it looks up.
    if (kernels::amx_tiles_enabled() && w.dtype != DType::kQ8_0) return;
    const size_t n = static_cast<size_t>(w.rows) * dtype_row_bytes(w.dtype, w.cols);
    if (!model_.file_mapped(w.data, n)) return;
    const auto begin = reinterpret_cast<uintptr_t>(w.data), end = begin + n;
    const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
    if (last > first && ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) == 0) {
      st.dropped_bytes += last - first;
    }
  };
  for (int32_t l = 0; l < cfg_.n_layers; ++l) {
    const LayerWeights& w = model_.layers[static_cast<size_t>(l)];
    if (!cfg_.is_mla()) {
      add(w.wq);
      add(w.wk);
      add(w.wv);
    }
    add(w.wo);
    if (!cfg_.layer_is_moe(l)) {
      add(w.w_gate);
      add(w.w_up);
      add(w.w_down);
    } else {  // every routed expert's matrices on their own (moe_ffn multiplies them one by one), the shared expert
      for (int64_t e = 0; e < cfg_.n_experts; ++e) {
        add(expert_matrix(w.ffn_gate_exps, cfg_.n_experts, e));
        add(expert_matrix(w.ffn_up_exps, cfg_.n_experts, e));
        add(expert_matrix(w.ffn_down_exps, cfg_.n_experts, e));
      }
      add(w.ffn_gate_shexp);
      add(w.ffn_up_shexp);
      add(w.ffn_down_shexp);
    }
  }
  add(model_.output);
  return st;
}

}  // namespace tessera::worker
