// The backend table's shared pieces: default entry points, capability names and the batch
// checks every backend gets from the executor (backend.h).
#include "tessera/worker/backend.h"

#include <string>

namespace tessera::worker {
namespace {

std::string seq_name(size_t i) { return "seq " + std::to_string(i); }

// Limits every backend shares (positions and tokens per step stay far inside int32).
constexpr int64_t kMaxStepTokensPerSeq = int64_t{1} << 24;
constexpr int64_t kMaxPosition = int64_t{1} << 30;

}  // namespace

const char* where_name(Where w) {
  switch (w) {
    case Where::kNone: return "none";
    case Where::kHost: return "host";
    case Where::kDevice: return "device";
  }
  return "?";
}

std::vector<std::string> capability_names(std::string_view backend_name, const BackendCaps& caps) {
  std::vector<std::string> out{std::string(backend_name)};
  if (caps.kv_fill) out.emplace_back("kv_fill");
  if (caps.kv_fill && caps.kv_scores) out.emplace_back("kv_policy");
  const std::pair<const char*, Where> sampling[] = {{"greedy", caps.greedy},       {"temperature", caps.temperature},
                                                    {"top_k", caps.top_k},         {"top_p", caps.top_p},
                                                    {"min_p", caps.min_p},         {"penalties", caps.penalties},
                                                    {"logprobs", caps.logprobs}};
  for (const auto& [name, where] : sampling) {
    if (where != Where::kNone) out.emplace_back(name);
  }
  if (caps.prompt_logprobs) out.emplace_back("prompt_logprobs");
  if (caps.chunk_blend) {
    out.emplace_back("chunk_blend");
    out.emplace_back("blend_steps");  // blends over several steps (blend_tail) with compact heads (blend_head_from)
  }
  return out;
}

Result<std::vector<int32_t>> Backend::forward_argmax(std::span<const SeqInput>) {
  return make_error(ErrorCode::kUnsupported, std::string(name()) + " backend: no device argmax");
}

Result<BlendOutcome> Backend::blend_prefill(const BlendInput&) {
  return make_error(ErrorCode::kUnsupported, std::string(name()) + " backend: no CacheBlend (capability chunk_blend)");
}

Status Backend::read_kv(int32_t, std::span<const int64_t>, std::span<float>, std::span<float>) {
  return make_error(ErrorCode::kUnsupported, std::string(name()) + " backend: cannot read K/V pages (capability kv_fill)");
}

Status Backend::write_kv(int32_t, std::span<const int64_t>, std::span<const float>, std::span<const float>) {
  return make_error(ErrorCode::kUnsupported, std::string(name()) + " backend: cannot write K/V pages (capability kv_fill)");
}

Status validate_batch(const PoolGeometry& pool, const BackendCaps& caps, int32_t vocab_size,
                      std::span<const SeqInput> batch) {
  const int32_t ps = pool.page_size;
  if (caps.max_seqs > 0 && static_cast<int64_t>(batch.size()) > caps.max_seqs) {
    return make_error(ErrorCode::kTooLarge, "batch has " + std::to_string(batch.size()) + " sequences, max_seqs is " +
                                                std::to_string(caps.max_seqs));
  }
  int64_t total = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SeqInput& in = batch[i];
    if (in.tokens.empty()) return make_error(ErrorCode::kInvalidArgument, seq_name(i) + ": no tokens");
    if (in.all_logits && !caps.prompt_logprobs)
      return make_error(ErrorCode::kUnsupported, seq_name(i) + ": all_logits needs capability prompt_logprobs");
    const auto n = static_cast<int64_t>(in.tokens.size());
    if (n > kMaxStepTokensPerSeq) return make_error(ErrorCode::kTooLarge, seq_name(i) + ": too many tokens in one step");
    total += n;
    if (caps.max_batch_tokens > 0 && total > caps.max_batch_tokens) {
      return make_error(ErrorCode::kTooLarge, "batch has more than max_batch_tokens " + std::to_string(caps.max_batch_tokens) +
                                                  " tokens (at " + seq_name(i) + ")");
    }
    const int64_t end = static_cast<int64_t>(in.start_pos) + n;
    if (in.start_pos < 0 || end > kMaxPosition) {
      return make_error(ErrorCode::kOutOfRange, seq_name(i) + ": start_pos " + std::to_string(in.start_pos) + " out of range");
    }
    if (caps.max_context > 0 && end > caps.max_context) {
      return make_error(ErrorCode::kOutOfRange, seq_name(i) + ": positions [" + std::to_string(in.start_pos) + ", " +
                                                    std::to_string(end) + ") outside the context [0, " +
                                                    std::to_string(caps.max_context) + ")");
    }
    for (size_t t = 0; t < in.tokens.size(); ++t) {
      if (in.tokens[t] < 0 || in.tokens[t] >= vocab_size) {
        return make_error(ErrorCode::kOutOfRange, seq_name(i) + ": token " + std::to_string(in.tokens[t]) + " at index " +
                                                      std::to_string(t) + " is outside the vocabulary [0, " +
                                                      std::to_string(vocab_size) + ")");
      }
    }
    const int64_t pages_needed = (end + ps - 1) / ps;
    if (static_cast<int64_t>(in.block_table.size()) < pages_needed) {
      return make_error(ErrorCode::kInvalidArgument, seq_name(i) + ": block_table has " + std::to_string(in.block_table.size()) +
                                                         " pages, positions [0, " + std::to_string(end) + ") need " +
                                                         std::to_string(pages_needed));
    }
    for (int64_t p = 0; p < pages_needed; ++p) {
      const int32_t page = in.block_table[static_cast<size_t>(p)];
      if (page < 0 || page >= pool.num_pages) {
        return make_error(ErrorCode::kOutOfRange, seq_name(i) + ": block_table[" + std::to_string(p) + "] = " +
                                                      std::to_string(page) + " is not a page of the pool [0, " +
                                                      std::to_string(pool.num_pages) + ")");
      }
    }
    if (in.slot_mapping.size() != in.tokens.size()) {
      return make_error(ErrorCode::kInvalidArgument, seq_name(i) + ": slot_mapping has " + std::to_string(in.slot_mapping.size()) +
                                                         " entries for " + std::to_string(in.tokens.size()) + " tokens");
    }
    for (size_t t = 0; t < in.tokens.size(); ++t) {
      const int64_t p = in.start_pos + static_cast<int64_t>(t);
      const int64_t want = static_cast<int64_t>(in.block_table[static_cast<size_t>(p / ps)]) * ps + p % ps;
      if (in.slot_mapping[t] != want) {
        return make_error(ErrorCode::kInvalidArgument, seq_name(i) + ": slot_mapping[" + std::to_string(t) + "] = " +
                                                           std::to_string(in.slot_mapping[t]) + " but block_table puts position " +
                                                           std::to_string(p) + " in slot " + std::to_string(want));
      }
    }
  }
  return ok_status();
}

}  // namespace tessera::worker
