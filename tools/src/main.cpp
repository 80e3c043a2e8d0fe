// `tessera` — one binary, many subcommands (see tools/include/tessera/tools/command.h).
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "tessera/common/version.h"
#include "tessera/tools/command.h"

namespace tessera::tools {
namespace {

std::map<std::string, CommandInfo>& registry() {
  static std::map<std::string, CommandInfo> commands;
  return commands;
}

void print_help() {
  std::printf("usage: tessera <command> [options]   (tessera <command> --help for its options; tessera --version)\n\n"
              "commands:\n");
  for (const auto& [name, info] : registry()) std::printf("  %-18s %s\n", name.c_str(), info.summary.c_str());
}

}  // namespace

void register_command(CommandInfo info) { registry()[info.name] = std::move(info); }

}  // namespace tessera::tools

int main(int argc, char** argv) {
  using namespace tessera::tools;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && args[0] == "--version") {
    std::printf("tessera %s\n", std::string(tessera::kVersion).c_str());
    return 0;
  }
  if (args.size() == 1 && args[0] == "--help-markdown") {  // docs/configuration.md
    std::printf("## tessera\n\nOne binary, many subcommands: `tessera <command> [options]`.\n\n| command | summary |\n|---|---|\n");
    for (const auto& [name, info] : registry()) std::printf("| `tessera %s` | %s |\n", name.c_str(), info.summary.c_str());
    return 0;
  }
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_help();
    return args.empty() ? 2 : 0;
  }
  // Grouped commands ("model inspect") take precedence over single words.
  if (args.size() >= 2) {
    auto it = registry().find(args[0] + " " + args[1]);
    if (it != registry().end()) return it->second.run(std::vector<std::string>(args.begin() + 2, args.end()));
  }
  auto it = registry().find(args[0]);
  if (it != registry().end()) return it->second.run(std::vector<std::string>(args.begin() + 1, args.end()));
  std::fprintf(stderr, "tessera: unknown command '%s'\n\n", args[0].c_str());
  print_help();
  return 2;
}
