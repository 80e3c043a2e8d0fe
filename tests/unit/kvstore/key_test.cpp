// Keys: validation, unambiguous canonical form, signed Redis names and MACed values.
#include "tessera/kvstore/key.h"

#include <gtest/gtest.h>

#include <set>

namespace tessera::kvstore {
namespace {

TEST(BlobKey, Validation) {
  EXPECT_TRUE(validate_key({1, "alice", "h"}).ok());
  EXPECT_EQ(validate_key({0, "alice", "h"}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(validate_key({1, "", "h"}).error().message.find("user"), std::string::npos);
  EXPECT_NE(validate_key({1, "a", ""}).error().message.find("hash"), std::string::npos);
  EXPECT_FALSE(validate_key({1, std::string(257, 'u'), "h"}).ok());
  EXPECT_FALSE(validate_key({1, "a", std::string(129, 'h')}).ok());
}

TEST(BlobKey, CanonicalFormIsUnambiguous) {
  // "a|b" + "c" vs "a" + "b|c": separators inside fields cannot make two keys collide.
  EXPECT_NE(canonical_key({1, "a|b", "c"}), canonical_key({1, "a", "b|c"}));
  EXPECT_EQ(canonical_key({0x0102030405060708ULL, "bob", "xyz"}), "v1|0102030405060708|3:bob|xyz");
}

TEST(KeySigner, NamesDependOnSecretAndEveryField) {
  const KeySigner s1("secret-1"), s2("secret-2");
  const BlobKey k{7, "alice", "pref"};
  const std::string name = s1.redis_key(k);
  EXPECT_EQ(name.rfind("tessera:pref_kv:", 0), 0u);
  EXPECT_EQ(name.size(), std::string("tessera:pref_kv:").size() + 64);
  EXPECT_EQ(name, s1.redis_key(k));  // stable
  std::set<std::string> names{name, s2.redis_key(k), s1.redis_key({8, "alice", "pref"}),
                              s1.redis_key({7, "bob", "pref"}), s1.redis_key({7, "alice", "pref2"}),
                              s1.user_index_key("alice"), s1.user_index_key("bob")};
  EXPECT_EQ(names.size(), 7u);
  EXPECT_EQ(name.find("alice"), std::string::npos) << "the user must not appear in the Redis key";
}

TEST(KeySigner, SealOpenAndTamper) {
  const KeySigner s("k");
  const BlobKey a{7, "alice", "pref"}, b{7, "bob", "pref"};
  const std::string blob = "some blob bytes";
  const std::string value = s.seal(a, blob);
  auto opened = s.open(a, value);
  ASSERT_TRUE(opened.ok());
  EXPECT_EQ(*opened, blob);
  // Moved under another user's key: rejected.
  EXPECT_EQ(s.open(b, value).error().code, ErrorCode::kPermissionDenied);
  // Any flipped bit: rejected.
  for (size_t i = 0; i < value.size(); ++i) {
    std::string bad = value;
    bad[i] = static_cast<char>(bad[i] ^ 1);
    EXPECT_FALSE(s.open(a, bad).ok()) << "byte " << i;
  }
  // Another secret: rejected.
  EXPECT_EQ(KeySigner("other").open(a, value).error().code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(s.open(a, "TKV").error().code, ErrorCode::kCorruptFile);
}

// Pinned against an independent implementation (Python's hmac module):
//   hmac.new(b"Jefe", b"mac|v1|0000000000000001|1:u|h|what do ya want for nothing?", sha256)
TEST(KeySigner, MatchesIndependentHmac) {
  const KeySigner s("Jefe");
  const BlobKey k{1, "u", "h"};
  const Mac m = s.value_mac(k, "what do ya want for nothing?");
  EXPECT_EQ(to_hex(m.data(), m.size()), "06cc0d5fa64418c7e9dabd64fca9544e40f788f36124dd2e4c253816c7d88230");
  EXPECT_EQ(s.redis_key(k), "tessera:pref_kv:a71548001ef1ff0843e92f572535d3e8103a7eb6ee406307998c8e2692a10c51");
  EXPECT_EQ(s.user_index_key("u"),
            "tessera:pref_kv_idx:b87415395ecde877531e904816772991b2ba47e49d72e329244629564ff11c41");
}

}  // namespace
}  // namespace tessera::kvstore
