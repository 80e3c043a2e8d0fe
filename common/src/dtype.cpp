#include "tessera/common/dtype.h"

#include "tessera/common/check.h"

namespace tessera {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kQ8_0: return "q8_0";
    case DType::kQ4_0: return "q4_0";
  }
  return "unknown";
}

int64_t dtype_block_size(DType t) { return (t == DType::kQ8_0 || t == DType::kQ4_0) ? 32 : 1; }

size_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kQ8_0: return 34;
    case DType::kQ4_0: return 18;
  }
  return 0;
}

size_t dtype_row_bytes(DType t, int64_t cols) {
  const int64_t block = dtype_block_size(t);
  TS_CHECK_EQ(cols % block, 0) << "row length not a multiple of the block size of " << dtype_name(t);
  return static_cast<size_t>(cols / block) * dtype_block_bytes(t);
}

}  // namespace tessera
