// Stop strings on a text stream: text is released only when no stop string can still begin
// inside it, so a partial stop string never reaches the client; when a stop string completes,
// the text before it is released and everything from it on is dropped.
//
//   StopFilter f({"\n\n"});
//   f.push("Hello\n")   -> "Hello"      ("\n" is held: it may start "\n\n")
//   f.push("\nmore")    -> ""           (stopped; "more" is dropped)
//   f.stopped()         -> true
//   f.flush()           -> held text when the stream ends without a stop (here "")
//
// Holds at most max(len(stop)) - 1 bytes. Stop strings are matched on bytes, so multi-byte
// UTF-8 stop strings work; input must be whole UTF-8 characters (IncrementalDecoder output),
// and released text never splits a character. Not thread-safe: one per request.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessera::frontend {

class StopFilter {
 public:
  explicit StopFilter(std::vector<std::string> stops);
  // Returns the text now safe to emit. After stopped(), returns "" for any input.
  std::string push(std::string_view text);
  // Returns the held text (only when not stopped) and clears it.
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  // the stop string that ended it

 private:
  std::vector<std::string> stops_;
  std::string held_;
  std::string matched_;
  bool stopped_ = false;
};

}  // namespace tessera::frontend
