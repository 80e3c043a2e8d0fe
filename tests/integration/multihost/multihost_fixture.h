// The fixture of the multi-host tests: one ThreeHosts cluster shared by every test of the
// binary (started before the first, stopped after the last); each test starts from a settled
// cluster and leaves it settled (links up, every process running). Skips with the reason where
// network namespaces cannot be made (not root, no iproute2).
#pragma once

#include <chrono>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "three_hosts.h"

namespace tessera::testing {

class MultiHost : public ::testing::Test {
 public:
  // The shared cluster, for helper functions outside the test bodies (valid while a test runs).
  static ThreeHosts& cluster() { return *cluster_; }

 protected:
  static const std::string& unavailable() {
    static const std::string why = NetBed::unavailable();
    return why;
  }
  static void SetUpTestSuite() {
    if (unavailable().empty()) cluster_ = new ThreeHosts();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (!unavailable().empty()) GTEST_SKIP() << "SKIPPED: " << unavailable();
    ASSERT_TRUE(cluster_ && cluster_->ok()) << "the three-host cluster did not come up";
    ASSERT_TRUE(cluster_->settled(std::chrono::seconds(15))) << "not settled before the test\n" << cluster_->logs();
  }
  void TearDown() override {
    if (cluster_ == nullptr || !cluster_->ok()) return;
    cluster_->repair();
    EXPECT_TRUE(cluster_->settled(std::chrono::seconds(15)))
        << "the cluster did not recover after the test (2 workers per scheduler, frontends ready)\n"
        << cluster_->logs();
  }
  static ThreeHosts& c() { return *cluster_; }
  static inline ThreeHosts* cluster_ = nullptr;
};

inline const std::string kHostA = "10.77.0.1";
inline const std::string kHostB = "10.77.0.2";
inline const std::string kHostC = "10.77.0.3";

inline std::string completion_json(const std::string& prompt, int max_tokens, bool stream = false) {
  return nlohmann::json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true},
                        {"stream", stream}}
      .dump();
}

}  // namespace tessera::testing
