// GoogleTest assertions for Result<T> / Status (common/include/tessera/common/result.h):
//
//   ASSERT_OK(index.insert(tokens, pages));   // fails with the error's code and message
//   EXPECT_OK(store.put(key, blob));
//
// `expr` is evaluated once. ASSERT_OK returns from the test function on failure.
#pragma once

#include <gtest/gtest.h>

#define EXPECT_OK(expr)                                                   \
  do {                                                                    \
    auto ts_expect_ok_ = (expr);                                          \
    EXPECT_TRUE(ts_expect_ok_.ok()) << ts_expect_ok_.error().to_string(); \
  } while (0)
#define ASSERT_OK(expr)                                                   \
  do {                                                                    \
    auto ts_assert_ok_ = (expr);                                          \
    ASSERT_TRUE(ts_assert_ok_.ok()) << ts_assert_ok_.error().to_string(); \
  } while (0)
