// Device int8 K/V quantization against the kvstore's int8 codec: quantize + dequantize on the
// GPU must reproduce decode_blob(encode_blob(x, int8)) bit for bit, for f32/f16/bf16 inputs,
// group sizes 2, 64, 100 and 4096, and regions whose last group is short.
#include <cstring>

#include "cuda_test_util.h"
#include "tessera/kernels/cuda/kv_quant.h"
#include "tessera/kvstore/blob.h"

namespace tessera::kernels::cuda {
namespace {

using namespace testing;

TEST(CudaKvQuant, MatchesTheKvstoreCodecBitForBit) {
  TS_REQUIRE_GPU();
  const kvstore::KvShape shape{.n_layers = 3, .n_tokens = 37, .n_kv_heads = 2, .head_dim = 17};  // 3774 elements
  const int64_t n = static_cast<int64_t>(shape.elements_per_region());
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (uint32_t group : {2u, 64u, 100u, 4096u}) {
      const auto k = random_floats(static_cast<size_t>(n), 1, -3.0f, 2.0f), v = random_floats(static_cast<size_t>(n), 2);
      kvstore::PackedKv kv{.fingerprint = 42, .dtype = dtype, .shape = shape, .k = {}, .v = {}};
      const size_t eb = kvstore::element_bytes(dtype);
      kv.k.resize(static_cast<size_t>(n) * eb);
      kv.v.resize(static_cast<size_t>(n) * eb);
      for (int64_t i = 0; i < n; ++i) {
        kvstore::float_to_element(dtype, k[static_cast<size_t>(i)], kv.k.data() + i * static_cast<int64_t>(eb));
        kvstore::float_to_element(dtype, v[static_cast<size_t>(i)], kv.v.data() + i * static_cast<int64_t>(eb));
      }
      auto blob = kvstore::encode_blob(kv, {.codec = kvstore::Codec::kInt8, .group_size = group});
      ASSERT_TRUE(blob.ok()) << blob.error().to_string();
      auto decoded = kvstore::decode_blob(*blob);
      ASSERT_TRUE(decoded.ok()) << decoded.error().to_string();
      for (int region = 0; region < 2; ++region) {
        const std::vector<uint8_t>& src = region == 0 ? kv.k : kv.v;
        const std::vector<uint8_t>& want = region == 0 ? decoded->k : decoded->v;
        DeviceArray<uint8_t> dx(src), codes(static_cast<size_t>(n)), out(want.size());
        DeviceArray<float> params(static_cast<size_t>(kv_quant_groups(n, static_cast<int32_t>(group)) * 2));
        TS_CUDA_OK(quantize_int8_groups(dtype, dx.get(), n, static_cast<int32_t>(group), params.get(), codes.get(), nullptr));
        TS_CUDA_OK(dequantize_int8_groups(params.get(), codes.get(), n, static_cast<int32_t>(group), 1.0f, dtype, out.get(),
                                          nullptr));
        TS_CUDA_OK(cudaDeviceSynchronize());
        ASSERT_EQ(out.to_host(), want) << dtype_name(dtype) << " group " << group << (region == 0 ? " K" : " V");
      }
    }
  }
}

TEST(CudaKvQuant, RejectsBadGroupSizes) {
  EXPECT_EQ(quantize_int8_groups(DType::kF32, nullptr, 10, 1, nullptr, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(quantize_int8_groups(DType::kQ8_0, nullptr, 10, 8, nullptr, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(dequantize_int8_groups(nullptr, nullptr, 10, 70000, 1.0f, DType::kF32, nullptr, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace tessera::kernels::cuda
