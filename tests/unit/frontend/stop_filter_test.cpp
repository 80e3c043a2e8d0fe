#include <gtest/gtest.h>

#include "tessera/frontend/stop_filter.h"

namespace tessera::frontend {
namespace {

// Feeds pieces; returns everything emitted (push outputs + flush).
std::string run(StopFilter& f, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += f.push(p);
  return out + f.flush();
}

TEST(StopFilter, HoldsPartialStopAndDropsTheRest) {
  StopFilter f({"\n\n"});
  EXPECT_EQ(f.push("Hello\n"), "Hello");
  EXPECT_FALSE(f.stopped());
  EXPECT_EQ(f.push("\nmore"), "");
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(f.matched(), "\n\n");
  EXPECT_EQ(f.push("even more"), "");
  EXPECT_EQ(f.flush(), "");
}

TEST(StopFilter, PartialPrefixReleasedWhenItDoesNotComplete) {
  StopFilter f({"The end."});
  EXPECT_EQ(f.push("So The"), "So ");
  EXPECT_EQ(f.push(" e"), "");
  EXPECT_EQ(f.push("nding"), "The ending");
  EXPECT_FALSE(f.stopped());
}

TEST(StopFilter, StopSplitAcrossManyPieces) {
  StopFilter f({"STOP"});
  EXPECT_EQ(run(f, {"a", "S", "T", "O", "P", "b"}), "a");
  EXPECT_TRUE(f.stopped());
}

TEST(StopFilter, EarliestOfSeveralStops) {
  StopFilter f({"yz", "b"});
  EXPECT_EQ(run(f, {"axyzb"}), "ax");
  EXPECT_EQ(f.matched(), "yz");
  StopFilter g({"yz", "xy"});
  EXPECT_EQ(run(g, {"axyz"}), "a");
}

TEST(StopFilter, NoStopsPassesEverything) {
  StopFilter f({});
  EXPECT_EQ(f.push("abc"), "abc");
  EXPECT_EQ(f.flush(), "");
}

TEST(StopFilter, EndOfStreamFlushesHeldPrefix) {
  StopFilter f({"<|end|>"});
  EXPECT_EQ(f.push("x<|en"), "x");
  EXPECT_EQ(f.flush(), "<|en");
}

TEST(StopFilter, MultibyteStopAndNoSplitCharacters) {
  StopFilter f({"\xc3\xa9t\xc3\xa9"});  // "été"
  // "caf" + "é" then "t": held from "é" on, released whole characters only.
  EXPECT_EQ(f.push("caf\xc3\xa9"), "caf");
  EXPECT_EQ(f.push("!"), "\xc3\xa9!");
  EXPECT_EQ(run(f, {"\xc3\xa9", "t", "\xc3\xa9", "x"}), "");
  EXPECT_TRUE(f.stopped());
}

TEST(StopFilter, NeverLeaksAnyStopPrefixExhaustive) {
  // For every split of "abc<STOP>def" into two pieces, output is exactly "abc".
  const std::string s = "abc<STOP>def";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    StopFilter f({"<STOP>"});
    std::string out = f.push(s.substr(0, cut));
    EXPECT_EQ(out.find('<'), std::string::npos) << cut;
    out += f.push(s.substr(cut));
    out += f.flush();
    EXPECT_EQ(out, "abc") << cut;
  }
}

}  // namespace
}  // namespace tessera::frontend
