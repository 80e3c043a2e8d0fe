// Private: the Engine's state and the pieces of its forward pass.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "tessera/kernels/thread_pool.h"
#include "tessera/worker/engine.h"
#include "tessera/worker/sampler.h"

namespace tessera::worker {

// Scratch activations of one step, grown on demand and reused (never shrunk).
struct Scratch {
  std::vector<float> x, xn, q, k, v, att, o, gate, up, cos_sin, out_rows, logits;
  std::vector<int32_t> tokens, positions, token_indptr, start_pos, page_indptr, page_ids, out_row_index;
  std::vector<int64_t> slots;
};

struct Engine::Impl {
  const Model& model;
  ModelConfig cfg;
  KvPool pool;
  kernels::Isa isa;
  std::unique_ptr<kernels::ThreadPool> threads;
  Scratch s;
  std::unordered_map<uint64_t, std::unique_ptr<Sampler>> samplers;  // live request states
  Engine::FillHandler fill_handler;  // KvFill executor (preference injection); may be empty

  Impl(const Model& m, KvPool p, kernels::Isa i, int n_threads)
      : model(m), cfg(m.config()), pool(std::move(p)), isa(i), threads(std::make_unique<kernels::ThreadPool>(n_threads)) {}

  // Checks every sequence of a batch against the pool and the vocabulary (no side effects).
  Status validate(std::span<const SeqInput> batch) const;
  // The forward pass proper; the batch has been validated.
  std::span<const float> run(std::span<const SeqInput> batch);
};

// Checks that the model's tensors have the shapes and dtypes the forward pass needs.
Status check_model(const Model& model);

}  // namespace tessera::worker
