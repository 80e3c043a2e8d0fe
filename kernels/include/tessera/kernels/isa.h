// Instruction-set paths of the CPU kernels, chosen at run time.
//
// Every kernel with SIMD code has one implementation per Isa, compiled in its own translation
// unit with that ISA's flags (kernels/cpu/avx2/, kernels/cpu/avx512/), plus the portable scalar
// path, which is the oracle the others are tested against. Nothing is compiled with
// -march=native; detect_isa() asks the CPU (__builtin_cpu_supports) which paths may run.
//
// TESSERA_ISA=scalar|avx2|avx512 (read once per process) caps the ISA: the process behaves as
// if the CPU lacked every path above it (isa_supported() false, detect_isa() at most the cap,
// so the AVX-512 VNNI and AMX tiles are off too). Tests use it to run the AVX2 dispatch on an
// AVX-512 machine (kernels_avx2_test). An unknown value is reported by check_isa_env() (a
// Status naming the variable, the value and the accepted ones), which Engine::create and the
// programs' startup call first; isa_cap() itself treats it as a fatal error (TS_CHECK), for a
// program that skipped the check.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "tessera/common/result.h"

namespace tessera::kernels {

enum class Isa : uint8_t {
  kScalar = 0,  // portable C++; the reference for tests
  kAvx2 = 1,    // AVX2 + FMA + F16C
  kAvx512 = 2,  // AVX-512 F/BW/VL/DQ + VNNI (Ice Lake, Sapphire Rapids, Zen 4 and later)
};

const char* isa_name(Isa isa);  // "scalar", "avx2", "avx512"
std::optional<Isa> parse_isa(std::string_view name);
bool isa_supported(Isa isa);    // this CPU can run the path (and TESSERA_ISA allows it)
Isa detect_isa();               // the best supported path
std::optional<Isa> isa_cap();   // TESSERA_ISA, when set
// TESSERA_ISA as set now: ok when unset, empty or a kernel path; else kInvalidArgument with
// "TESSERA_ISA=<value> is not a kernel path; accepted values: scalar, avx2, avx512 (or unset)".
Status check_isa_env();
// Whether the AVX-512 path uses its AMX-INT8 tiles (K-quant and 32-value block GEMMs): the CPU
// has AMX-TILE and AMX-INT8, the kernel grants the tile state, TESSERA_ISA allows AVX-512 and
// TESSERA_KQUANT_AMX is not 0 (read once).
bool amx_tiles_enabled();

}  // namespace tessera::kernels
