// ZeroMQ CURVE on Tessera's inter-process sockets: key files, the per-process key set, client
// and server socket setup, and the ZAP handler that admits only known public keys
// (docs/security.md, "Internal sockets").
//
// Key directory (`tessera keys DIR`, `--curve-dir DIR` on every process):
//   <role>.key         public key of a role (role: scheduler, kvstore, frontend, worker, client,
//                      router)
//   <role>.key_secret  that role's key pair (mode 0600; only the processes of that role need it)
//   <role>.d/*.key     further public keys admitted as that role (per-host keys, rotation)
// Files use czmq's certificate text (`public-key = "<Z85>"`, `secret-key = "<Z85>"`, keys as
// zmq_curve_keypair makes them); a file holding just one 40-character Z85 key is read too.
//
// Who talks to whom (server: the roles its port admits):
//   scheduler frontend port: frontend      scheduler worker port: worker
//   kvstore: frontend, worker              frontend client API (--zmq-curve): client
//   scheduler K/V events PUB and kv_snapshot ROUTER: router (an external router reading every
//   tenant's cached token ids; never a client key, which tenants hold)
// A process of role R reads R.key_secret, the .key of each server it connects to, and the
// allow-lists (<role>.key + <role>.d/*.key) of the roles its ports admit.
//
//   curve::Settings s;                     // bound to --curve-dir / --insecure
//   curve::declare_options(options, s, curve::Role::kWorker);
//   TS_ASSIGN_OR_RETURN(curve::Keys keys, curve::Keys::load(s, curve::Role::kWorker));
//   TS_ASSIGN_OR_RETURN(curve::ClientKeys to_sched, keys.client_of(curve::Role::kScheduler));
//   curve::make_client(socket, to_sched);  // before connect(); a no-op when insecure
//
//   TS_ASSIGN_OR_RETURN(auto auth, curve::Authenticator::start(ctx));  // one per context, before any bind
//   TS_TRY(curve::serve(socket, auth.get(), keys, {.domain = "workers", .admit = {curve::Role::kWorker}}));
//
// Ownership and threading: Keys, ClientKeys and Settings are values (copy freely; read-only use
// from any thread). The Authenticator owns one thread that answers ZAP requests for its context;
// it must be destroyed before that context (declare it after the context member). Socket setup
// functions follow ZeroMQ's rule: call them on the thread that owns the socket, before
// bind/connect.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/result.h"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace tessera::config {
class Options;
}
namespace tessera::metrics {
class Counter;
}

namespace tessera::curve {

enum class Role : uint8_t { kScheduler, kKvstore, kFrontend, kWorker, kClient, kRouter };
inline constexpr Role kAllRoles[] = {Role::kScheduler, Role::kKvstore, Role::kFrontend,
                                     Role::kWorker,    Role::kClient,  Role::kRouter};
std::string_view role_name(Role role);

// Z85 text of a CURVE key pair: 40 characters each.
struct KeyPair {
  std::string public_key;
  std::string secret_key;
};

Result<KeyPair> generate_pair();  // zmq_curve_keypair; kUnsupported when libzmq lacks CURVE

// NAME.key (public, 0644) and NAME.key_secret (both keys, 0600) in `dir`. kInvalidArgument
// (naming the file) when one exists and !overwrite.
Status write_pair(const std::string& dir, const std::string& name, const KeyPair& pair, bool overwrite);
// A key pair from a .key_secret file: both keys present, valid Z85, the public one derived from
// the secret one. Errors name the file.
Result<KeyPair> read_secret_file(const std::string& path);
// A public key from a .key file (or a .key_secret file): valid Z85. Errors name the file.
Result<std::string> read_public_file(const std::string& path);
// A key pair for every role in `dir` (created 0700 when missing). Refuses (kInvalidArgument,
// naming the file) to overwrite an existing key unless `overwrite`.
Status generate_key_set(const std::string& dir, bool overwrite = false);
// True when `dir` holds every role's pair but router's (a set `tessera up` may reuse: it runs
// no router, and a set made before the router role existed stays usable).
bool key_set_complete(const std::string& dir);

// The two options every process has (declare_options below).
struct Settings {
  std::string dir;        // --curve-dir: the key directory; "" = none
  bool insecure = false;  // --insecure: plain sockets, explicitly
};
// Declares --curve-dir (TESSERA_CURVE_DIR) and --insecure (TESSERA_INSECURE), bound to
// `settings`, with help naming the files `self` reads.
void declare_options(config::Options& options, Settings& settings, Role self);

// What a client socket needs to reach one server: all empty = plain (insecure).
struct ClientKeys {
  std::string server_public;
  KeyPair own;
  bool enabled() const { return !server_public.empty(); }
};

// The key material of one process, loaded once at start-up.
class Keys {
 public:
  // Reads `dir/<self>.key_secret` (warns when group/others may read it). Errors
  // (kInvalidArgument): neither --curve-dir nor --insecure (the message says how to make keys),
  // both, or a missing/malformed key file (named).
  static Result<Keys> load(const Settings& settings, Role self);
  static Keys insecure();  // plain sockets (tests of plain behaviour, --insecure)

  bool secure() const { return secure_; }
  Role self() const { return self_; }
  const std::string& dir() const { return dir_; }
  const KeyPair& own() const { return own_; }
  // The keys to connect to `server` (its public key from dir/<server>.key); empty when insecure.
  Result<ClientKeys> client_of(Role server) const;
  // The public keys admitted as one of `roles` now: dir/<role>.key and dir/<role>.d/*.key.
  // kInvalidArgument when a file is malformed; an empty list is not an error here.
  Result<std::vector<std::string>> admitted(const std::vector<Role>& roles) const;

 private:
  bool secure_ = false;
  Role self_ = Role::kClient;
  std::string dir_;
  KeyPair own_;
};

// Sets CURVE client options (server key, own key pair) on `socket`; a no-op when
// !keys.enabled(). Call before connect(). Throws zmq::error_t like any sockopt.
void make_client(zmq::socket_t& socket, const ClientKeys& keys);

// The ZAP handler (ZeroMQ RFC 27) of one context: every CURVE handshake on a server socket of
// that context is checked against the allow-list of the socket's domain. An unknown key is
// refused (the connection is dropped before any message is delivered), counted, and logged at
// most once per 10 s per domain with the peer's address and key (and how many were refused
// meanwhile). Allow-lists are re-read from the key directory at most once a second when a
// handshake arrives, so a key added to (or removed from) <role>.d/ takes effect for new
// connections without a restart; established connections are not dropped.
class Authenticator {
 public:
  // Binds inproc://zeromq.zap.01 in `ctx` and starts the handler thread.
  static Result<std::unique_ptr<Authenticator>> start(zmq::context_t& ctx);
  ~Authenticator();  // stops and joins the thread
  Authenticator(const Authenticator&) = delete;
  Authenticator& operator=(const Authenticator&) = delete;

  // Admits on `domain` the keys `keys.admitted(roles)` (re-read as above). `refused`, when not
  // null, is incremented for each refusal (it must outlive the Authenticator). Errors:
  // kInvalidArgument when no key is admitted at all (naming the files looked for).
  Status allow(const std::string& domain, const Keys& keys, std::vector<Role> roles, metrics::Counter* refused);
  // Also counts (and logs) the handshakes on `socket` that fail before ZAP — a plain ZeroMQ
  // peer, or a client holding a wrong server key — through a socket monitor read by the
  // handler thread. Call on the socket's thread, after allow(domain), before bind().
  Status watch(zmq::socket_t& socket, const std::string& domain);
  uint64_t refused(std::string_view domain) const;  // refusals so far; 0 for an unknown domain
  uint64_t accepted(std::string_view domain) const;

  struct Impl;

 private:
  explicit Authenticator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct ServerSpec {
  std::string domain;       // names the socket in logs and counters ("workers", "frontends")
  std::vector<Role> admit;  // client roles admitted
  metrics::Counter* refused = nullptr;  // optional refusal counter (outlives the Authenticator)
};
// Makes `socket` a CURVE server with this process's key pair on `spec.domain` (ZAP required)
// and registers the domain's allow-list with `auth` (and watch()es the socket). A no-op when !keys.secure() (auth may then
// be null). Call before bind(). Errors as Authenticator::allow; zmq errors as kUnavailable.
Status serve(zmq::socket_t& socket, Authenticator* auth, const Keys& keys, const ServerSpec& spec);

}  // namespace tessera::curve
