// Runs a fuzz target without libFuzzer (any compiler): the crafted seeds, the files given on
// the command line (or every file in a given directory), and deterministic mutations of
// them (bit flips, interesting integers over header fields, truncations, insertions,
// deletions). A crash or abort fails the run; bad inputs must come back as errors.
//
//   fuzz_replay --kind gguf|safetensors [--mutations N] [--seconds S] [PATH...]
//   fuzz_replay --kind gguf --write-seeds DIR     (writes the crafted seeds as files)
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "seeds.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using Bytes = std::vector<uint8_t>;

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }

 private:
  uint64_t s_;
};

// Offsets in the first 2 KiB (headers, metadata, tensor infos) are picked half the time.
size_t pick_offset(Rng& rng, size_t size) {
  if (size == 0) return 0;
  if (rng.below(2) == 0) return rng.below(std::min<size_t>(size, 2048));
  return rng.below(size);
}

void mutate(Rng& rng, Bytes& b) {
  static const uint64_t kInteresting[] = {0, 1, 2, 3, 4, 7, 8, 12, 31, 32, 33, 255, 256, 0x7fff, 0xffff, 0x7fffffff,
                                          0x80000000ULL, 0xffffffffULL, 0x100000000ULL, 0x7fffffffffffffffULL,
                                          0x8000000000000000ULL, 0xffffffffffffffffULL};
  const int ops = 1 + static_cast<int>(rng.below(4));
  for (int k = 0; k < ops; ++k) {
    switch (rng.below(8)) {
      case 0:  // flip one bit
        if (!b.empty()) b[pick_offset(rng, b.size())] ^= static_cast<uint8_t>(1u << rng.below(8));
        break;
      case 1:  // one byte to an interesting value
        if (!b.empty()) b[pick_offset(rng, b.size())] = static_cast<uint8_t>(kInteresting[rng.below(std::size(kInteresting))]);
        break;
      case 2:
      case 3: {  // a 4- or 8-byte little-endian integer to an interesting value
        const size_t width = rng.below(2) ? 8 : 4;
        if (b.size() < width) break;
        const size_t at = std::min(pick_offset(rng, b.size()), b.size() - width);
        const uint64_t v = kInteresting[rng.below(std::size(kInteresting))];
        std::memcpy(b.data() + at, &v, width);
        break;
      }
      case 4:  // truncate
        b.resize(pick_offset(rng, b.size()));
        break;
      case 5: {  // insert random bytes
        const size_t at = pick_offset(rng, b.size() + 1);
        Bytes ins(1 + rng.below(16));
        for (auto& x : ins) x = static_cast<uint8_t>(rng.next());
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(std::min(at, b.size())), ins.begin(), ins.end());
        break;
      }
      case 6: {  // delete a range
        if (b.empty()) break;
        const size_t at = pick_offset(rng, b.size());
        const size_t n = std::min(b.size() - at, 1 + rng.below(64));
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + n));
        break;
      }
      default: {  // copy a range over another (duplicates structure)
        if (b.size() < 2) break;
        const size_t from = pick_offset(rng, b.size()), to = pick_offset(rng, b.size());
        const size_t n = std::min({b.size() - from, b.size() - to, 1 + rng.below(64)});
        std::memmove(b.data() + to, b.data() + from, n);
        break;
      }
    }
  }
}

bool read_file(const std::string& path, Bytes& out) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return false;
  out.clear();
  uint8_t buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) out.insert(out.end(), buf, buf + n);
  return std::ferror(f.get()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string kind, write_dir;
  long mutations = 3000;
  double seconds = 15.0;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--kind" && i + 1 < argc) {
      kind = argv[++i];
    } else if (a == "--mutations" && i + 1 < argc) {
      mutations = std::atol(argv[++i]);
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--write-seeds" && i + 1 < argc) {
      write_dir = argv[++i];
    } else {
      paths.push_back(a);
    }
  }
  if (kind != "gguf" && kind != "safetensors") {
    std::fprintf(stderr, "usage: %s --kind gguf|safetensors [--mutations N] [--seconds S] [--write-seeds DIR] [PATH...]\n",
                 argv[0]);
    return 2;
  }
  std::vector<Bytes> seeds = tessera::fuzz::crafted_seeds(kind);
  if (!write_dir.empty()) {
    std::filesystem::create_directories(write_dir);
    for (size_t i = 0; i < seeds.size(); ++i) {
      const std::string p = write_dir + "/crafted-" + std::to_string(i) + "." + kind;
      std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(seeds[i].data()),
                                               static_cast<std::streamsize>(seeds[i].size()));
    }
    std::printf("wrote %zu %s seeds to %s\n", seeds.size(), kind.c_str(), write_dir.c_str());
    return 0;
  }
  for (const std::string& p : paths) {
    std::error_code ec;
    std::vector<std::string> files;
    if (std::filesystem::is_directory(p, ec)) {
      for (const auto& e : std::filesystem::directory_iterator(p)) {
        if (e.is_regular_file()) files.push_back(e.path().string());
      }
    } else {
      files.push_back(p);
    }
    for (const std::string& f : files) {
      Bytes b;
      if (!read_file(f, b)) {
        std::fprintf(stderr, "cannot read seed %s\n", f.c_str());
        return 1;
      }
      seeds.push_back(std::move(b));
    }
  }
  for (const Bytes& s : seeds) LLVMFuzzerTestOneInput(s.data(), s.size());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  Rng rng(0x7e55e7a);
  long done = 0;
  for (; done < mutations && std::chrono::steady_clock::now() < deadline; ++done) {
    Bytes b = seeds[static_cast<size_t>(done) % seeds.size()];
    mutate(rng, b);
    LLVMFuzzerTestOneInput(b.data(), b.size());
  }
  std::printf("%s: %zu seeds and %ld mutations ran without a crash\n", kind.c_str(), seeds.size(), done);
  return 0;
}
