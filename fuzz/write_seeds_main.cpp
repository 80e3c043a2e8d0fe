// Writes the crafted seed corpus of one fuzz target as files (tests/run.sh's fuzz step):
//
//   fuzz_write_seeds --kind gguf|safetensors|protocol|kvstore|frontend|kvstore_blob --write-seeds DIR
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "message_seeds.h"
#include "seeds.h"

int main(int argc, char** argv) {
  std::string kind, dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--kind") kind = argv[i + 1];
    else if (a == "--write-seeds") dir = argv[i + 1];
  }
  std::vector<std::vector<uint8_t>> seeds;
  if (kind == "gguf" || kind == "safetensors") seeds = tessera::fuzz::crafted_seeds(kind);
  else if (kind == "protocol") seeds = tessera::fuzz::protocol_seeds();
  else if (kind == "kvstore") seeds = tessera::fuzz::kvstore_seeds();
  else if (kind == "frontend") seeds = tessera::fuzz::frontend_seeds();
  else if (kind == "kvstore_blob") seeds = tessera::fuzz::kvstore_blob_seeds();
  if (seeds.empty() || dir.empty()) {
    std::fprintf(stderr, "usage: %s --kind gguf|safetensors|protocol|kvstore|frontend|kvstore_blob --write-seeds DIR\n", argv[0]);
    return 2;
  }
  std::filesystem::create_directories(dir);
  for (size_t i = 0; i < seeds.size(); ++i) {
    const std::string p = dir + "/crafted-" + std::to_string(i) + "." + kind;
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(seeds[i].data()), static_cast<std::streamsize>(seeds[i].size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", p.c_str());
      return 1;
    }
  }
  std::printf("wrote %zu %s seeds to %s\n", seeds.size(), kind.c_str(), dir.c_str());
  return 0;
}
