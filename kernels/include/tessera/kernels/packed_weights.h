// Weights repacked once, at load, into the layout a matmul kernel streams fastest.
//
// pack_for_matmul() copies a [rows, cols] weight matrix of a 32-value block format (Q4_0, Q4_1,
// Q5_0, Q5_1, IQ4_NL; Q8_0 on AVX-512 only; and Q4_K, Q5_K, Q6_K on AVX-512) into 16-row interleaved groups for the AVX-512 VNNI
// kernels (and the AVX2 one, which reads each group as two halves of 8 rows; packed with Isa::kAvx2): per group
// of 16 rows and per block of 32 columns, the 16 rows' quant bytes as 4 zmm vectors (lane l of
// vector m = bytes 4m..4m+3 of row l's qs: `& 0x0F` gives values 4m..4m+3, `>> 4` values
// 16+4m..16+4m+3, i.e. the dword operands vpdpbusd takes with the activations broadcast), then
// the rows' fp16 scales contiguous (and their fp16 mins, Q4_1 / Q5_1, and their 32 fifth bits,
// Q5_0 / Q5_1, regrouped so one shift and one mask put each value's bit at 0x10). Blocks go in
// pairs [qs b][qs b+1][meta b][meta b+1] so every vector load is 64-byte aligned. The data
// stay 4-bit (5-bit): the same bytes as the file, plus padding to a whole group (the last
// group's missing rows are zero) and to a whole pair of blocks.
// Q8_0 (qblock_packed_q8.h) likewise: per group and block, the 16 rows' 32 int8 values as 8 zmm
// vectors (lane l of vector k = bytes 4k..4k+3 of row l, each xor 0x80: unsigned for vpdpbusd),
// then the 16 fp16 scales, blocks in pairs: 34 bytes per row and block, as in the file.
// Q4_K, Q5_K and Q6_K (kquant_packed.h, AVX-512 only): per group and super-block of 256 columns, one
// after the other. Q4_K (2304 bytes = 16 x 144, the file's): the rows' qs as 32 vectors (lane l
// of vector 8c + k = bytes 32c + 4k .. + 3 of row l: `& 0x0F` gives values 64c + 4k .. + 3 of
// sub-block 2c, `& 0xF0` 16 x values 64c + 32 + 4k .. + 3 of sub-block 2c + 1, the factor 16
// shifted out of the exact integer sum), the rows' 12 packed 6-bit scale / min bytes as 3 dword
// vectors (unpacked for 16 rows at once), then fp16 d[16] and dmin[16]. Q5_K (2816 bytes = 16 x
// 176): the same with the rows' qh as 8 vectors after the qs. Q6_K (3392 bytes = 16 x
// 210 + 32 of padding): ql as 32 vectors, qh as 16, the int8 scales as 4 (lane l of each = 4
// bytes of row l, in file order), fp16 d[16]. The kernels sum each sub-block (Q6_K: scale group)
// for 16 rows by vpdpbusd, scale it in int32 and run finish_q4_k / _q5_k / _q6_k's float
// operations in order for the 16 rows: bit-identical to the scalar oracle; decode and batches,
// except the AMX batches (as above), which read the original layout.
// MatmulArgs::w_packed hands one to matmul(), which then reads the packed copy (on the ISA it
// was packed for; results bit-identical to the unpacked path) for decode, and for batches too
// except where the AMX tiles take them (kernels::amx_tiles_enabled() and at least
// kQBlockAmxMinN = 12 tokens): those read the original layout — except Q8_0's, whose AMX tiles
// read the packed copy too (every Q8_0 path does).
//
// Ownership: a PackedWeights owns its (64-byte aligned) buffer; move-only; immutable once made,
// so many threads may read it. It does not refer to the weights it was made from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tessera/common/dtype.h"
#include "tessera/kernels/isa.h"

namespace tessera::kernels {

class PackedWeights {
 public:
  PackedWeights() = default;  // empty: no packed path
  PackedWeights(PackedWeights&&) noexcept = default;
  PackedWeights& operator=(PackedWeights&&) noexcept = default;

  bool empty() const { return buf_ == nullptr; }
  DType dtype() const { return dtype_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  Isa isa() const { return isa_; }
  size_t bytes() const { return static_cast<size_t>(n_groups() * group_bytes_); }
  int64_t n_groups() const { return (rows_ + 15) / 16; }
  int64_t group_bytes() const { return group_bytes_; }  // one group of 16 rows, a multiple of 64
  const uint8_t* group(int64_t g) const { return buf_.get() + g * group_bytes_; }

 private:
  friend PackedWeights pack_for_matmul(DType, const void*, int64_t, int64_t, Isa);
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> buf_;
  DType dtype_ = DType::kF32;
  int64_t rows_ = 0, cols_ = 0, group_bytes_ = 0;
  Isa isa_ = Isa::kScalar;
};

// Whether pack_for_matmul(t, ..., isa) gives a packed copy (the format has a packed kernel on
// that ISA and the CPU runs it).
bool packed_matmul_supports(DType t, Isa isa);
// The packed copy of w ([rows, cols], dtype_row_bytes(t, cols) bytes per row, cols a multiple
// of t's block: 32, or 256 for Q4_K / Q5_K / Q6_K),
// or an empty PackedWeights when !packed_matmul_supports(t, isa). Reads w once; O(rows * cols).
PackedWeights pack_for_matmul(DType t, const void* w, int64_t rows, int64_t cols, Isa isa);

}  // namespace tessera::kernels
