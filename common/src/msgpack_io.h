// Private to common/: the protocol codec's use of the shared msgpack helpers
// (tessera/common/msgpack_io.h), plus the protocol-only SamplingParams layout.
#pragma once

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

// SamplingParams as flat keys of a map (temperature, top_p, ...).
void write_sampling(Writer& w, const SamplingParams& s);
Status read_sampling(const MapView& m, SamplingParams* s);

}  // namespace tessera::protocol::detail
