// common/log.h: escaping, the line cap, and both formats of an event line.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tessera/common/log.h"
#include "tessera/common/log_limit.h"

namespace tessera {
namespace {

TEST(LogTest, EscapeWritesNonPrintableBytesAsHex) {
  EXPECT_EQ(log::escape("ok text"), "ok text");
  EXPECT_EQ(log::escape(std::string("a\nb\x01\xff\\", 6)), "a\\x0ab\\x01\\xff\\x5c");
}

TEST(LogTest, EscapeCapsTheLength) {
  const std::string big(10000, 'x');
  const std::string out = log::escape(big);
  EXPECT_LE(out.size(), log::kMaxLineBytes + 32);
  EXPECT_NE(out.find("...[+"), std::string::npos) << out.substr(out.size() - 40);
}

TEST(LogTest, FormatNames) {
  EXPECT_TRUE(log::set_format("json"));
  EXPECT_EQ(log::format(), log::Format::kJson);
  EXPECT_FALSE(log::set_format("xml"));
  EXPECT_EQ(log::format(), log::Format::kJson);
  EXPECT_TRUE(log::set_format("text"));
  EXPECT_EQ(log::format(), log::Format::kText);
}

TEST(LogTest, JsonEventIsOneJsonObject) {
  log::set_component("unit");
  ASSERT_TRUE(log::set_format("json"));
  ::testing::internal::CaptureStderr();
  log::event(log::kWarn, "access", {{"req", "a\"b\n"}, {"status", "200", true}, {"ttft_ms", "", true}, {"big", std::string(9000, 'y')}});
  TS_LOG(kWarn) << "binary " << std::string("\x00\x01\xfe", 3);
  const std::string out = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(log::set_format("text"));
  const size_t nl = out.find('\n');
  ASSERT_NE(nl, std::string::npos);
  auto j = nlohmann::json::parse(out.substr(0, nl));
  EXPECT_EQ(j["event"], "access");
  EXPECT_EQ(j["process"], "unit");
  EXPECT_EQ(j["level"], "warn");
  EXPECT_EQ(j["req"], "a\"b\\x0a");
  EXPECT_EQ(j["status"], 200);
  EXPECT_TRUE(j["ttft_ms"].is_null());
  EXPECT_LE(nl, log::kMaxLineBytes + 64);
  auto line = nlohmann::json::parse(out.substr(nl + 1, out.find('\n', nl + 1) - nl - 1));
  EXPECT_EQ(line["msg"], "binary \\x00\\x01\\xfe");
}

TEST(LogTest, RateLimitWritesABurstPerWindowAndCountsTheRest) {
  log::RateLimit limit(3, std::chrono::seconds(10));
  const auto t0 = log::RateLimit::Clock::now();
  uint64_t suppressed = 99;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(limit.allow(&suppressed, t0));
    EXPECT_EQ(suppressed, 0u);
  }
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(limit.allow(&suppressed, t0 + std::chrono::seconds(5)));
  // The next window: allowed again, and the first line says how many were dropped.
  EXPECT_TRUE(limit.allow(&suppressed, t0 + std::chrono::seconds(11)));
  EXPECT_EQ(suppressed, 1000u);
  EXPECT_EQ(log::suppressed_note(suppressed), "(1000 similar lines suppressed) ");
  EXPECT_TRUE(limit.allow(&suppressed, t0 + std::chrono::seconds(11)));
  EXPECT_EQ(suppressed, 0u);
}

}  // namespace
}  // namespace tessera
