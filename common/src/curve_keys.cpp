// Key files, key sets, a process's Keys and the client side (curve.h).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <zmq.hpp>

#include "tessera/common/config.h"
#include "tessera/common/curve.h"
#include "tessera/common/log.h"

namespace tessera::curve {
namespace {

namespace fs = std::filesystem;

constexpr size_t kZ85KeyChars = 40;

bool valid_z85_key(const std::string& text) {
  if (text.size() != kZ85KeyChars) return false;
  uint8_t raw[32];
  return zmq_z85_decode(raw, text.c_str()) != nullptr;
}

Result<std::string> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::kIoError, "cannot read key file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.size() > 64 * 1024) return make_error(ErrorCode::kInvalidArgument, "key file " + path + " is too large");
  return text;
}

std::string trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

// The keys of a certificate: `public-key = "..."` / `secret-key = "..."` lines (czmq's text),
// or one bare Z85 line taken as the public key.
struct ParsedKeys {
  std::string public_key, secret_key;
};
Result<ParsedKeys> parse_key_text(const std::string& text, const std::string& path) {
  ParsedKeys out;
  std::vector<std::string> bare;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#' || t == "metadata" || t == "curve") continue;
    const size_t eq = t.find('=');
    if (eq == std::string::npos) {
      bare.push_back(t);
      continue;
    }
    const std::string key = trim(std::string_view(t).substr(0, eq));
    std::string value = trim(std::string_view(t).substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    if (key == "public-key") out.public_key = value;
    if (key == "secret-key") out.secret_key = value;
  }
  if (out.public_key.empty() && out.secret_key.empty() && bare.size() == 1) out.public_key = bare[0];
  if (!out.public_key.empty() && !valid_z85_key(out.public_key))
    return make_error(ErrorCode::kInvalidArgument, "key file " + path + ": public-key is not a 40-character Z85 key");
  if (!out.secret_key.empty() && !valid_z85_key(out.secret_key))
    return make_error(ErrorCode::kInvalidArgument, "key file " + path + ": secret-key is not a 40-character Z85 key");
  return out;
}

Status write_file(const std::string& path, const std::string& text, mode_t mode) {
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return make_error(ErrorCode::kIoError, "cannot write " + tmp);
    // Restrict before any secret byte is written.
    if (::chmod(tmp.c_str(), mode) != 0) return make_error(ErrorCode::kIoError, "cannot chmod " + tmp);
    out << text;
    if (!out.flush()) return make_error(ErrorCode::kIoError, "cannot write " + tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return make_error(ErrorCode::kIoError, "cannot rename " + tmp + " to " + path);
  return ok_status();
}

std::string certificate(std::string_view name, const KeyPair& pair, bool secret) {
  std::string t = secret ? "#   ZeroMQ CURVE **Secret** Certificate (tessera keys)\n"
                           "#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.\n\n"
                         : "#   ZeroMQ CURVE Public Certificate (tessera keys)\n"
                           "#   Give it to the peers that must admit or reach this key.\n\n";
  t += "metadata\n    name = \"" + std::string(name) + "\"\ncurve\n    public-key = \"" + pair.public_key + "\"\n";
  if (secret) t += "    secret-key = \"" + pair.secret_key + "\"\n";
  return t;
}

std::string path_in(const std::string& dir, std::string_view file) { return (fs::path(dir) / std::string(file)).string(); }

}  // namespace

std::string_view role_name(Role role) {
  switch (role) {
    case Role::kScheduler: return "scheduler";
    case Role::kKvstore: return "kvstore";
    case Role::kFrontend: return "frontend";
    case Role::kWorker: return "worker";
    case Role::kClient: return "client";
    case Role::kRouter: return "router";
  }
  return "?";
}

Result<KeyPair> generate_pair() {
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0)
    return make_error(ErrorCode::kUnsupported, std::string("zmq_curve_keypair: ") + zmq_strerror(zmq_errno()) +
                                                   " (libzmq built without CURVE?)");
  return KeyPair{.public_key = pub, .secret_key = sec};
}

Status write_pair(const std::string& dir, const std::string& name, const KeyPair& pair, bool overwrite) {
  const std::string pub = path_in(dir, name + ".key"), sec = path_in(dir, name + ".key_secret");
  if (!overwrite) {
    for (const auto& p : {pub, sec})
      if (fs::exists(p)) return make_error(ErrorCode::kInvalidArgument, p + " exists (refusing to overwrite a key)");
  }
  TS_TRY(write_file(sec, certificate(name, pair, true), 0600));
  return write_file(pub, certificate(name, pair, false), 0644);
}

Result<KeyPair> read_secret_file(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::string text, slurp(path));
  TS_ASSIGN_OR_RETURN(ParsedKeys k, parse_key_text(text, path));
  if (k.secret_key.empty()) return make_error(ErrorCode::kInvalidArgument, "key file " + path + " has no secret-key");
  char derived[41];
  if (zmq_curve_public(derived, k.secret_key.c_str()) != 0)
    return make_error(ErrorCode::kInvalidArgument, "key file " + path + ": cannot derive the public key");
  if (!k.public_key.empty() && k.public_key != derived)
    return make_error(ErrorCode::kInvalidArgument, "key file " + path + ": public-key does not belong to secret-key");
  return KeyPair{.public_key = derived, .secret_key = k.secret_key};
}

Result<std::string> read_public_file(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::string text, slurp(path));
  TS_ASSIGN_OR_RETURN(ParsedKeys k, parse_key_text(text, path));
  if (k.public_key.empty()) return make_error(ErrorCode::kInvalidArgument, "key file " + path + " has no public-key");
  return k.public_key;
}

Status generate_key_set(const std::string& dir, bool overwrite) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) return make_error(ErrorCode::kIoError, "cannot create " + dir + ": " + ec.message());
    ::chmod(dir.c_str(), 0700);
  }
  if (!overwrite) {
    for (Role r : kAllRoles) {
      for (const char* ext : {".key", ".key_secret"}) {
        const std::string p = path_in(dir, std::string(role_name(r)) + ext);
        if (fs::exists(p)) return make_error(ErrorCode::kInvalidArgument, p + " exists (refusing to overwrite a key)");
      }
    }
  }
  for (Role r : kAllRoles) {
    TS_ASSIGN_OR_RETURN(KeyPair pair, generate_pair());
    TS_TRY(write_pair(dir, std::string(role_name(r)), pair, overwrite));
  }
  return ok_status();
}

bool key_set_complete(const std::string& dir) {
  for (Role r : kAllRoles) {
    if (r == Role::kRouter) continue;  // see curve.h
    if (!fs::exists(path_in(dir, std::string(role_name(r)) + ".key_secret"))) return false;
    if (!fs::exists(path_in(dir, std::string(role_name(r)) + ".key"))) return false;
  }
  return true;
}

void declare_options(config::Options& options, Settings& settings, Role self) {
  const std::string me(role_name(self));
  options.add(settings.dir, {.name = "curve-dir",
                             .help = "CURVE key directory (make one with `tessera keys DIR`): this process reads " + me +
                                     ".key_secret, the .key of each server it connects to and the allow-lists of "
                                     "its ports (docs/security.md); required unless --insecure",
                             .env = "TESSERA_CURVE_DIR"});
  options.add(settings.insecure, {.name = "insecure",
                                  .help = "run the internal ZeroMQ sockets without authentication or encryption "
                                          "(any process that reaches a port is trusted); only on an isolated network",
                                  .env = "TESSERA_INSECURE"});
}

Result<Keys> Keys::load(const Settings& settings, Role self) {
  if (settings.insecure && !settings.dir.empty())
    return make_error(ErrorCode::kInvalidArgument, "--insecure and --curve-dir " + settings.dir + " contradict each other; give one");
  if (settings.insecure) {
    Keys k = insecure();
    k.self_ = self;
    TS_LOG(kWarn) << "--insecure: internal ZeroMQ sockets are neither authenticated nor encrypted";
    return k;
  }
  if (settings.dir.empty())
    return make_error(ErrorCode::kInvalidArgument,
                      "no CURVE keys: give --curve-dir DIR (make a key set with `tessera keys DIR`; docs/security.md) "
                      "or, on an isolated network only, --insecure");
  Keys k;
  k.secure_ = true;
  k.self_ = self;
  k.dir_ = settings.dir;
  const std::string path = path_in(settings.dir, std::string(role_name(self)) + ".key_secret");
  TS_ASSIGN_OR_RETURN(k.own_, read_secret_file(path));
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 0077) != 0) {
    TS_LOG(kWarn) << path << " may be read by group/others (mode " << std::oct << (st.st_mode & 0777) << std::dec
                  << "); chmod 600 it";
  }
  return k;
}

Keys Keys::insecure() { return Keys(); }

Result<ClientKeys> Keys::client_of(Role server) const {
  if (!secure_) return ClientKeys{};
  TS_ASSIGN_OR_RETURN(std::string server_public, read_public_file(path_in(dir_, std::string(role_name(server)) + ".key")));
  return ClientKeys{.server_public = std::move(server_public), .own = own_};
}

Result<std::vector<std::string>> Keys::admitted(const std::vector<Role>& roles) const {
  std::vector<std::string> out;
  for (Role r : roles) {
    const std::string name(role_name(r));
    std::vector<std::string> files;
    std::error_code ec;
    if (fs::exists(path_in(dir_, name + ".key"), ec)) files.push_back(path_in(dir_, name + ".key"));
    const fs::path extra = fs::path(dir_) / (name + ".d");
    if (fs::is_directory(extra, ec)) {
      for (const auto& e : fs::directory_iterator(extra, ec))
        if (e.path().extension() == ".key") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      TS_ASSIGN_OR_RETURN(std::string key, read_public_file(f));
      out.push_back(std::move(key));
    }
  }
  return out;
}

void make_client(zmq::socket_t& socket, const ClientKeys& keys) {
  if (!keys.enabled()) return;
  socket.set(zmq::sockopt::curve_serverkey, keys.server_public);
  socket.set(zmq::sockopt::curve_publickey, keys.own.public_key);
  socket.set(zmq::sockopt::curve_secretkey, keys.own.secret_key);
}

}  // namespace tessera::curve
