// libFuzzer target: the whole GGUF load path (container parse, metadata, vocabulary,
// tensor assembly) on arbitrary bytes. Any abort or sanitizer report is a bug: bad input
// must come back as a Result error.
#include <cstddef>
#include <cstdint>

#include "fuzz_target.h"
#include "loaded_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::loaders;
  static const bool quiet = tessera::fuzz::quiet_logs();
  (void)quiet;
  auto loaded = load_gguf(FileBytes::copy_of(data, size, "fuzz.gguf"));
  if (loaded.ok()) {
    volatile uint64_t sink = tessera::fuzz::touch_model(**loaded);
    (void)sink;
  } else {
    volatile size_t sink = loaded.error().message.size();
    (void)sink;
  }
  return 0;
}
