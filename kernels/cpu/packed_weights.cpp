// pack_for_matmul: the 16-row interleaved copy of a block-format weight matrix (layout:
// qblock_packed.h). Plain byte moves, no arithmetic on the values.
#include "tessera/kernels/packed_weights.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kquant_packed.h"
#include "qblock_packed.h"
#include "qblock_packed_q8.h"
#include "tessera/common/check.h"

namespace tessera::kernels {
namespace {

// Offsets inside one block of the file's formats.
struct BlockOffsets {
  int bytes, d, m, qh, qs;  // m / qh: -1 when absent
};
BlockOffsets block_offsets(DType t) {
  switch (t) {
    case DType::kQ4_0:
    case DType::kIQ4_NL: return {18, 0, -1, -1, 2};
    case DType::kQ4_1: return {20, 0, 2, -1, 4};
    case DType::kQ5_0: return {22, 0, -1, 2, 6};
    case DType::kQ5_1: return {24, 0, 2, 4, 8};
    default: break;
  }
  TS_CHECK(false) << "pack_for_matmul: no packed layout for " << dtype_name(t);
  return {};
}

uint32_t regroup_fifth(uint32_t qh) {
  uint32_t out = 0;
  for (int v = 0; v < 8; ++v) {
    for (int k = 0; k < 4; ++k) out |= ((qh >> cpu::packed_fifth_source(v, k)) & 1u) << (8 * k + v);
  }
  return out;
}

}  // namespace

void PackedWeights::Free::operator()(uint8_t* p) const { std::free(p); }

bool packed_matmul_supports(DType t, Isa isa) {
  if (!isa_supported(isa)) return false;
  if (isa == Isa::kAvx512) return cpu::packed_format(t).ok || t == DType::kQ8_0 || cpu::packed_kquant_kernel(t) != nullptr;
  return isa == Isa::kAvx2 && cpu::packed_format(t).ok;  // no AVX2 kernel over packed Q8_0
}

PackedWeights pack_for_matmul(DType t, const void* w, int64_t rows, int64_t cols, Isa isa) {
  PackedWeights p;
  if (!packed_matmul_supports(t, isa) || rows <= 0) return p;
  TS_CHECK_EQ(cols % dtype_block_size(t), 0);
  const bool q8 = t == DType::kQ8_0;  // its own layout: qblock_packed_q8.h
  const bool kq = cpu::packed_kquant_kernel(t) != nullptr;  // Q4_K / Q5_K / Q6_K: kquant_packed.h
  const cpu::PackedFormat f = cpu::packed_format(t);
  const BlockOffsets o = q8 || kq ? BlockOffsets{} : block_offsets(t);
  const int64_t nb = cols / 32, pair = cpu::packed_pair_bytes(f);
  const int64_t group = q8    ? cpu::packed_q8_group_bytes(cols)
                        : kq  ? cpu::packed_kquant_group_bytes(t, cols)
                              : cpu::packed_group_bytes(f, cols);
  const int64_t groups = (rows + 15) / 16;
  const size_t total = static_cast<size_t>(groups * group);
  // Large copies on 2 MiB boundaries and transparent huge pages (advisory): a decode step
  // streams every weight once, and 4 KiB pages cost a TLB miss per 4 KiB read.
  // Only whole huge pages are advised: a partly used last one would be resident in full.
  constexpr size_t kHuge = size_t{2} << 20;
  const bool huge = total >= kHuge;
  void* mem = nullptr;
  TS_CHECK(::posix_memalign(&mem, huge ? kHuge : 64, (total + 63) / 64 * 64) == 0)
      << "pack_for_matmul: cannot allocate " << total << " bytes";
  auto* buf = static_cast<uint8_t*>(mem);
  if (huge) (void)::madvise(buf, total / kHuge * kHuge, MADV_HUGEPAGE);
  std::memset(buf, 0, total);
  p.buf_.reset(buf);
  p.dtype_ = t;
  p.rows_ = rows;
  p.cols_ = cols;
  p.group_bytes_ = group;
  p.isa_ = isa;
  const size_t row_bytes = dtype_row_bytes(t, cols);
  const auto* src = static_cast<const uint8_t*>(w);
  for (int64_t g = 0; g < groups; ++g) {
    uint8_t* dst = buf + g * group;
    if (q8 || kq) {
      const int n_rows = static_cast<int>(std::min<int64_t>(16, rows - g * 16));
      const uint8_t* rows16 = src + static_cast<size_t>(g * 16) * row_bytes;
      if (q8) {
        cpu::pack_q8_0_group(rows16, row_bytes, n_rows, cols, dst);
      } else {
        cpu::pack_kquant_group(t, rows16, row_bytes, n_rows, cols, dst);
      }
      continue;
    }
    for (int l = 0; l < 16 && g * 16 + l < rows; ++l) {
      const uint8_t* row = src + static_cast<size_t>(g * 16 + l) * row_bytes;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + b * o.bytes;
        uint8_t* pb = dst + (b / 2) * pair;
        uint8_t* qs = pb + (b % 2) * cpu::kPackedQsBytes;
        uint8_t* meta = pb + 2 * cpu::kPackedQsBytes + (b % 2) * f.meta_bytes;
        for (int m = 0; m < 4; ++m) std::memcpy(qs + (m * 16 + l) * 4, blk + o.qs + 4 * m, 4);
        std::memcpy(meta + 2 * l, blk + o.d, 2);
        int off = 32;
        if (f.min) {
          std::memcpy(meta + off + 2 * l, blk + o.m, 2);
          off += 32;
        }
        if (f.fifth) {
          uint32_t qh;
          std::memcpy(&qh, blk + o.qh, 4);
          qh = regroup_fifth(qh);
          std::memcpy(meta + off + 4 * l, &qh, 4);
        }
      }
    }
  }
  return p;
}

}  // namespace tessera::kernels
