// CURVE on the kvstore port (issue 18 finding 1; docs/security.md): against the real
// tessera-kvstore secured with the test key set, a plain ZeroMQ client and a CURVE client whose
// key is not admitted cannot read, overwrite or delete a stored preference; the refusals are
// counted (tessera_kvstore_refused_peers_total).
#include <gtest/gtest.h>

#include "../../unit/kvstore/synthetic_kv.h"
#include "tessera/common/curve.h"
#include "tessera/common/metrics.h"
#include "tessera/kvstore/blob.h"
#include "tessera/kvstore/client.h"
#include "tessera/testing/curve_keys.h"
#include "tessera/testing/kv_process.h"

namespace tessera::kvstore {
namespace {

constexpr uint64_t kFp = 0x5eed;

std::string blob_of(uint32_t tokens, uint32_t seed) {
  return encode_blob(testing::synthetic_kv(DType::kBF16, {3, tokens, 2, 32}, kFp, seed), {.codec = Codec::kZstd}).value();
}

// An outsider's keys: the kvstore's public key (not secret) and a key pair of its own.
curve::ClientKeys intruder_keys() {
  curve::ClientKeys k = tessera::testing::client_keys(curve::Role::kFrontend, curve::Role::kKvstore);
  k.own = curve::generate_pair().value();
  return k;
}

BlobKey pref_key(const std::string& user) { return {.fingerprint = kFp, .user = user, .hash = "pref"}; }

// On the kvstore port: an admitted client stores alice's preference; a plain peer and an
// unknown key can neither read it, overwrite it with bob's, nor delete it; it stays intact.
TEST(KvstoreCurve, UnauthenticatedClientsCannotReadOverwriteOrDelete) {
  auto kv = testing::KvProcess::start({});
  ASSERT_NE(kv, nullptr);
  auto owner = Client::connect({.endpoint = kv->endpoint(), .timeout_ms = 10000,
                                         .curve = tessera::testing::client_keys(curve::Role::kFrontend, curve::Role::kKvstore)});
  ASSERT_TRUE(owner.ok());
  const std::string alice_blob = blob_of(2, 1), bob_blob = blob_of(2, 2);
  ASSERT_TRUE((*owner)->put(pref_key("alice"), alice_blob).ok());
  ASSERT_TRUE((*owner)->put(pref_key("bob"), bob_blob).ok());

  for (const bool with_key : {false, true}) {
    SCOPED_TRACE(with_key ? "unknown CURVE key" : "plain ZeroMQ");
    auto intruder = Client::connect(
        {.endpoint = kv->endpoint(), .timeout_ms = 1000,
         .curve = with_key ? intruder_keys() : curve::ClientKeys{}});
    ASSERT_TRUE(intruder.ok());
    auto got = (*intruder)->get(pref_key("alice"));
    EXPECT_FALSE(got.ok()) << "read alice's preference";
    EXPECT_FALSE((*intruder)->put(pref_key("alice"), bob_blob).ok()) << "overwrote alice's preference";
    EXPECT_FALSE((*intruder)->remove(pref_key("bob")).ok()) << "deleted bob's preference";
  }
  auto alice = (*owner)->get(pref_key("alice"));
  ASSERT_TRUE(alice.ok()) << alice.error().to_string();
  ASSERT_TRUE(alice->found);
  EXPECT_EQ(alice->blob, alice_blob);
  auto bob = (*owner)->get(pref_key("bob"));
  ASSERT_TRUE(bob.ok() && bob->found);
  auto stats = (*owner)->stats();
  ASSERT_TRUE(stats.ok());
  auto samples = metrics::parse_text(stats->metrics);
  ASSERT_TRUE(samples.ok());
  double refused = -1;
  for (const auto& s : *samples)
    if (s.name == "tessera_kvstore_refused_peers_total") refused = s.value;
  EXPECT_GE(refused, 2.0) << "the plain client and the unknown key, each refused\n" << stats->metrics;
}

}  // namespace
}  // namespace tessera::kvstore
