// prefix_admin / prefix_report (docs/protocol.md "prefix_admin"): round trips and the decoder's
// checks on what an admin may send.
#include <gtest/gtest.h>

#include "tessera/common/protocol.h"

namespace tessera::protocol {
namespace {

TEST(ProtocolPrefix, AdminAndReportRoundTrip) {
  PrefixAdmin a{.id = 7, .op = "pin", .prompt_tokens = {1, 2, 3, 40000}, .routing_key = "prefix:00ff",
                .tenant = "acme", .cache_salt = "s", .workers = {"w0", "*"}, .prefix = 0, .limit = 5};
  auto d = decode(encode(Message(a)));
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  const auto& b = std::get<PrefixAdmin>(*d);
  EXPECT_EQ(b.id, 7u);
  EXPECT_EQ(b.op, "pin");
  EXPECT_EQ(b.prompt_tokens, a.prompt_tokens);
  EXPECT_EQ(b.routing_key, a.routing_key);
  EXPECT_EQ(b.tenant, "acme");
  EXPECT_EQ(b.cache_salt, "s");
  EXPECT_EQ(b.workers, a.workers);
  EXPECT_EQ(b.limit, 5);
  EXPECT_EQ(message_type(*d), "prefix_admin");

  PrefixReport r{.id = 7, .scheduler = "s0",
                 .entries = {{.worker = "w0", .hash = 0xfedcba9876543210ull, .ns_hash = 3, .tokens = 64, .pages = 4,
                              .hits = 12, .pinned = true, .error = ""},
                             {.worker = "w1", .error = "only 0 of the prefix's 64 tokens are cached"}},
                 .pinned_pages = 4, .pin_budget_pages = 512};
  auto e = decode(encode(Message(r)));
  ASSERT_TRUE(e.ok()) << e.error().to_string();
  const auto& q = std::get<PrefixReport>(*e);
  EXPECT_EQ(q.scheduler, "s0");
  ASSERT_EQ(q.entries.size(), 2u);
  EXPECT_EQ(q.entries[0].hash, 0xfedcba9876543210ull);
  EXPECT_EQ(q.entries[0].tokens, 64);
  EXPECT_EQ(q.entries[0].hits, 12);
  EXPECT_TRUE(q.entries[0].pinned);
  EXPECT_EQ(q.entries[1].error, r.entries[1].error);
  EXPECT_EQ(q.pinned_pages, 4);
  EXPECT_EQ(q.pin_budget_pages, 512);
  EXPECT_EQ(message_type(*e), "prefix_report");
}

TEST(ProtocolPrefix, BadAdminMessagesAreRefusedByField) {
  auto refused = [](PrefixAdmin a) {
    auto d = decode(encode(Message(a)));
    return d.ok() ? std::string("accepted") : d.error().message;
  };
  EXPECT_NE(refused({.id = 1, .op = "evict"}).find("'op'"), std::string::npos);
  EXPECT_NE(refused({.id = 1, .op = "pin"}).find("'prompt_tokens'"), std::string::npos);
  EXPECT_NE(refused({.id = 1, .op = "pin", .prompt_tokens = {1, -2}}).find("negative token id -2"), std::string::npos);
  EXPECT_NE(refused({.id = 1, .op = "unpin"}).find("'prefix'"), std::string::npos);
  EXPECT_NE(refused({.id = 1, .op = "list", .limit = kMaxPrefixListLimit + 1}).find("'limit'"), std::string::npos);
  EXPECT_NE(refused({.id = 1, .op = "pin", .prompt_tokens = {1}, .tenant = std::string(kMaxTenantBytes + 1, 't')}).find("too long"),
            std::string::npos);
  EXPECT_EQ(refused({.id = 1, .op = "list", .limit = kMaxPrefixListLimit}), "accepted");
}

}  // namespace
}  // namespace tessera::protocol
