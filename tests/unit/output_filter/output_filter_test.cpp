// The retrieve_fact output filter: every format of seed 000 (F1-4), exact outputs and counts,
// and streaming with each call split at every chunk boundary (one cut, two cuts, byte by byte):
// the concatenated output always equals the one-shot result, and what has been emitted so far
// is always a prefix of it — so no byte of a call is ever shown.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessera/frontend/output_filter.h"

namespace tessera::frontend {
namespace {

const std::string kDsB = "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>";
const std::string kDsE = "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>";
const std::string kDsCB = "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>";
const std::string kDsCE = "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>";
const std::string kDsSep = "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>";

struct Case {
  std::string name;
  std::string in;
  std::string out;
  FactCallCounts counts;
};

std::vector<Case> cases() {
  return {
      {"plain text", "Hello, world. <b>bold</b> r and retrieve.", "Hello, world. <b>bold</b> r and retrieve.", {}},
      {"generic call", "Sure. retrieve_fact(trace_id=\"t1\", key='a)b') Done.", "Sure.  Done.", {.generic = 1}},
      {"generic nested parens", "A retrieve_fact(q=f(1,(2)), s=\"(\") B", "A  B", {.generic = 1}},
      {"generic escaped quote", "x retrieve_fact(s=\"a\\\")b\") y", "x  y", {.generic = 1}},
      {"not a call: no parens", "the retrieve_fact tool is off", "the retrieve_fact tool is off", {}},
      {"not a call: word before", "my_retrieve_fact(x) and fooretrieve_fact(y)", "my_retrieve_fact(x) and fooretrieve_fact(y)", {}},
      {"tool_call json", "Hi <tool_call>{\"name\": \"retrieve_fact\", \"arguments\": {\"id\": 3}}</tool_call>!", "Hi !",
       {.generic = 1}},
      {"tool_call other tool stays", "<tool_call>{\"name\": \"search\"}</tool_call>", "<tool_call>{\"name\": \"search\"}</tool_call>", {}},
      {"glm", "Answer:<|tool_call|>retrieve_fact\n{\"trace_id\": \"x}\", \"n\": {\"a\": 1}}\nmore", "Answer:\nmore", {.glm = 1}},
      {"glm bare", "ok retrieve_fact\n{\"k\": \"v\"} end", "ok  end", {.glm = 1}},
      {"glm other tool stays", "<|tool_call|>search\n{}", "<|tool_call|>search\n{}", {}},
      {"deepseek call", "pre" + kDsB + "function" + kDsSep + "retrieve_fact\n```json\n{\"id\": 1}\n```" + kDsE + "post", "prepost",
       {.deepseek = 1}},
      {"deepseek wrapper", "a" + kDsCB + kDsB + "retrieve_fact\n{}" + kDsE + "\n" + kDsB + "retrieve_fact\n{\"x\":2}" + kDsE + kDsCE + "b",
       "ab", {.deepseek = 2}},
      {"deepseek wrapper with another tool keeps it", kDsCB + kDsB + "search\n{}" + kDsE + kDsB + "retrieve_fact\n{}" + kDsE + kDsCE,
       kDsCB + kDsB + "search\n{}" + kDsE + kDsCE, {.deepseek = 1}},
      {"three formats and unicode", "\xe4\xbd\xa0\xe5\xa5\xbd retrieve_fact(a=1)\xe2\x9c\x93<|tool_call|>retrieve_fact {}" + kDsB +
                                        "retrieve_fact" + kDsE + "\xf0\x9f\x98\x80",
       "\xe4\xbd\xa0\xe5\xa5\xbd \xe2\x9c\x93\xf0\x9f\x98\x80", {.generic = 1, .deepseek = 1, .glm = 1}},
      {"cut off inside a call", "Text retrieve_fact(trace_id=\"abc", "Text ", {.generic = 1}},
      {"ends with a marker prefix", "Text <|tool_c", "Text <|tool_c", {}},
      {"ends with a name prefix", "Text retrie", "Text retrie", {}},
  };
}

TEST(OutputFilter, OneShotExact) {
  for (const Case& c : cases()) {
    const StripResult r = strip_retrieve_fact_calls(c.in);
    EXPECT_EQ(r.text, c.out) << c.name;
    EXPECT_EQ(r.counts, c.counts) << c.name << ": total " << r.counts.total();
  }
}

// Streams `chunks`; checks the emitted text is a prefix of the expected one after every push.
void stream(const Case& c, const std::vector<std::string>& chunks, const std::string& what) {
  RetrieveFactFilter f;
  std::string got;
  for (const std::string& ch : chunks) {
    got += f.push(ch);
    ASSERT_EQ(c.out.compare(0, got.size(), got), 0) << c.name << " " << what << ": emitted \"" << got << "\"";
  }
  got += f.finish();
  ASSERT_EQ(got, c.out) << c.name << " " << what;
  ASSERT_EQ(f.counts(), c.counts) << c.name << " " << what;
  ASSERT_EQ(f.held_bytes(), 0u);
}

TEST(OutputFilter, StreamingEverySingleCut) {
  for (const Case& c : cases()) {
    for (size_t k = 0; k <= c.in.size(); ++k) stream(c, {c.in.substr(0, k), c.in.substr(k)}, "cut " + std::to_string(k));
  }
}

TEST(OutputFilter, StreamingEveryPairOfCuts) {
  for (const Case& c : cases()) {
    for (size_t a = 0; a <= c.in.size(); ++a) {
      for (size_t b = a; b <= c.in.size(); ++b) {
        stream(c, {c.in.substr(0, a), c.in.substr(a, b - a), c.in.substr(b)}, "cuts " + std::to_string(a) + "," + std::to_string(b));
      }
    }
  }
}

TEST(OutputFilter, StreamingByteByByte) {
  for (const Case& c : cases()) {
    std::vector<std::string> bytes;
    for (char ch : c.in) bytes.emplace_back(1, ch);
    stream(c, bytes, "byte by byte");
  }
}

TEST(OutputFilter, ReleasesTextAsSoonAsItCannotBeACall) {
  RetrieveFactFilter f;
  EXPECT_EQ(f.push("Hello <"), "Hello ");
  EXPECT_EQ(f.held_bytes(), 1u);
  EXPECT_EQ(f.push("b> re"), "<b> ");
  EXPECT_EQ(f.push("ad"), "read");
  EXPECT_EQ(f.push(" retrieve_fact("), " ");
  EXPECT_EQ(f.push("x=1) after"), " after");
  EXPECT_EQ(f.finish(), "");
  EXPECT_EQ(f.counts().generic, 1u);
}

TEST(OutputFilter, OverlongCandidateIsReleasedAsText) {
  RetrieveFactFilter f(64);
  std::string out = f.push("a retrieve_fact(" + std::string(100, 'x'));
  EXPECT_EQ(out, "a retrieve_fact(" + std::string(100, 'x'));
  EXPECT_EQ(f.counts().total(), 0u);
}

}  // namespace
}  // namespace tessera::frontend
