// Input validation and the step-plan executor of the CUDA engine (same contract as Engine).
#include <chrono>
#include <string>
#include <unordered_set>

#include "cuda_engine_impl.h"

namespace tessera::worker {
namespace {

std::string seq_name(size_t i) { return "seq " + std::to_string(i); }

// Plain greedy: the device argmax (lowest id on ties) is exactly the host Sampler's choice.
bool device_greedy(const SamplingParams& p) {
  return (p.temperature == 0.0f || p.top_k == 1) && p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
         p.frequency_penalty == 0.0f && !p.logprobs && p.top_logprobs == 0;
}

}  // namespace

Status CudaEngine::Impl::validate(std::span<const SeqInput> batch) const {
  const int32_t ps = opt.page_size;
  if (static_cast<int64_t>(batch.size()) > opt.max_seqs) {
    return make_error(ErrorCode::kTooLarge, "batch has " + std::to_string(batch.size()) + " sequences, max_seqs is " +
                                                std::to_string(opt.max_seqs));
  }
  int64_t total = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SeqInput& in = batch[i];
    if (in.tokens.empty()) return make_error(ErrorCode::kInvalidArgument, seq_name(i) + ": no tokens");
    total += static_cast<int64_t>(in.tokens.size());
    if (total > opt.max_batch_tokens) {
      return make_error(ErrorCode::kTooLarge, "batch has more than max_batch_tokens " + std::to_string(opt.max_batch_tokens) +
                                                  " tokens (at " + seq_name(i) + ")");
    }
    const int64_t end = static_cast<int64_t>(in.start_pos) + static_cast<int64_t>(in.tokens.size());
    if (in.start_pos < 0 || end > max_context) {
      return make_error(ErrorCode::kOutOfRange, seq_name(i) + ": positions [" + std::to_string(in.start_pos) + ", " +
                                                    std::to_string(end) + ") outside the context [0, " +
                                                    std::to_string(max_context) + ")");
    }
    for (size_t t = 0; t < in.tokens.size(); ++t) {
      if (in.tokens[t] < 0 || in.tokens[t] >= cfg.vocab_size) {
        return make_error(ErrorCode::kOutOfRange, seq_name(i) + ": token " + std::to_string(in.tokens[t]) + " at index " +
                                                      std::to_string(t) + " is outside the vocabulary [0, " +
                                                      std::to_string(cfg.vocab_size) + ")");
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
      if (page < 0 || page >= num_pages) {
        return make_error(ErrorCode::kOutOfRange, seq_name(i) + ": block_table[" + std::to_string(p) + "] = " +
                                                      std::to_string(page) + " is not a page of the pool [0, " +
                                                      std::to_string(num_pages) + ")");
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

Result<StepResult> CudaEngine::execute(const StepPlan& plan) {
  const auto t0 = std::chrono::steady_clock::now();
  Impl& im = *impl_;
  if (!plan.fills.empty()) {
    return make_error(ErrorCode::kUnsupported, "not implemented yet: kvstore fill (preference K/V injection) on the CUDA backend, step " +
                                                   std::to_string(plan.step_id));
  }
  for (size_t i = 0; i < plan.copies.size(); ++i) {
    const PageCopy& c = plan.copies[i];
    if (c.src < 0 || c.src >= im.num_pages || c.dst < 0 || c.dst >= im.num_pages) {
      return make_error(ErrorCode::kOutOfRange, "copies[" + std::to_string(i) + "]: page " + std::to_string(c.src) + " -> " +
                                                    std::to_string(c.dst) + " outside the pool [0, " +
                                                    std::to_string(im.num_pages) + ")");
    }
  }
  std::unordered_set<uint64_t> ids;
  std::vector<SeqInput> batch;
  batch.reserve(plan.seqs.size());
  for (const SeqPlan& s : plan.seqs) {
    if (!ids.insert(s.request_id).second) {
      return make_error(ErrorCode::kInvalidArgument, "request " + std::to_string(s.request_id) + " appears twice in step " +
                                                         std::to_string(plan.step_id));
    }
    if (s.sample) {
      Status st = validate_sampling_params(s.sampling);
      if (!st.ok()) return make_error(st.error().code, "request " + std::to_string(s.request_id) + ": " + st.error().message);
      for (int32_t g : s.generated) {
        if (g < 0 || g >= im.cfg.vocab_size) {
          return make_error(ErrorCode::kOutOfRange, "request " + std::to_string(s.request_id) + ": generated token " +
                                                        std::to_string(g) + " is outside the vocabulary");
        }
      }
    }
    batch.push_back({.tokens = s.tokens, .start_pos = s.start_pos, .block_table = s.block_table,
                     .slot_mapping = s.slot_mapping, .want_logits = s.sample});
  }
  {
    Status st = im.validate(batch);
    if (!st.ok()) return make_error(st.error().code, "step " + std::to_string(plan.step_id) + ": " + st.error().message);
  }
  for (uint64_t id : plan.released) im.samplers.erase(id);
  TS_CUDA_TRY(cudaSetDevice(im.opt.device));
  for (const PageCopy& c : plan.copies) TS_TRY(im.copy_page(c.src, c.dst));
  StepResult result;
  result.step_id = plan.step_id;
  bool all_greedy = true;
  for (const SeqPlan& s : plan.seqs) {
    if (s.sample && !device_greedy(s.sampling)) all_greedy = false;
  }
  std::span<const float> logits;
  std::vector<int32_t> greedy_tokens;
  if (batch.empty()) {
    TS_CUDA_TRY(cudaStreamSynchronize(im.stream));
  } else if (all_greedy) {
    TS_ASSIGN_OR_RETURN(greedy_tokens, im.run_greedy(batch));
  } else {
    TS_ASSIGN_OR_RETURN(logits, im.run(batch));
  }
  // Greedy-only steps take the device argmax; otherwise the host Sampler decides every row from
  // the copied-back logits, exactly as on the CPU worker.
  const size_t vocab = static_cast<size_t>(im.cfg.vocab_size);
  size_t row = 0;
  for (const SeqPlan& s : plan.seqs) {
    if (!s.sample) continue;
    auto& slot = im.samplers[s.request_id];
    if (!slot) {
      slot = std::make_unique<Sampler>(s.sampling);
      slot->set_history(s.generated);
    }
    SampleOutcome out;
    if (all_greedy) {
      out.token = greedy_tokens[row];
    } else {
      std::vector<float> row_logits(logits.begin() + static_cast<std::ptrdiff_t>(row * vocab),
                                    logits.begin() + static_cast<std::ptrdiff_t>((row + 1) * vocab));
      out = slot->sample(row_logits);
    }
    ++row;
    slot->accept(out.token);
    result.results.push_back({.request_id = s.request_id, .token = out.token, .logprob = out.logprob, .top = std::move(out.top)});
  }
  result.compute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace tessera::worker
