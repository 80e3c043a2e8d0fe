// CacheBlend's reusable documents (docs/api.md "Reusable documents"): each document is tokenized
// on its own, so that the same text always gives the same tokens (the worker's chunk K/V key),
// and placed before the prompt (completions) or before the content of the last user message
// (chat), with protocol::GenerateRequest::blend_chunks saying where.
#include <algorithm>
#include <string>

#include "tessera/frontend/openai.h"
#include "tessera/frontend/request_preparer.h"

namespace tessera::frontend {
namespace {

// Marks where the documents go inside the rendered chat (control characters no template emits).
constexpr std::string_view kSentinel = "\x01\x02tessera-documents\x02\x01";

}  // namespace

Status RequestPreparer::place_documents(protocol::GenerateRequest& r, const PrepareOptions& o) const {
  if (r.documents.size() > kMaxBlendChunks)
    return make_error(ErrorCode::kInvalidArgument, "documents holds " + std::to_string(r.documents.size()) + " documents; at most " +
                                                       std::to_string(kMaxBlendChunks));
  std::vector<std::vector<int32_t>> docs;
  for (size_t i = 0; i < r.documents.size(); ++i) {
    if (r.documents[i].empty()) return make_error(ErrorCode::kInvalidArgument, "documents[" + std::to_string(i) + "] is empty");
    if (r.documents[i].size() > kMaxDocumentBytes)
      return make_error(ErrorCode::kInvalidArgument, "documents[" + std::to_string(i) + "] has " + std::to_string(r.documents[i].size()) +
                                                         " bytes; at most " + std::to_string(kMaxDocumentBytes));
    docs.push_back(tokenizer_->encode(r.documents[i], /*add_special=*/false));
    if (docs.back().empty())
      return make_error(ErrorCode::kInvalidArgument, "documents[" + std::to_string(i) + "] is empty after tokenization");
  }
  std::vector<int32_t> before, after;  // the prompt's tokens around the documents
  if (r.kind == protocol::RequestKind::kChat) {
    std::vector<protocol::ChatMessage> messages = r.messages;
    auto last_user = std::find_if(messages.rbegin(), messages.rend(), [](const auto& m) { return m.role == "user"; });
    if (last_user == messages.rend())
      return make_error(ErrorCode::kInvalidArgument, "documents need a user message (they are placed before its content)");
    last_user->content = std::string(kSentinel) + last_user->content;
    TS_ASSIGN_OR_RETURN(RenderedChat chat, render_chat(chat_template_, messages, o.tools));
    // Split the rendered chat at the sentinel: tokens before it, then after it.
    RenderedChat head = chat, tail = chat;
    head.segments.clear();
    tail.segments.clear();
    tail.places_bos = true;  // no second BOS in the middle of the prompt
    bool found = false;
    for (const ChatSegment& seg : chat.segments) {
      const size_t at = seg.special || found ? std::string::npos : seg.text.find(kSentinel);
      if (at == std::string::npos) {
        (found ? tail : head).segments.push_back(seg);
        continue;
      }
      found = true;
      if (at > 0) head.segments.push_back({.text = seg.text.substr(0, at), .special = false});
      if (at + kSentinel.size() < seg.text.size()) tail.segments.push_back({.text = seg.text.substr(at + kSentinel.size()), .special = false});
    }
    if (!found) return make_error(ErrorCode::kInvalidArgument, "documents: the chat template dropped the last user message's content");
    before = tokenize_chat(head);
    for (const ChatSegment& seg : tail.segments) {
      if (seg.special) {
        if (const int32_t id = tokenizer_->token_id(seg.text); id >= 0) {
          after.push_back(id);
          continue;
        }
      }
      const std::vector<int32_t> t = tokenizer_->encode(seg.text, /*add_special=*/false);
      after.insert(after.end(), t.begin(), t.end());
    }
    for (const auto& piece : chat.stop_pieces) {
      int32_t id = tokenizer_->token_id(piece);
      if (id < 0 && piece == "</s>") id = tokenizer_->eos_id();
      if (id >= 0) r.stop_token_ids.push_back(id);
    }
  } else {
    if (!r.prompt_tokens.empty()) {
      after = r.prompt_tokens;
    } else {
      if (r.prompt.empty()) return make_error(ErrorCode::kInvalidArgument, "prompt must not be empty");
      if (tokenizer_adds_bos_) before.push_back(tokenizer_->bos_id());
      after = tokenizer_->encode(r.prompt, /*add_special=*/false);
    }
  }
  r.prompt_tokens = std::move(before);
  r.blend_chunks.clear();
  for (const auto& d : docs) {
    r.blend_chunks.push_back({.begin = static_cast<int32_t>(r.prompt_tokens.size()), .length = static_cast<int32_t>(d.size())});
    r.prompt_tokens.insert(r.prompt_tokens.end(), d.begin(), d.end());
  }
  r.prompt_tokens.insert(r.prompt_tokens.end(), after.begin(), after.end());
  r.documents.clear();
  return ok_status();
}

}  // namespace tessera::frontend
