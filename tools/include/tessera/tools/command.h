// The `tessera` CLI is a set of subcommands, each defined in its own tools/src/cmd_*.cpp and
// registered with a static TESSERA_COMMAND(...) object; main() dispatches on argv[1] (and
// argv[2] for grouped commands such as "model inspect").
#pragma once

#include <string>
#include <vector>

namespace tessera::tools {

// Returns the process exit code (0 ok, 1 runtime failure, 2 usage error).
using CommandFn = int (*)(const std::vector<std::string>& args);

struct CommandInfo {
  std::string name;     // "generate", "model inspect"
  std::string summary;  // one line for `tessera --help`
  CommandFn run;
};

void register_command(CommandInfo info);

struct CommandRegistrar {
  explicit CommandRegistrar(CommandInfo info) { register_command(std::move(info)); }
};

}  // namespace tessera::tools

#define TESSERA_COMMAND_CONCAT_(a, b) a##b
#define TESSERA_COMMAND_NAME_(line) TESSERA_COMMAND_CONCAT_(tessera_command_registrar_, line)
#define TESSERA_COMMAND(name, summary, fn) \
  static ::tessera::tools::CommandRegistrar TESSERA_COMMAND_NAME_(__LINE__)({name, summary, fn})
