// The frontend -> scheduler "invalidate_user" message (admin invalidate; docs/protocol.md).
#include <gtest/gtest.h>

#include "tessera/common/protocol.h"

namespace tessera::protocol {
namespace {

TEST(InvalidateUserWire, RoundTripAndTypeName) {
  const std::string user = std::string("al\0ice", 6) + " \xC3\xA9";
  auto m = decode(encode(InvalidateUser{.id = 77, .user = user}));
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  auto* inv = std::get_if<InvalidateUser>(&*m);
  ASSERT_NE(inv, nullptr);
  EXPECT_EQ(inv->id, 77u);
  EXPECT_EQ(inv->user, user);
  EXPECT_EQ(message_type(*m), "invalidate_user");
  EXPECT_EQ(message_id(*m), 77u);
}

TEST(InvalidateUserWire, EmptyUserIsRefusedNamingTheField) {
  auto m = decode(encode(InvalidateUser{.id = 5, .user = ""}));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(m.error().message.find("user"), std::string::npos) << m.error().message;
}

}  // namespace
}  // namespace tessera::protocol
