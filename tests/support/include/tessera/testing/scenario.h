// A tiny Given/When/Then helper for scenario tests (STYLE.md habit 9):
//
//   Scenario("lock prevents eviction")
//       .Given("a cached 3-page prefix", [&] { ... })
//       .When("it is locked and eviction asks for every page", [&] { ... })
//       .Then("nothing is evicted", [&] { EXPECT_EQ(...); });
//
// Each clause runs at once under a SCOPED_TRACE naming the scenario and the clause, so a failure
// reads like the behaviour it checks. After a fatal failure the remaining clauses are skipped.
// ASSERT_OK / EXPECT_OK (status.h) come with it, as scenario clauses usually check Results.
// Threading: clauses run on the calling thread, in order, at once.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>

#include "tessera/testing/status.h"

namespace tessera::testing {

class Scenario {
 public:
  explicit Scenario(std::string name) : name_(std::move(name)) {}
  Scenario& Given(const std::string& what, const std::function<void()>& f) { return run("Given " + what, f); }
  Scenario& When(const std::string& what, const std::function<void()>& f) { return run("When " + what, f); }
  Scenario& Then(const std::string& what, const std::function<void()>& f) { return run("Then " + what, f); }
  Scenario& And(const std::string& what, const std::function<void()>& f) { return run("And " + what, f); }

 private:
  Scenario& run(const std::string& clause, const std::function<void()>& f) {
    if (::testing::Test::HasFatalFailure()) return *this;
    SCOPED_TRACE(name_ + ": " + clause);
    f();
    return *this;
  }
  std::string name_;
};

}  // namespace tessera::testing
