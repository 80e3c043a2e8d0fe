// Tensor parallelism for one node (Megatron-style), shared by the CUDA backend and its CPU
// check: how a model is cut across `world` ranks, the cut itself, and the all-reduce seam.
//
// The cut (plan_shards / shard_model):
// - column-parallel (each rank computes some output rows from the full input): wq, wk, wv by
//   heads — when n_kv_heads % world == 0, rank r owns KV heads [r * n_kv / world,
//   (r + 1) * n_kv / world) and all the query heads that read them; when world % n_kv_heads
//   == 0 instead, each KV head is replicated on rep = world / n_kv_heads consecutive ranks and
//   its query heads are split evenly among them (K/V of that head computed and cached on each);
//   w_gate, w_up by a slice of the hidden dimension; Q/K/V biases follow their rows;
// - row-parallel (each rank computes a partial sum of the full output from its input slice):
//   wo by its query heads' columns, w_down by its hidden slice; the partial sums are added by
//   an all-reduce before the residual add, so every rank holds the same residual stream;
// - replicated: token embeddings, norms, output head (every rank can compute the logits; rank 0
//   samples and talks to the scheduler).
// A rank's shard is itself a valid (smaller) Model: n_heads, n_kv_heads and hidden_dim are the
// rank's own, so per-rank code runs the ordinary forward plus two all-reduces per layer.
//
// Requirements (else kUnsupported/kInvalidArgument naming the field): world in [1, 64];
// n_kv_heads % world == 0, or world % n_kv_heads == 0 with (n_heads / n_kv_heads) divisible by
// world / n_kv_heads; every rank gets a non-empty hidden slice and a wo column slice whose
// bounds are multiples of the weights' block size (32 for Q8_0).
//
// Thread-safety: plan_shards/shard_model are pure. An InProcessGroup is shared by `world`
// threads, one per rank, each calling all_reduce_sum on its own Communicator.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "tessera/common/result.h"
#include "tessera/model/model.h"

namespace tessera::worker::tp {

struct RankShard {
  int32_t rank = 0;
  int32_t world = 1;
  int32_t head_begin = 0;      // query heads [head_begin, head_begin + n_heads)
  int32_t n_heads = 0;
  int32_t kv_head_begin = 0;   // KV heads [kv_head_begin, kv_head_begin + n_kv_heads) (may be shared)
  int32_t n_kv_heads = 0;
  int64_t hidden_begin = 0;    // MLP hidden units [hidden_begin, hidden_begin + hidden_size)
  int64_t hidden_size = 0;
};

Result<std::vector<RankShard>> plan_shards(const Model& model, int32_t world);

// Rows [begin, begin + count) of t: a view into t's memory (no copy).
Tensor slice_rows(const Tensor& t, int64_t begin, int64_t count);

// One rank's weights as a Model. Owns copies of the column slices (wo, w_down); every other
// tensor is a view into `full`, which must outlive the shard.
class ShardModel final : public Model {
 public:
  const RankShard& shard() const { return shard_; }

 private:
  friend Result<std::unique_ptr<ShardModel>> shard_model(const Model& full, const RankShard& shard);
  ShardModel() = default;
  Tensor slice_cols(const Tensor& t, int64_t begin, int64_t count);  // copies into storage_
  RankShard shard_;
  std::vector<std::vector<uint8_t>> storage_;
};

Result<std::unique_ptr<ShardModel>> shard_model(const Model& full, const RankShard& shard);

// The all-reduce seam: NCCL on GPUs, an in-process group of threads on the CPU.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t world() const = 0;
  // Element-wise sum over all ranks, in place; every rank ends with the same values.
  // Errors: kDeadlineExceeded when a peer does not arrive in time, kInvalidArgument when ranks
  // pass different sizes.
  virtual Status all_reduce_sum(std::span<float> data) = 0;
};

// `world` communicators that reduce through shared memory; each must be used by its own
// thread. The sum is taken in rank order (r0 + r1 + ...), so all ranks get identical bits.
class InProcessGroup {
 public:
  explicit InProcessGroup(int32_t world, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  ~InProcessGroup();
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  Communicator& rank(int32_t r);
  int32_t world() const { return world_; }

 private:
  class Member;
  friend class Member;
  // Waits until all ranks have arrived at this barrier phase; false on timeout.
  bool arrive_and_wait();

  int32_t world_;
  std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<Member>> members_;
  std::mutex mu_;
  std::condition_variable cv_;
  int32_t arrived_ = 0;        // GUARDED_BY(mu_)
  uint64_t generation_ = 0;    // GUARDED_BY(mu_)
  bool broken_ = false;        // GUARDED_BY(mu_): a rank timed out; later calls fail fast
  std::vector<std::span<float>> buffers_;  // per rank, published between barriers
  std::vector<float> result_;
};

// The CPU per-rank forward used to check the sharding: one sequence, positions [0, n),
// contiguous K/V, CPU kernels (matmul on the shard's own dtypes), all-reduce after wo and
// w_down. Returns the logits of every position, [n, vocab] (identical on every rank).
Result<std::vector<float>> cpu_rank_forward(const ShardModel& shard, std::span<const int32_t> tokens, Communicator& comm);

}  // namespace tessera::worker::tp
