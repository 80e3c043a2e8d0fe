// IncrementalDecoder: the streaming form of Tokenizer::decode().
#include "tessera/tokenizer/tokenizer.h"
#include "utf8.h"

namespace tessera {

// pending_ always holds a well-formed but incomplete UTF-8 prefix, so feeding it into a fresh
// sanitizer restores exactly the state the previous call ended in, without output.
std::string IncrementalDecoder::push(int32_t id) {
  std::string out;
  if (id < 0 || id >= tok_.vocab_size()) return out;  // as decode(): contributes nothing
  std::string bytes = tok_.token_bytes(id);
  if (first_ && !tok_.is_control(id)) {
    first_ = false;
    if (tok_.strips_first_space() && !bytes.empty() && bytes[0] == ' ') bytes.erase(0, 1);
  }
  tok::Utf8Sanitizer s;
  s.feed(pending_, out);
  s.feed(bytes, out);
  pending_ = s.held();
  return out;
}

std::string IncrementalDecoder::flush() {
  std::string out;
  tok::Utf8Sanitizer s;
  s.feed(pending_, out);
  s.finish(out);
  pending_.clear();
  return out;
}

}  // namespace tessera
