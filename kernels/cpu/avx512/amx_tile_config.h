// The AMX tile configuration the int8 tile kernels share (qblock_amx.cpp, qblock_amx_q8_packed.cpp,
// kquant_amx.cpp): ldtilecfg's 64-byte operand with tmm0..3 the C tiles (16 rows x 64 bytes:
// 16 x 16 int32), tmm4, 5 the A tiles (16 rows x `group` bytes) and tmm6, 7 the B tiles
// (group / 4 rows x 64 bytes, the VNNI layout of `group` values per column).
#pragma once

#include <cstdint>

namespace tessera::kernels::cpu {

struct alignas(64) AmxTileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

inline AmxTileConfig amx_tile_config(int group) {
  AmxTileConfig c;
  for (int t = 0; t < 4; ++t) c.colsb[t] = 64, c.rows[t] = 16;
  for (int t = 4; t < 6; ++t) c.colsb[t] = static_cast<uint16_t>(group), c.rows[t] = 16;
  for (int t = 6; t < 8; ++t) c.colsb[t] = 64, c.rows[t] = static_cast<uint8_t>(group / 4);
  return c;
}

}  // namespace tessera::kernels::cpu
