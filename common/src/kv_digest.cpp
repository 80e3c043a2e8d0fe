// SHA-256 names of K/V content (tessera/common/kv_digest.h).
#include "tessera/common/kv_digest.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>

#include "tessera/common/check.h"

namespace tessera {
namespace {

// SHA-256 fetched from OpenSSL's providers once for the process (EVP_sha256() in an init call
// looks it up again every time: most of a one-page digest's cost). Never freed.
const EVP_MD* sha256_md() {
  static EVP_MD* const md = EVP_MD_fetch(nullptr, "SHA2-256", nullptr);
  TS_CHECK(md != nullptr) << "OpenSSL has no SHA2-256";
  return md;
}

// One SHA-256 computation (OpenSSL's EVP interface; the SHA256_* calls are deprecated in 3.0).
// The context is the thread's, kept for the thread's life and re-initialized per computation
// (EVP_MD_CTX_new/free was ~a third of a one-page digest); a computation started while another
// is alive on the same thread gets a context of its own.
class Sha256 {
 public:
  Sha256() {
    thread_local Ctx mine;
    if (!mine.busy) {
      ctx_ = mine.ctx;
      busy_ = &mine.busy;
      mine.busy = true;
    } else {
      owned_ = EVP_MD_CTX_new();
      ctx_ = owned_;
    }
    TS_CHECK(ctx_ != nullptr && EVP_DigestInit_ex2(ctx_, sha256_md(), nullptr) == 1) << "OpenSSL SHA-256 init failed";
  }
  ~Sha256() {
    if (busy_ != nullptr) *busy_ = false;
    EVP_MD_CTX_free(owned_);
  }
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* p, size_t n) { TS_CHECK(EVP_DigestUpdate(ctx_, p, n) == 1); }
  void final(uint8_t out[32]) {
    unsigned int len = 0;
    TS_CHECK(EVP_DigestFinal_ex(ctx_, out, &len) == 1 && len == 32);
  }

 private:
  struct Ctx {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    bool busy = false;
    Ctx() = default;
    Ctx(const Ctx&) = delete;
    Ctx& operator=(const Ctx&) = delete;
    ~Ctx() { EVP_MD_CTX_free(ctx); }
  };
  EVP_MD_CTX* ctx_ = nullptr;
  EVP_MD_CTX* owned_ = nullptr;  // the nested case's own context
  bool* busy_ = nullptr;         // the thread's context, released on destruction
};

// The secret of kv_name_hash: written once under the mutex, then `set` is published (release);
// readers that see `set` read an immutable string.
std::mutex g_secret_mu;
std::string g_secret;
std::atomic<bool> g_secret_set{false};

std::atomic<uint64_t> g_pages_added{0};  // KvPrefixDigest::pages_added()

uint64_t first8(const uint8_t* d) {
  uint64_t h = 0;
  for (int i = 0; i < 8; ++i) h = (h << 8) | d[i];
  return h;
}

}  // namespace

KvPrefixDigest::KvPrefixDigest(std::string_view ns_key) {
  constexpr std::string_view kDomain{"tessera-kv-prefix-v1\0", 21};
  Sha256 c;
  c.update(kDomain.data(), kDomain.size());
  c.update(ns_key.data(), ns_key.size());
  c.final(d_.data());
}

void KvPrefixDigest::add_page(std::span<const int32_t> tokens) {
  unsigned char le[4 * 64];  // tokens as little-endian int32, in batches
  Sha256 c;
  c.update(d_.data(), d_.size());
  for (size_t i = 0; i < tokens.size();) {
    size_t n = 0;
    for (; n < 64 && i < tokens.size(); ++n, ++i) {
      const auto t = static_cast<uint32_t>(tokens[i]);
      le[4 * n] = static_cast<unsigned char>(t);
      le[4 * n + 1] = static_cast<unsigned char>(t >> 8);
      le[4 * n + 2] = static_cast<unsigned char>(t >> 16);
      le[4 * n + 3] = static_cast<unsigned char>(t >> 24);
    }
    c.update(le, 4 * n);
  }
  c.final(d_.data());
  g_pages_added.fetch_add(1, std::memory_order_relaxed);
}

uint64_t KvPrefixDigest::pages_added() { return g_pages_added.load(std::memory_order_relaxed); }

KvTag KvPrefixDigest::tag() const {
  KvTag t;
  std::memcpy(t.data(), d_.data(), t.size());
  return t;
}

uint64_t strong_hash64(std::string_view domain, std::string_view s) {
  Sha256 c;
  c.update(domain.data(), domain.size());
  const uint8_t zero = 0;
  c.update(&zero, 1);
  c.update(s.data(), s.size());
  uint8_t d[32];
  c.final(d);
  return first8(d);
}

uint64_t kv_name_hash(std::string_view domain, std::string_view s) {
  if (!g_secret_set.load(std::memory_order_acquire)) return strong_hash64(domain, s);
  std::string msg("tessera-kv-names-v1");
  msg.push_back('\0');
  msg.append(domain);
  msg.push_back('\0');
  msg.append(s);
  uint8_t d[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  TS_CHECK(HMAC(EVP_sha256(), g_secret.data(), static_cast<int>(g_secret.size()), reinterpret_cast<const uint8_t*>(msg.data()),
                msg.size(), d, &len) != nullptr &&
           len == 32)
      << "OpenSSL HMAC-SHA256 failed";
  return first8(d);
}

bool set_kv_name_secret(std::string_view secret) {
  std::lock_guard lock(g_secret_mu);
  if (g_secret_set.load(std::memory_order_relaxed)) return false;
  g_secret.assign(secret);
  g_secret_set.store(true, std::memory_order_release);
  return true;
}

}  // namespace tessera
