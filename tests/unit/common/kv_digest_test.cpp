// The K/V content names of tessera/common/kv_digest.h: golden values (computed independently
// with Python's hashlib, so the chain's definition in docs/kv.md is what the code does) and the
// chain's sensitivity to the namespace, every token and the page boundaries.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessera/common/kv_digest.h"

namespace tessera {
namespace {

std::string hex(const KvTag& t) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : t) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

KvTag tag_of(std::string_view ns, const std::vector<std::vector<int32_t>>& pages) {
  KvPrefixDigest d(ns);
  for (const auto& p : pages) d.add_page(p);
  return d.tag();
}

TEST(KvPrefixDigest, GoldenValues) {
  // hashlib.sha256(b"tessera-kv-prefix-v1\0" + b"ns"), then sha256(d + pack("<4i", 1, 2, 3, -1)), ...
  KvPrefixDigest d("ns");
  d.add_page(std::vector<int32_t>{1, 2, 3, -1});
  EXPECT_EQ(hex(d.tag()), "990efea9411c6dc3acec46cb");
  d.add_page(std::vector<int32_t>{70000, 5});
  EXPECT_EQ(hex(d.tag()), "68cdee8ae50b304fd8687c9d");
  EXPECT_EQ(strong_hash64("dom", "abc"), 0x4e496fbd604ed5f4ULL);  // sha256(b"dom\0abc")[:8], big-endian
}

TEST(KvPrefixDigest, NamesTheNamespaceEveryTokenAndThePageBoundaries) {
  const KvTag base = tag_of("ns", {{1, 2}, {3, 4}});
  EXPECT_EQ(tag_of("ns", {{1, 2}, {3, 4}}), base);
  EXPECT_NE(tag_of("ns2", {{1, 2}, {3, 4}}), base) << "namespace";
  EXPECT_NE(tag_of("ns", {{1, 2}, {3, 5}}), base) << "last token";
  EXPECT_NE(tag_of("ns", {{0, 2}, {3, 4}}), base) << "a token of an earlier page";
  EXPECT_NE(tag_of("ns", {{1, 2, 3}, {4}}), base) << "the same tokens cut into other pages";
  EXPECT_NE(tag_of("ns", {{1, 2}}), base) << "a prefix of the chain";
  EXPECT_NE(tag_of("", {{1, 2}, {3, 4}}), KvTag{}) << "never the all-zero 'no tag'";
  EXPECT_NE(strong_hash64("a", "bc"), strong_hash64("ab", "c")) << "the domain is separated from the string";
}

// Without a secret kv_name_hash is strong_hash64; the first secret keys it (HMAC-SHA256, golden
// value from Python's hmac) and a second one changes nothing. (This process's only secret.)
TEST(KvNameHash, KeyedOnceBySetKvNameSecret) {
  EXPECT_EQ(kv_name_hash("dom", "abc"), strong_hash64("dom", "abc"));
  EXPECT_TRUE(set_kv_name_secret("k"));
  // hmac.new(b"k", b"tessera-kv-names-v1\0dom\0abc", sha256).digest()[:8]
  EXPECT_EQ(kv_name_hash("dom", "abc"), 0x38f92e6735c4c7cfULL);
  EXPECT_FALSE(set_kv_name_secret("other"));
  EXPECT_EQ(kv_name_hash("dom", "abc"), 0x38f92e6735c4c7cfULL) << "names never change once computed";
  EXPECT_NE(kv_name_hash("dom", "abd"), kv_name_hash("dom", "abc"));
  EXPECT_NE(kv_name_hash("do", "mabc"), kv_name_hash("dom", "abc"));
}

}  // namespace
}  // namespace tessera
