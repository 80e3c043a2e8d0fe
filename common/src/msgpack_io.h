// Private to common/: the protocol codec's use of the shared msgpack helpers
// (tessera/common/msgpack_io.h), plus the protocol-only SamplingParams layout.
#pragma once

#include <cstdio>
#include <string>
#include <type_traits>

#include "tessera/common/msgpack_io.h"
#include "tessera/common/step_plan.h"

namespace tessera::protocol::detail {

using msgpack_io::as_map;
using msgpack_io::MapView;
using msgpack_io::opt;
using msgpack_io::opt_array;
using msgpack_io::read;
using msgpack_io::req;
using msgpack_io::type_name;
using msgpack_io::Writer;

// kOutOfRange with `what` as the message.
inline Error range_error(const std::string& what) { return make_error(ErrorCode::kOutOfRange, what); }

// A number as error messages show it (floats with %g).
template <class T>
std::string num(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
    return buf;
  } else {
    return std::to_string(v);
  }
}

// SamplingParams as flat keys of a map (temperature, top_p, ...).
void write_sampling(Writer& w, const SamplingParams& s);
Status read_sampling(const MapView& m, SamplingParams* s);

}  // namespace tessera::protocol::detail
