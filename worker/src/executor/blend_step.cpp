// The CacheBlend prefills of a step plan (blend_step.h).
#include "blend_step.h"

#include <algorithm>
#include <string>

#include "kv_directives.h"
#include "tessera/model/model.h"

namespace tessera::worker {

std::span<float> BlendRows::append_to(std::span<const float> forward) {
  merged.assign(forward.begin(), forward.end());
  merged.insert(merged.end(), rows.begin(), rows.end());
  return merged;
}

int32_t BlendRows::take_reused(uint64_t request_id) {
  const auto it = reused.find(request_id);
  if (it == reused.end()) return 0;
  const int32_t n = it->second;
  reused.erase(it);
  return n;
}

Status validate_blend(const SeqPlan& s) {
  const std::string who = "request " + std::to_string(s.request_id) + ": ";
  if (s.blend_chunks.size() > kMaxBlendChunks) {
    return make_error(ErrorCode::kTooLarge, who + "blend_chunks holds more than " + std::to_string(kMaxBlendChunks) + " chunks");
  }
  // Every use below (the anchor, the tail, the compact head) trusts the chunks: check them first.
  int64_t prev_end = 0;
  for (size_t i = 0; i < s.blend_chunks.size(); ++i) {
    const BlendChunk& c = s.blend_chunks[i];
    if (c.begin < prev_end || c.length <= 0) {
      return make_error(ErrorCode::kInvalidArgument, who + "blend_chunks[" + std::to_string(i) + "] (begin " + std::to_string(c.begin) +
                                                         ", length " + std::to_string(c.length) +
                                                         ") must have length > 0 and begin >= 0, in ascending order without overlap");
    }
    prev_end = static_cast<int64_t>(c.begin) + c.length;
  }
  if (!s.blend_tail.empty()) {  // a step that ends inside a document: the rest of that document
    if (s.blend_chunks.empty()) return make_error(ErrorCode::kInvalidArgument, who + "blend_tail without blend_chunks");
    const BlendChunk& last = s.blend_chunks.back();
    const int64_t end = s.start_pos + static_cast<int64_t>(s.tokens.size());
    if (s.sample || last.begin >= end || end + static_cast<int64_t>(s.blend_tail.size()) != static_cast<int64_t>(last.begin) + last.length) {
      return make_error(ErrorCode::kInvalidArgument, who + "blend_tail has " + std::to_string(s.blend_tail.size()) +
                                                         " tokens; it must complete the last of blend_chunks, which the step's " +
                                                         "tokens must cut, in a step that does not sample");
    }
  }
  if (uses_kv_policy(s) || s.prompt_logprobs) {
    return make_error(ErrorCode::kInvalidArgument, who + "blend_chunks cannot be combined with K/V policy directives or prompt_logprobs");
  }
  // A compact head leaves out [blend_chunks[0].begin, blend_head_from): no document it cuts may
  // reach this step (its lookup would read the tokens left out).
  const int32_t anchor = s.blend_chunks.empty() ? 0 : s.blend_chunks.front().begin;
  const int32_t from = s.blend_head_from;
  if (from != 0) {
    if (from <= anchor || from > s.start_pos) {
      return make_error(ErrorCode::kInvalidArgument, who + "blend_head_from " + std::to_string(from) + " must be in (" +
                                                         std::to_string(anchor) + ", start_pos " + std::to_string(s.start_pos) + "]");
    }
    for (const BlendChunk& c : s.blend_chunks) {
      if (c.begin < from && static_cast<int64_t>(c.begin) + c.length > s.start_pos) {
        return make_error(ErrorCode::kInvalidArgument, who + "blend_head_from " + std::to_string(from) + " leaves out tokens of the chunk at " +
                                                           std::to_string(c.begin) + ", which this step continues");
      }
    }
  }
  const int64_t head = s.start_pos - (from != 0 ? from - anchor : 0);
  if (static_cast<int64_t>(s.blend_head.size()) != head) {
    return make_error(ErrorCode::kInvalidArgument, who + "blend_head has " + std::to_string(s.blend_head.size()) + " tokens, " +
                                                       (from != 0 ? "start_pos and blend_head_from ask for " + std::to_string(head)
                                                                  : "start_pos is " + std::to_string(s.start_pos)));
  }
  return ok_status();
}

Status run_blends(Backend& backend, const StepPlan& plan, std::vector<SeqInput>& batch, BlendRows* out) {
  out->ids.clear();
  out->rows.clear();
  bool any = false;
  for (const SeqPlan& s : plan.seqs) any = any || !s.blend_chunks.empty();
  if (!any) return ok_status();
  std::vector<SeqInput> rest;
  std::vector<int32_t> tokens;
  std::vector<ChunkSpan> chunks;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const SeqPlan& s = plan.seqs[i];
    if (s.blend_chunks.empty()) {
      rest.push_back(batch[i]);
      continue;
    }
    if (s.blend_head_from == 0) {
      tokens.assign(s.blend_head.begin(), s.blend_head.end());
    } else {  // [0, anchor), then placeholders for the positions left out (never read), then [from, start_pos)
      const auto anchor = static_cast<ptrdiff_t>(s.blend_chunks.front().begin);
      tokens.assign(s.blend_head.begin(), s.blend_head.begin() + anchor);
      tokens.resize(static_cast<size_t>(s.blend_head_from), 0);
      tokens.insert(tokens.end(), s.blend_head.begin() + anchor, s.blend_head.end());
    }
    tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
    const auto end = static_cast<int32_t>(tokens.size());
    tokens.insert(tokens.end(), s.blend_tail.begin(), s.blend_tail.end());
    chunks.clear();
    for (const BlendChunk& c : s.blend_chunks) chunks.push_back({.begin = c.begin, .length = c.length});
    auto r = backend.blend_prefill({.tokens = tokens, .cached = s.start_pos, .chunks = chunks, .block_table = s.block_table,
                                    .salt = s.blend_salt, .recompute_ratio = s.blend_ratio, .want_logits = s.sample, .end = end});
    if (!r.ok()) {
      return make_error(r.error().code, "step " + std::to_string(plan.step_id) + ": request " + std::to_string(s.request_id) +
                                            ": " + r.error().message);
    }
    out->reused[s.request_id] += r->hit_tokens;  // summed over the request's blended steps
    if (!s.sample) continue;
    out->ids.push_back(s.request_id);
    out->rows.insert(out->rows.end(), r->logits.begin(), r->logits.end());
  }
  batch = std::move(rest);
  return ok_status();
}

}  // namespace tessera::worker
