#include "choice_set.h"

#include <algorithm>
#include <set>

#include "tessera/common/log.h"

namespace tessera::frontend {

ChoiceSet::ChoiceSet(const Tokenizer& tokenizer, ResponseMeta meta, ChoiceSetOptions options,
                     std::vector<protocol::GenerateRequest> prompts, std::vector<std::string> echo,
                     const std::function<uint64_t()>& next_id)
    : tok_(tokenizer), next_id_(next_id), meta_(std::move(meta)), options_(options), echo_(std::move(echo)) {
  echo_.resize(prompts.size());
  prompt_lps_.resize(prompts.size());
  for (size_t k = 0; k < prompts.size(); ++k)
    if (prompts[k].sampling.prompt_logprobs >= 0) prompt_lps_[k] = prompt_entries(prompts[k]);
  seqs_.reserve(prompts.size() * static_cast<size_t>(options_.best_of));
  for (size_t k = 0; k < prompts.size(); ++k) {
    for (int32_t c = 0; c < options_.best_of; ++c) {
      Seq s;
      s.id = next_id();
      s.prompt = static_cast<int32_t>(k);
      s.candidate = c;
      s.request = prompts[k];
      s.prompt_len = static_cast<int32_t>(prompts[k].prompt_tokens.size());
      s.request.id = s.id;
      s.request.sampling.seed = candidate_seed(prompts[k].sampling.seed, c);
      // Ranking candidates needs each token's log-probability, asked or not.
      if (options_.best_of > options_.n) s.request.sampling.logprobs = true;
      // The prompt is scored once, by its first candidate (the others reuse its cached pages).
      if (c > 0) s.request.sampling.prompt_logprobs = -1;
      s.gen = std::make_unique<Generation>(tokenizer, s.request.stop, options_.logprobs);
      s.echo = echo_[k];
      if (options_.check_arguments) s.retry = s.request;
      seqs_.push_back(std::move(s));
    }
  }
}

std::vector<protocol::GenerateRequest> ChoiceSet::start() {
  std::vector<protocol::GenerateRequest> out;
  for (Seq& s : seqs_) {
    const bool short_prompt = options_.page_size > 0 && s.prompt_len <= options_.page_size;
    if (s.candidate == 0 || short_prompt) {
      s.submitted = true;
      out.push_back(std::move(s.request));
    }
  }
  return out;
}

ChoiceSet::Seq* ChoiceSet::find(uint64_t id) {
  for (Seq& s : seqs_)
    if (s.id == id) return &s;
  return nullptr;
}

void ChoiceSet::release_candidates(int32_t prompt, Output& out) {
  for (Seq& s : seqs_) {
    if (s.prompt != prompt || s.submitted) continue;
    s.submitted = true;
    out.submit.push_back(std::move(s.request));
  }
}

std::vector<TokenLogprobText> ChoiceSet::prompt_entries(const protocol::GenerateRequest& prompt) const {
  std::vector<TokenLogprobText> out;
  IncrementalDecoder decoder(tok_);
  int32_t offset = 0;
  for (int32_t t : prompt.prompt_tokens) {
    TokenLogprobText& e = out.emplace_back();
    e.token = tok_.token_bytes(t);
    e.text_offset = offset;
    e.has_logprob = false;  // until the scheduler's event (the first token never has one)
    offset += code_points(decoder.push(t));
  }
  return out;
}

std::vector<TokenLogprobText> ChoiceSet::with_prompt(int32_t prompt, const std::vector<TokenLogprobText>& generated) const {
  std::vector<TokenLogprobText> all = prompt_lps_[static_cast<size_t>(prompt)];
  int32_t offset = code_points(echo_[static_cast<size_t>(prompt)]);
  for (TokenLogprobText e : generated) {
    e.text_offset = offset;
    offset += code_points(e.token);
    all.push_back(std::move(e));
  }
  return all;
}

std::string ChoiceSet::call_piece(Seq& s, bool final, std::string_view reason, const protocol::FinalEvent* final_event) {
  const std::string& text = s.gen->text();
  const ToolCall* header = nullptr;
  if (!s.call) {
    std::string name;
    const size_t at = forced_arguments_start(text, &name);
    if (at == std::string::npos) return "";
    s.call = ToolCall{new_call_id(), name, ""};
    s.args_sent = at;
    header = &*s.call;
  }
  // The outer object's closing '}' is not part of the arguments: hold the last byte back until
  // the end, then send up to the last '}'.
  size_t end = final ? text.find_last_of('}') : text.size() - 1;
  if (end == std::string::npos || end < s.args_sent) end = s.args_sent;
  const std::string_view piece = std::string_view(text).substr(s.args_sent, end - s.args_sent);
  s.args_sent = end;
  if (piece.empty() && header == nullptr && !final) return "";
  std::string c = tool_call_delta_chunk(meta_, header, piece, s.first_chunk, reason, final_event, s.prompt * options_.n + s.candidate);
  s.first_chunk = false;
  return c;
}

std::string ChoiceSet::chunk(Seq& s, const std::string& text, const std::vector<TokenLogprobText>& logprobs,
                             std::string_view reason, const protocol::FinalEvent* final_event) {
  // text_offset of a stream: code points of the choice's text sent before the token.
  std::vector<TokenLogprobText> lps;
  if (s.first_chunk && !prompt_lps_[static_cast<size_t>(s.prompt)].empty()) {
    lps = with_prompt(s.prompt, logprobs);
    s.lp_offset = lps.empty() ? 0 : lps.back().text_offset + code_points(lps.back().token);
  } else {
    for (TokenLogprobText e : logprobs) {
      e.text_offset = s.lp_offset;
      s.lp_offset += code_points(e.token);
      lps.push_back(std::move(e));
    }
  }
  // Streaming means best_of == n: candidate c is choice c of its prompt.
  std::string c = stream_chunk(meta_, s.echo + text, lps, s.first_chunk, reason, final_event, s.prompt * options_.n + s.candidate);
  s.echo.clear();
  s.first_chunk = false;
  return c;
}

ChoiceSet::Output ChoiceSet::on_message(const protocol::Message& m) {
  Output out;
  Seq* s = find(protocol::message_id(m));
  if (s == nullptr || s->done) return out;
  // Its prompt's pages are in the cache now (an error releases nothing: the request fails).
  if (s->candidate == 0 && !std::holds_alternative<protocol::ErrorEvent>(m)) release_candidates(s->prompt, out);
  if (const auto* tok = std::get_if<protocol::TokenEvent>(&m)) {
    if (!tok->prompt_logprobs.empty() && !prompt_lps_[static_cast<size_t>(s->prompt)].empty()) {
      std::vector<TokenLogprobText>& entries = prompt_lps_[static_cast<size_t>(s->prompt)];
      // prompt_logprobs[i] belongs to prompt token i + 1.
      for (size_t i = 0; i < tok->prompt_logprobs.size() && i + 1 < entries.size(); ++i) {
        TokenLogprobText& e = entries[i + 1];
        e.has_logprob = true;
        e.logprob = tok->prompt_logprobs[i];
        if (i < tok->prompt_top_logprobs.size())
          for (const auto& alt : tok->prompt_top_logprobs[i]) e.top.emplace_back(tok_.token_bytes(alt.token), alt.logprob);
      }
    }
    if (tok->tokens.empty()) return out;
    Generation::Delta d = s->gen->on_tokens(*tok);
    for (size_t i = 0; i < d.tokens.size() && i < tok->logprobs.size(); ++i) s->cumulative_logprob += tok->logprobs[i];
    if (s->gen->stop_hit() && !s->cancel_sent) {
      s->cancel_sent = true;
      out.cancel.push_back(s->id);  // the scheduler answers with a final event
    }
    if (options_.streaming && !options_.tools && (!d.text.empty() || !d.logprobs.empty()))
      out.sse = chunk(*s, d.text, d.logprobs, "", nullptr);
    else if (options_.streaming && options_.tools_forced && !options_.check_arguments && !d.text.empty())
      out.sse = call_piece(*s, false, "", nullptr);
    return out;
  }
  if (const auto* fin = std::get_if<protocol::FinalEvent>(&m)) {
    const std::string tail = s->gen->finish();
    out.stripped = s->gen->stripped_calls();
    s->done = true;
    s->final = *fin;
    s->finish_reason = s->gen->stop_hit() ? "stop" : fin->finish_reason;
    if (s->gen->stop_hit()) s->final.usage.completion_tokens = s->gen->completion_tokens();
    if (s->final.usage.prompt_tokens == 0) s->final.usage.prompt_tokens = s->prompt_len;
    out.finished = s->final;
    s->final.usage.completion_tokens += s->earlier_tokens;
    if (options_.tools && options_.check_arguments) {
      for (const ToolCall& call : parse_tool_calls(options_.tool_format, s->gen->text(), options_.tools_forced).calls) {
        const auto tool = options_.check_arguments->find(call.name);
        const std::string why = tool == options_.check_arguments->end() ? "no such tool"
                                                                        : arguments_violation(tool->second.parameters, call.arguments);
        if (why.empty()) continue;
        if (!s->retried && tool != options_.check_arguments->end()) {
          // Generate the call again with this tool named: its grammar enforces the arguments.
          TS_LOG(kInfo) << "req=" << s->id << " | tool_choice required: the call of '" << call.name << "' has arguments its "
                        << "parameters do not accept (" << why << "); generating it again with the tool named";
          s->retried = true;
          s->earlier_tokens = s->final.usage.completion_tokens;
          protocol::GenerateRequest again = s->retry;
          again.id = s->id = next_id_();
          again.sampling.grammar = tool->second.grammar;
          s->gen = std::make_unique<Generation>(tok_, again.stop, options_.logprobs);
          s->done = false;
          s->cancel_sent = false;
          s->cumulative_logprob = 0.0;
          out.submit.push_back(std::move(again));
          return out;
        }
        out.error = make_error(ErrorCode::kInternal,
                               "tool_choice \"required\": the model called '" + call.name +
                                   "' with arguments its parameters do not accept (" + why +
                                   "); with several tools the grammar fixes only the name (docs/api.md \"Tool calls\"); "
                                   "name the tool in tool_choice to have its arguments enforced");
        return out;
      }
    }
    if (options_.streaming) {
      // The last choice to end carries the request's timings.
      protocol::FinalEvent t;
      if (done()) t = total();
      if (options_.tools && s->call) {
        s->finish_reason = "tool_calls";
        out.sse = call_piece(*s, true, s->finish_reason, done() ? &t : nullptr);
      } else if (options_.tools) {
        ToolParse p = parse_tool_calls(options_.tool_format, s->gen->text(), options_.tools_forced);
        if (!p.calls.empty()) s->finish_reason = "tool_calls";
        if (p.calls.empty()) out.sse = chunk(*s, s->gen->text(), {}, s->finish_reason, done() ? &t : nullptr);
        else out.sse = tool_calls_chunk(meta_, p.content, p.calls, s->first_chunk, s->finish_reason, done() ? &t : nullptr,
                                        s->prompt * options_.n + s->candidate);
        s->first_chunk = false;
      } else {
        out.sse = chunk(*s, tail, {}, s->finish_reason, done() ? &t : nullptr);
      }
    }
    return out;
  }
  if (const auto* err = std::get_if<protocol::ErrorEvent>(&m)) {
    s->done = true;
    // The scheduler names the frontend's internal request number; the client never saw it.
    std::string message = err->message;
    if (const std::string own = "request " + std::to_string(s->id) + ": "; message.rfind(own, 0) == 0) message.erase(0, own.size());
    out.error = make_error(err->code, std::move(message));
  }
  return out;
}

bool ChoiceSet::done() const {
  return std::all_of(seqs_.begin(), seqs_.end(), [](const Seq& s) { return s.done; });
}

std::vector<uint64_t> ChoiceSet::live_ids() const {
  std::vector<uint64_t> ids;
  for (const Seq& s : seqs_)
    if (s.submitted && !s.done) ids.push_back(s.id);
  return ids;
}

int32_t ChoiceSet::completion_tokens() const {
  int32_t sum = 0;
  for (const Seq& s : seqs_) sum += s.done ? s.final.usage.completion_tokens : s.gen->completion_tokens();
  return sum;
}

int32_t ChoiceSet::prompt_tokens() const {
  int32_t sum = 0;
  for (const Seq& s : seqs_)
    if (s.candidate == 0) sum += s.done && s.final.usage.prompt_tokens > 0 ? s.final.usage.prompt_tokens
                                                                           : s.prompt_len;
  return sum;
}

protocol::FinalEvent ChoiceSet::total() const {
  protocol::FinalEvent t;
  bool first = true;
  for (const Seq& s : seqs_) {
    const protocol::FinalEvent& f = s.final;
    t.usage.completion_tokens += f.usage.completion_tokens;
    if (s.candidate == 0) {
      t.usage.prompt_tokens += f.usage.prompt_tokens;
      t.usage.cached_tokens += f.usage.cached_tokens;
      t.usage.reused_tokens += f.usage.reused_tokens;
      if (t.usage.preference_source.empty()) {
        t.usage.preference_source = f.usage.preference_source;
        t.usage.preference_kv_bytes = f.usage.preference_kv_bytes;
        t.usage.preference_transfer_ms = f.usage.preference_transfer_ms;
      }
    }
    t.timings.queue_ms = first ? f.timings.queue_ms : std::min(t.timings.queue_ms, f.timings.queue_ms);
    t.timings.ttft_ms = first ? f.timings.ttft_ms : std::min(t.timings.ttft_ms, f.timings.ttft_ms);
    t.timings.decode_ms = std::max(t.timings.decode_ms, f.timings.decode_ms);
    t.timings.total_ms = std::max(t.timings.total_ms, f.timings.total_ms);
    first = false;
  }
  return t;
}

std::string ChoiceSet::response_body() const {
  std::vector<ChoiceOut> choices;
  const int32_t prompts = static_cast<int32_t>(echo_.size());
  for (int32_t k = 0; k < prompts; ++k) {
    std::vector<const Seq*> cands;
    for (const Seq& s : seqs_)
      if (s.prompt == k) cands.push_back(&s);
    // best_of: the n candidates with the highest cumulative log-probability (stable: ties keep
    // candidate order); with best_of == n every candidate, in order.
    if (options_.best_of > options_.n)
      std::stable_sort(cands.begin(), cands.end(), [](const Seq* a, const Seq* b) { return a->cumulative_logprob > b->cumulative_logprob; });
    for (int32_t i = 0; i < options_.n && i < static_cast<int32_t>(cands.size()); ++i) {
      const Seq& s = *cands[static_cast<size_t>(i)];
      ChoiceOut c{k * options_.n + i, echo_[static_cast<size_t>(k)] + s.gen->text(),
                  prompt_lps_[static_cast<size_t>(k)].empty() ? s.gen->logprobs() : with_prompt(k, s.gen->logprobs()),
                  s.finish_reason, {}};
      if (options_.tools) {
        ToolParse p = parse_tool_calls(options_.tool_format, c.text, options_.tools_forced);
        if (!p.calls.empty()) {
          c.text = std::move(p.content);
          c.tool_calls = std::move(p.calls);
          c.finish_reason = "tool_calls";
        }
      }
      choices.push_back(std::move(c));
    }
  }
  return response_json(meta_, choices, total());
}

std::string ChoiceSet::finish_reasons() const {
  std::set<std::string> seen;
  std::string out;
  for (const Seq& s : seqs_) {
    if (s.finish_reason.empty() || !seen.insert(s.finish_reason).second) continue;
    out += (out.empty() ? "" : ",") + s.finish_reason;
  }
  return out;
}

}  // namespace tessera::frontend
