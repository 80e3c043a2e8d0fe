#include "tessera/common/dtype.h"

#include "tessera/common/check.h"

namespace tessera {
namespace {

struct Layout {
  const char* name;
  int64_t block;
  size_t bytes;
};

Layout layout(DType t) {
  switch (t) {
    case DType::kF32: return {"f32", 1, 4};
    case DType::kF16: return {"f16", 1, 2};
    case DType::kBF16: return {"bf16", 1, 2};
    case DType::kQ8_0: return {"q8_0", 32, 34};
    case DType::kQ4_0: return {"q4_0", 32, 18};
    case DType::kQ4_1: return {"q4_1", 32, 20};
    case DType::kQ5_0: return {"q5_0", 32, 22};
    case DType::kQ5_1: return {"q5_1", 32, 24};
    case DType::kQ2_K: return {"q2_k", 256, 84};
    case DType::kQ3_K: return {"q3_k", 256, 110};
    case DType::kQ4_K: return {"q4_k", 256, 144};
    case DType::kQ5_K: return {"q5_k", 256, 176};
    case DType::kQ6_K: return {"q6_k", 256, 210};
    case DType::kIQ4_NL: return {"iq4_nl", 32, 18};
    case DType::kIQ4_XS: return {"iq4_xs", 256, 136};
  }
  return {"unknown", 1, 0};
}

}  // namespace

const char* dtype_name(DType t) { return layout(t).name; }
int64_t dtype_block_size(DType t) { return layout(t).block; }
size_t dtype_block_bytes(DType t) { return layout(t).bytes; }
bool dtype_is_quantized(DType t) { return layout(t).block > 1; }

size_t dtype_row_bytes(DType t, int64_t cols) {
  const int64_t block = dtype_block_size(t);
  TS_CHECK_EQ(cols % block, 0) << "row length not a multiple of the block size of " << dtype_name(t);
  return static_cast<size_t>(cols / block) * dtype_block_bytes(t);
}

}  // namespace tessera
