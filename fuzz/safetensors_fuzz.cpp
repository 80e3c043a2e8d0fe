// libFuzzer target: safetensors parsing and Hugging Face model assembly (with the tiny
// model's config.json) on arbitrary bytes. Any abort or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>

#include "fuzz_target.h"
#include "loaded_model.h"
#include "seeds.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::loaders;
  static const bool quiet = tessera::fuzz::quiet_logs();
  (void)quiet;
  static const std::string config = tessera::fuzz::tiny_config_json();
  auto loaded = load_hf_from("fuzz-dir", config, {FileBytes::copy_of(data, size, "fuzz-dir/model.safetensors")});
  if (loaded.ok()) {
    volatile uint64_t sink = tessera::fuzz::touch_model(**loaded);
    (void)sink;
  } else {
    volatile size_t sink = loaded.error().message.size();
    (void)sink;
  }
  return 0;
}
