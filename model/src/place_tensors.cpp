// place_tensors (loaded_model.h): a placer's choices applied to a file's tensors before assembly.
// Conversion is dequantize (exact for every stored type) then ggml's reference quantizer of the
// target type (tessera/common/quants.h), row by row; so a tensor converted here holds the same
// bytes as the same f32 values quantized offline by `model synth` or llama-quantize without
// an importance matrix.
#include <algorithm>
#include <cstring>
#include <thread>

#include "loaded_model.h"
#include "tessera/common/quants.h"

namespace tessera::loaders {
namespace {

// Sort key: token_embd first, then the blocks by number, then the rest by name.
struct Order {
  int group;
  int64_t layer;
  const std::string* name;
  bool operator<(const Order& o) const {
    if (group != o.group) return group < o.group;
    if (layer != o.layer) return layer < o.layer;
    return *name < *o.name;
  }
};

Order order_of(const std::string& name) {
  if (name.rfind("token_embd", 0) == 0) return {0, 0, &name};
  if (name.rfind("blk.", 0) == 0) {
    int64_t layer = 0;
    size_t i = 4;
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) layer = layer * 10 + (name[i] - '0');
    if (i > 4 && i < name.size() && name[i] == '.') return {1, layer, &name};
  }
  return {2, 0, &name};
}

// Rows [r0, r1) of `src` (type from) into `dst` (type to), `cols` values per row.
void convert_rows(DType from, const uint8_t* src, DType to, uint8_t* dst, int64_t cols, int64_t r0, int64_t r1) {
  const size_t in_row = dtype_row_bytes(from, cols), out_row = dtype_row_bytes(to, cols);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* in = src + static_cast<size_t>(r) * in_row;
    const float* values = row.data();
    if (from == DType::kF32 && reinterpret_cast<uintptr_t>(in) % alignof(float) == 0) {
      values = reinterpret_cast<const float*>(in);
    } else {
      dequantize(from, in, row.data(), cols);
    }
    quantize_row(to, values, dst + static_cast<size_t>(r) * out_row, cols);
  }
}

}  // namespace

Result<TensorMap> place_tensors(LoadedModel& model, const TensorMap& tensors, const TensorPlacer& placer,
                                const std::string& file) {
  std::vector<Order> order;
  order.reserve(tensors.size());
  for (const auto& [name, raw] : tensors) order.push_back(order_of(name));
  std::sort(order.begin(), order.end());
  std::vector<TensorDesc> descs;
  descs.reserve(order.size());
  for (const Order& o : order) {
    const RawTensor& raw = tensors.at(*o.name);
    descs.push_back(TensorDesc{.name = *o.name, .dtype = raw.dtype, .shape = raw.shape});
  }
  TS_ASSIGN_OR_RETURN(std::vector<TensorChoice> choices, placer(model.config(), descs));
  if (choices.size() != descs.size()) {
    return make_error(ErrorCode::kInternal, file + ": the placer answered " + std::to_string(choices.size()) +
                                                " choices for " + std::to_string(descs.size()) + " tensors");
  }
  TensorMap placed = tensors;
  const int max_threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
  for (size_t i = 0; i < descs.size(); ++i) {
    RawTensor& raw = placed.at(descs[i].name);
    raw.exec = choices[i].exec;
    const DType to = choices[i].dtype;
    if (to == raw.dtype) continue;
    const int64_t cols = raw.shape.empty() ? 1 : raw.shape.back();
    uint64_t rows = 1;
    for (size_t d = 0; d + 1 < raw.shape.size(); ++d) {
      if (raw.shape[d] <= 0 || mul_overflows(rows, static_cast<uint64_t>(raw.shape[d]), &rows)) {
        return make_error(ErrorCode::kCorruptFile, file + ": tensor " + raw.name + " has a bad shape");
      }
    }
    for (DType t : {raw.dtype, to}) {
      if (cols <= 0 || cols % dtype_block_size(t) != 0) {
        return make_error(ErrorCode::kInvalidArgument,
                          file + ": cannot convert tensor " + raw.name + " from " + dtype_name(raw.dtype) + " to " +
                              dtype_name(to) + ": its row length " + std::to_string(cols) + " is not a multiple of " +
                              dtype_name(t) + "'s block of " + std::to_string(dtype_block_size(t)));
      }
    }
    uint64_t in_bytes = 0, out_bytes = 0;
    if (mul_overflows(rows, dtype_row_bytes(raw.dtype, cols), &in_bytes) || in_bytes != raw.nbytes ||
        mul_overflows(rows, dtype_row_bytes(to, cols), &out_bytes)) {
      return make_error(ErrorCode::kCorruptFile, file + ": tensor " + raw.name + " holds " +
                                                     std::to_string(raw.nbytes) + " bytes, its shape and dtype need " +
                                                     std::to_string(in_bytes));
    }
    uint8_t* out = model.allocate(out_bytes);
    const auto n_rows = static_cast<int64_t>(rows);
    // Large tensors: rows split over threads (each row is converted independently).
    const int64_t work = n_rows * cols;
    const int threads = static_cast<int>(std::min<int64_t>(max_threads, std::max<int64_t>(1, work >> 20)));
    if (threads <= 1) {
      convert_rows(raw.dtype, raw.data, to, out, cols, 0, n_rows);
    } else {
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t) {
        const int64_t r0 = n_rows * t / threads, r1 = n_rows * (t + 1) / threads;
        pool.emplace_back(convert_rows, raw.dtype, raw.data, to, out, cols, r0, r1);
      }
      for (std::thread& th : pool) th.join();
    }
    raw.dtype = to;
    raw.data = out;
    raw.nbytes = out_bytes;
  }
  return placed;
}

}  // namespace tessera::loaders
