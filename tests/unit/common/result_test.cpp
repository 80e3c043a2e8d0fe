#include "tessera/common/result.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return make_error(ErrorCode::kOutOfRange, "value must be > 0 (got " + std::to_string(v) + ")");
  return v;
}

Result<int> doubled(int v) {
  TS_ASSIGN_OR_RETURN(int x, parse_positive(v));
  return 2 * x;
}

Status check_all(int a, int b) {
  TS_TRY(parse_positive(a));
  TS_TRY(parse_positive(b));
  return ok_status();
}

TEST(Result, ValueAndErrorPropagate) {
  EXPECT_EQ(*doubled(21), 42);
  auto r = doubled(-1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kOutOfRange);
  EXPECT_EQ(r.error().to_string(), "out_of_range: value must be > 0 (got -1)");
}

TEST(Result, StatusPropagatesFirstError) {
  EXPECT_TRUE(check_all(1, 2).ok());
  auto s = check_all(1, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("got 0"), std::string::npos);
}

TEST(Check, FailurePrintsBothOperandsAndAborts) {
  int a = 3, b = 4;
  EXPECT_DEATH({ TS_CHECK_EQ(a, b) << "pages lost"; }, "a == b.*3 vs 4.*pages lost");
}

}  // namespace
}  // namespace tessera
