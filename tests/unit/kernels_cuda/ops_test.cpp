// CUDA element-wise kernels against the CPU kernels: fused residual + RMSNorm, RoPE fused with
// the K/V page write (both layouts, with bias), SwiGLU, embedding gather, weight upload
// (F32/F16/BF16/Q8_0 -> f16/bf16), row gather. Awkward sizes: dims 111, 500, 4096; rows 1, 19, 257.
#include <cstring>

#include "cuda_test_util.h"
#include "tessera/kernels/cuda/ops.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels::cuda {
namespace {

using namespace testing;

class CudaOps : public ::testing::TestWithParam<HalfType> {};

TEST_P(CudaOps, RmsNormResidualMatchesCpu) {
  TS_REQUIRE_GPU();
  const HalfType t = GetParam();
  for (int64_t dim : {111, 500, 4096}) {
    for (int64_t n : {1, 19, 257}) {
      auto x = random_floats(static_cast<size_t>(n * dim), 1, -3.0f, 3.0f);
      const auto delta = random_floats(x.size(), 2);
      const auto w = random_floats(static_cast<size_t>(dim), 3, 0.5f, 1.5f);
      DeviceArray<float> dx(x), dd(delta), dw(w);
      DeviceArray<uint16_t> dout(x.size());
      TS_CUDA_OK(rmsnorm_residual(dx.get(), dd.get(), dw.get(), t, dout.get(), n, dim, 1e-5f, nullptr));
      TS_CUDA_OK(cudaDeviceSynchronize());
      kernels::add_inplace(x.data(), delta.data(), n * dim);
      std::vector<float> ref(x.size());
      kernels::rmsnorm(x.data(), dim, w.data(), ref.data(), dim, n, dim, 1e-5f);
      EXPECT_LT(nmse(dx.to_host(), x), 1e-12) << "residual, dim " << dim << " n " << n;
      EXPECT_LT(nmse(half_to_float(t, dout.to_host()), ref), rounding_nmse(t)) << "dim " << dim << " n " << n;
    }
  }
}

TEST_P(CudaOps, RopeWritesRotatedKvIntoPages) {
  TS_REQUIRE_GPU();
  const HalfType t = GetParam();
  for (bool interleaved : {true, false}) {
    for (int32_t hd : {64, 128}) {
      const int32_t n = 19, n_heads = 8, n_kv = 2, ps = 16, num_pages = 5;
      const int64_t q_dim = n_heads * hd, kv_dim = n_kv * hd, width = q_dim + 2 * kv_dim;
      auto qkv = random_floats(static_cast<size_t>(n * width), 4);
      const auto bias = random_floats(static_cast<size_t>(width), 5);
      std::vector<int32_t> pos(n);
      std::vector<int64_t> slots(n);
      for (int32_t i = 0; i < n; ++i) {
        pos[static_cast<size_t>(i)] = 3000 + 7 * i;  // large positions stress the angle precision
        slots[static_cast<size_t>(i)] = (i * 37) % (num_pages * ps);
      }
      const size_t pool = static_cast<size_t>(num_pages) * 2 * ps * static_cast<size_t>(kv_dim);
      DeviceArray<float> dqkv(qkv), dbias(bias);
      DeviceArray<int32_t> dpos(pos);
      DeviceArray<int64_t> dslots(slots);
      DeviceArray<uint16_t> dkv(std::vector<uint16_t>(pool, 0));
      TS_CUDA_OK(rope_write_kv({.qkv = dqkv.get(), .qkv_stride = width, .bias = dbias.get(), .n_tokens = n,
                                .n_heads = n_heads, .n_kv_heads = n_kv, .head_dim = hd, .positions = dpos.get(),
                                .slots = dslots.get(), .kv_type = t, .kv = dkv.get(), .page_size = ps, .theta = 10000.0f,
                                .interleaved = interleaved},
                               nullptr));
      TS_CUDA_OK(cudaDeviceSynchronize());
      // CPU: bias, rope_table + rope on Q and K, then K/V into their slots.
      for (int32_t i = 0; i < n; ++i) kernels::add_inplace(qkv.data() + i * width, bias.data(), width);
      std::vector<float> cs(static_cast<size_t>(n * hd));
      kernels::rope_table(pos.data(), n, hd, 10000.0f, cs.data());
      kernels::rope(qkv.data(), width, n, n_heads + n_kv, hd, cs.data(), interleaved);  // Q and K heads are adjacent
      std::vector<float> ref_pool(pool, 0.0f), got_pool = half_to_float(t, dkv.to_host());
      for (int32_t i = 0; i < n; ++i) {
        const int64_t slot = slots[static_cast<size_t>(i)], page = slot / ps, off = slot % ps;
        float* k = ref_pool.data() + (page * 2 * ps + off) * kv_dim;
        std::memcpy(k, qkv.data() + i * width + q_dim, static_cast<size_t>(kv_dim) * 4);
        std::memcpy(k + ps * kv_dim, qkv.data() + i * width + q_dim + kv_dim, static_cast<size_t>(kv_dim) * 4);
      }
      const auto got_qkv = dqkv.to_host();
      std::vector<float> got_q, ref_q;
      for (int32_t i = 0; i < n; ++i) {
        got_q.insert(got_q.end(), got_qkv.begin() + i * width, got_qkv.begin() + i * width + q_dim);
        ref_q.insert(ref_q.end(), qkv.begin() + i * width, qkv.begin() + i * width + q_dim);
      }
      EXPECT_LT(nmse(got_q, ref_q), 1e-10) << "Q, hd " << hd << (interleaved ? " interleaved" : " halves");
      EXPECT_LT(nmse(got_pool, ref_pool), rounding_nmse(t)) << "pages, hd " << hd << (interleaved ? " interleaved" : " halves");
    }
  }
}

TEST_P(CudaOps, SwigluMatchesCpu) {
  TS_REQUIRE_GPU();
  const HalfType t = GetParam();
  for (int64_t hidden : {111, 500, 4096}) {
    const int64_t n = 19;
    const auto gu = random_floats(static_cast<size_t>(n * 2 * hidden), 6, -4.0f, 4.0f);
    DeviceArray<float> dgu(gu);
    DeviceArray<uint16_t> dout(static_cast<size_t>(n * hidden));
    TS_CUDA_OK(swiglu(dgu.get(), n, hidden, t, dout.get(), nullptr));
    TS_CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> ref(static_cast<size_t>(n * hidden));
    kernels::silu_mul(gu.data(), 2 * hidden, gu.data() + hidden, 2 * hidden, ref.data(), hidden, n, hidden);
    EXPECT_LT(nmse(half_to_float(t, dout.to_host()), ref), rounding_nmse(t)) << "hidden " << hidden;
  }
}

TEST_P(CudaOps, EmbeddingAndRowGatherAreExact) {
  TS_REQUIRE_GPU();
  const HalfType t = GetParam();
  const int64_t vocab = 1001, dim = 111;
  const auto table_f = random_floats(static_cast<size_t>(vocab * dim), 7);
  std::vector<uint16_t> table(table_f.size());
  for (size_t i = 0; i < table.size(); ++i) table[i] = to_half_bits(t, table_f[i]);
  const std::vector<int32_t> tokens{0, 1000, 17, 17, 500};
  DeviceArray<uint16_t> dtable(table), dgathered(tokens.size() * static_cast<size_t>(dim));
  DeviceArray<int32_t> dtok(tokens);
  DeviceArray<float> dout(tokens.size() * static_cast<size_t>(dim));
  TS_CUDA_OK(embedding_gather(t, dtable.get(), dim, dtok.get(), static_cast<int64_t>(tokens.size()), dout.get(), nullptr));
  TS_CUDA_OK(gather_rows(t, dtable.get(), dim, dtok.get(), static_cast<int64_t>(tokens.size()), dgathered.get(), nullptr));
  TS_CUDA_OK(cudaDeviceSynchronize());
  const auto out = dout.to_host();
  const auto gathered = dgathered.to_host();
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (int64_t c = 0; c < dim; ++c) {
      const uint16_t h = table[static_cast<size_t>(tokens[i] * dim + c)];
      ASSERT_EQ(out[i * static_cast<size_t>(dim) + static_cast<size_t>(c)], from_half_bits(t, h));
      ASSERT_EQ(gathered[i * static_cast<size_t>(dim) + static_cast<size_t>(c)], h);
    }
  }
}

TEST_P(CudaOps, WeightUploadMatchesCpuDequantization) {
  TS_REQUIRE_GPU();
  const HalfType t = GetParam();
  const int64_t rows = 19, cols = 96;
  const auto f = random_floats(static_cast<size_t>(rows * cols), 8, -2.0f, 2.0f);
  for (DType src : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0}) {
    const size_t rb = dtype_row_bytes(src, cols);
    std::vector<uint8_t> bytes(rb * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      uint8_t* dst = bytes.data() + static_cast<size_t>(r) * rb;
      const float* row = f.data() + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        if (src == DType::kF32) std::memcpy(dst + 4 * c, row + c, 4);
        const uint16_t h = src == DType::kF16 ? kernels::f32_to_fp16(row[c]) : kernels::f32_to_bf16(row[c]);
        if (src == DType::kF16 || src == DType::kBF16) std::memcpy(dst + 2 * c, &h, 2);
      }
      if (src == DType::kQ8_0) kernels::quantize_row_q8_0(row, dst, cols);
    }
    DeviceArray<uint8_t> dsrc(bytes);
    DeviceArray<uint16_t> ddst(static_cast<size_t>(rows * cols));
    TS_CUDA_OK(convert_weights(src, dsrc.get(), rows, cols, t, ddst.get(), nullptr));
    TS_CUDA_OK(cudaDeviceSynchronize());
    const auto got = ddst.to_host();
    std::vector<float> deq(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      kernels::dequantize_row(src, bytes.data() + static_cast<size_t>(r) * rb, deq.data(), cols);
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(got[static_cast<size_t>(r * cols + c)], to_half_bits(t, deq[static_cast<size_t>(c)]))
            << dtype_name(src) << " row " << r << " col " << c;
      }
    }
  }
  DeviceArray<uint8_t> dummy(static_cast<size_t>(18 * rows * cols / 32));
  DeviceArray<uint16_t> out(static_cast<size_t>(rows * cols));
  EXPECT_EQ(convert_weights(DType::kQ4_0, dummy.get(), rows, cols, t, out.get(), nullptr), cudaErrorInvalidValue);
}

INSTANTIATE_TEST_SUITE_P(Types, CudaOps, ::testing::Values(HalfType::kF16, HalfType::kBF16),
                         [](const auto& param_info) { return std::string(half_type_name(param_info.param)); });

}  // namespace
}  // namespace tessera::kernels::cuda
