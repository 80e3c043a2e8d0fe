#include "tessera/kernels/isa.h"

#include <cstdlib>
#include <string>

#include "quant_gemm.h"
#include "tessera/common/check.h"

namespace tessera::kernels {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "unknown";
}

std::optional<Isa> parse_isa(std::string_view name) {
  for (Isa i : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (name == isa_name(i)) return i;
  }
  return std::nullopt;
}

Status check_isa_env() {
  const char* e = std::getenv("TESSERA_ISA");
  if (e == nullptr || *e == '\0' || parse_isa(e).has_value()) return ok_status();
  return make_error(ErrorCode::kInvalidArgument, std::string("TESSERA_ISA=") + e +
                                                     " is not a kernel path; accepted values: scalar, avx2, avx512 (or unset)");
}

std::optional<Isa> isa_cap() {
  static const std::optional<Isa> cap = []() -> std::optional<Isa> {
    const Status st = check_isa_env();
    TS_CHECK(st.ok()) << st.error().message;
    const char* e = std::getenv("TESSERA_ISA");
    if (e == nullptr || *e == '\0') return std::nullopt;
    return parse_isa(e);
  }();
  return cap;
}

bool isa_supported(Isa isa) {
  if (const std::optional<Isa> cap = isa_cap(); cap && static_cast<uint8_t>(isa) > static_cast<uint8_t>(*cap)) {
    return false;
  }
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case Isa::kAvx512:
      return isa_supported(Isa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
  }
  return false;
}

Isa detect_isa() {
  if (isa_supported(Isa::kAvx512)) return Isa::kAvx512;
  if (isa_supported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

bool amx_tiles_enabled() {
  // kquant_amx_available() lives in an AVX-512 translation unit: ask only where that path runs.
  return isa_supported(Isa::kAvx512) && cpu::kquant_amx_available();
}

}  // namespace tessera::kernels
