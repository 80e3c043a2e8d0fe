// `tessera keys DIR [--role ROLE] [--name NAME] [--force]`: makes CURVE keys for the internal
// sockets (common/curve.h; layout and distribution in docs/security.md).
//   tessera keys DIR                          every role's pair: <role>.key + <role>.key_secret
//   tessera keys DIR --role worker --name h1  one more worker key: worker.d/h1.key (admitted
//                                             as a worker) and worker.d/h1.key_secret (for
//                                             host h1; move it there and delete it here)
// Existing keys are never overwritten without --force.
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/common/config.h"
#include "tessera/common/curve.h"
#include "tessera/tools/command.h"

namespace tessera::tools {
namespace {

struct KeysOptions {
  std::string dir;
  std::string role;  // "" = the whole set
  std::string name;
  bool force = false;
};

int run_keys(const std::vector<std::string>& args) {
  KeysOptions k;
  config::Options o("tessera keys", "keys");
  std::vector<std::string> roles;
  for (curve::Role r : curve::kAllRoles) roles.emplace_back(curve::role_name(r));
  o.add(k.dir, {.name = "dir", .help = "the key directory to write (created with mode 0700)"});
  o.positional("dir");
  std::vector<std::string> role_choices = roles;
  role_choices.insert(role_choices.begin(), "");
  o.add(k.role, {.name = "role",
                 .help = "make one extra key pair admitted as this role (needs --name): <role>.d/<name>.key and "
                         ".key_secret; \"\" = every role's pair",
                 .choices = role_choices});
  o.add(k.name, {.name = "name", .help = "file name of the extra key pair (letters, digits, '-', '_', '.')"});
  o.add(k.force, {.name = "force", .help = "overwrite existing keys (every peer then needs the new public keys)"});
  o.describe("Make ZeroMQ CURVE keys for the cluster's internal sockets (docs/security.md): one key pair per role "
             "(scheduler, kvstore, frontend, worker, client, router), or with --role/--name one more key of a role");
  if (auto exit_code = config::parse_command_line(o, args)) return *exit_code;
  if (k.dir.empty()) {
    std::fprintf(stderr, "tessera keys: give the key directory: tessera keys DIR\n");
    return 2;
  }
  if (k.role.empty() != k.name.empty()) {
    std::fprintf(stderr, "tessera keys: --role and --name go together\n");
    return 2;
  }
  if (k.role.empty()) {
    const Status st = curve::generate_key_set(k.dir, k.force);
    if (!st.ok()) {
      std::fprintf(stderr, "tessera keys: %s\n", st.error().message.c_str());
      return 1;
    }
    std::printf("wrote a CURVE key set to %s:", k.dir.c_str());
    for (const auto& r : roles) std::printf(" %s.key(_secret)", r.c_str());
    std::printf("\n");
    return 0;
  }
  for (char ch : k.name) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.') {
      std::fprintf(stderr, "tessera keys: --name '%s': use letters, digits, '-', '_', '.'\n", k.name.c_str());
      return 2;
    }
  }
  const std::string sub = (std::filesystem::path(k.dir) / (k.role + ".d")).string();
  std::error_code ec;
  std::filesystem::create_directories(sub, ec);
  if (ec) {
    std::fprintf(stderr, "tessera keys: cannot create %s: %s\n", sub.c_str(), ec.message().c_str());
    return 1;
  }
  auto pair = curve::generate_pair();
  const Status st = pair.ok() ? curve::write_pair(sub, k.name, *pair, k.force) : Status(pair.error());
  if (!st.ok()) {
    std::fprintf(stderr, "tessera keys: %s\n", st.error().message.c_str());
    return 1;
  }
  std::printf("wrote %s/%s.key (admitted as %s) and %s/%s.key_secret (give it to that process as its %s.key_secret)\n",
              sub.c_str(), k.name.c_str(), k.role.c_str(), sub.c_str(), k.name.c_str(), k.role.c_str());
  return 0;
}

}  // namespace

TESSERA_COMMAND("keys", "make CURVE keys for the cluster's internal sockets (docs/security.md)", run_keys);

}  // namespace tessera::tools
