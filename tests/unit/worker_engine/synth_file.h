// `tessera model synth` files for engine tests: synthesize a model of a named shape and weight
// type into a GGUF file under `dir`, load it (mmapped) and delete the file (the mapping stays
// readable until the model is gone). Null, with a test failure recorded, when any step fails.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "tessera/model/model.h"
#include "tessera/model/model_synth.h"

namespace tessera::worker {

inline std::unique_ptr<Model> synth_and_load(const std::string& shape, const std::string& dtype, const std::string& dir) {
  SynthOptions o;
  o.like = shape;
  o.out_path = dir + "/" + shape + "." + dtype + ".gguf";
  EXPECT_TRUE(parse_synth_dtype(dtype, &o).ok()) << dtype;
  const Status st = synth_model(o);
  EXPECT_TRUE(st.ok()) << st.error().to_string();
  auto m = load_model(o.out_path);
  EXPECT_TRUE(m.ok()) << m.error().to_string();
  std::filesystem::remove(o.out_path);
  return m.ok() ? std::move(*m) : nullptr;
}

}  // namespace tessera::worker
