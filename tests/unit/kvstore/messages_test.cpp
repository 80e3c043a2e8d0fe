// The kvstore's msgpack messages: round trips, unknown fields, and no crash on any bytes.
#include "messages.h"

#include <gtest/gtest.h>

#define MSGPACK_NO_BOOST 1
#include <msgpack.hpp>

#include <random>

namespace tessera::kvstore::wire {
namespace {

Request put_request() {
  Request r;
  r.id = 77;
  r.op = Op::kPut;
  r.key = {0xdeadbeefULL, "alice", "hash-1"};
  r.blob = "\x00\x01\x02 binary \xff";
  r.ttl_s = 60;
  return r;
}

TEST(KvMessages, RequestRoundTripForEveryOp) {
  for (Op op : {Op::kPut, Op::kGet, Op::kExists, Op::kDelete, Op::kInvalidateUser, Op::kClear, Op::kStats}) {
    Request r = put_request();
    r.op = op;
    const std::string body = encode_request(r);
    auto back = decode_request(body);
    ASSERT_TRUE(back.ok()) << op_name(op) << ": " << back.error().to_string();
    EXPECT_EQ(back->op, op);
    EXPECT_EQ(back->id, 77u);
    if (op == Op::kPut || op == Op::kGet || op == Op::kExists || op == Op::kDelete) {
      EXPECT_EQ(back->key, r.key);
    }
    if (op == Op::kInvalidateUser) {
      EXPECT_EQ(back->key.user, "alice");
    }
    if (op == Op::kPut) {
      EXPECT_EQ(back->blob, r.blob);
      EXPECT_EQ(back->ttl_s, 60u);
    }
  }
}

TEST(KvMessages, ReplyRoundTrip) {
  Reply r;
  r.id = 5;
  r.type = "get_reply";
  r.found = true;
  r.tier = "l2";
  r.blob_view = "blob bytes";
  auto back = decode_reply(encode_reply(r));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->type, "get_reply");
  EXPECT_EQ(back->id, 5u);
  EXPECT_TRUE(back->found);
  EXPECT_EQ(back->tier, "l2");
  EXPECT_EQ(back->blob, "blob bytes");
  auto err = decode_reply(encode_error(9, ErrorCode::kCorruptFile, "bad"));
  ASSERT_TRUE(err.ok());
  EXPECT_EQ(err->type, "error");
  EXPECT_EQ(static_cast<int32_t>(err->code), 301);  // the same integer on the wire
  EXPECT_EQ(err->code, ErrorCode::kCorruptFile);
  EXPECT_EQ(err->message, "bad");
}

TEST(KvMessages, UnknownFieldsIgnoredAndBinKeysAccepted) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> p(buf);
  p.pack_map(8);
  p.pack("v"), p.pack(1);
  p.pack("type"), p.pack("get");
  p.pack("id"), p.pack(3);
  p.pack("fingerprint"), p.pack(uint64_t{9});
  p.pack("user"), p.pack_bin(3), p.pack_bin_body("bob", 3);
  p.pack("hash"), p.pack("h");
  p.pack("future_field"), p.pack_array(2), p.pack(1), p.pack("x");
  p.pack(42), p.pack("non-string key");
  auto r = decode_request(std::string_view(buf.data(), buf.size()));
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->key.user, "bob");
  EXPECT_EQ(r->op, Op::kGet);
}

TEST(KvMessages, EveryTruncationAndFlipIsAnErrorOrValidNeverACrash) {
  const std::string body = encode_request(put_request());
  for (size_t len = 0; len < body.size(); ++len) {
    EXPECT_FALSE(decode_request(std::string_view(body).substr(0, len)).ok()) << len;
    (void)peek_id(std::string_view(body).substr(0, len));
  }
  for (size_t i = 0; i < body.size(); ++i) {
    for (uint8_t x : {0x01, 0x80, 0xff}) {
      std::string bad = body;
      bad[i] = static_cast<char>(bad[i] ^ x);
      auto r = decode_request(bad);  // may decode (e.g. a changed hash byte) — must not crash
      if (!r.ok()) continue;
      // Whatever decodes is fully validated.
      if (r->op == Op::kInvalidateUser) {
        EXPECT_EQ(validate_user(r->key.user), "");
      } else if (r->op != Op::kClear && r->op != Op::kStats) {
        EXPECT_TRUE(validate_key(r->key).ok());
      }
    }
  }
}

TEST(KvMessages, RandomBytesNeverCrash) {
  std::mt19937 rng(1234);
  int decoded = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string bytes(rng() % 64, '\0');
    for (auto& c : bytes) c = static_cast<char>(rng());
    if (!bytes.empty() && iter % 2 == 0) bytes[0] = static_cast<char>(0x80 | (rng() % 16));  // a fixmap
    decoded += decode_request(bytes).ok() ? 1 : 0;
    (void)decode_reply(bytes);
    (void)peek_id(bytes);
  }
  EXPECT_EQ(decoded, 0);
}

TEST(KvMessages, DeclaredHugeSizesDoNotAllocate) {
  // A map32 header claiming 2^32-1 entries, a bin32 claiming 4 GiB: refused, not allocated.
  EXPECT_FALSE(decode_request(std::string("\xdf\xff\xff\xff\xff", 5)).ok());
  EXPECT_FALSE(decode_request(std::string("\x81\xa4" "blob" "\xc6\xff\xff\xff\xff", 11)).ok());
}

}  // namespace
}  // namespace tessera::kvstore::wire
