// Shared setup of the loader tests on synthesized and crafted GGUF files (family_test,
// moe_loader_test, moe_families_test; private to worker_loaders_test):
//   SynthDirTest       a fresh temporary directory per test, removed afterwards, and
//                      synth_load(), which writes a `tessera model synth` file into it and loads it;
//   tiny_llama_writer  a one-layer `llama` GGUF of width 32: keys, attention and norm tensors;
//   write_zeros        writes such a file with every tensor zero.
// Not thread-safe (one fixture per test, as gtest runs them).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gguf_writer.h"
#include "tessera/model/model.h"
#include "tessera/model/model_synth.h"
#include "tessera/testing/paths.h"

namespace tessera::testing {

class SynthDirTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("synth-dir-test"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `model synth --like <like> --dtype <dtype>` written to dir_/<like>.<dtype>.gguf and loaded;
  // null (the test has failed, naming the error) when either step fails.
  std::unique_ptr<Model> synth_load(const std::string& like, const std::string& dtype = "f32") {
    SynthOptions o;
    o.like = like;
    o.out_path = dir_ + "/" + like + "." + dtype + ".gguf";
    const Status parsed = parse_synth_dtype(dtype, &o);
    EXPECT_TRUE(parsed.ok()) << parsed.error().to_string();
    const Status st = synth_model(o);
    EXPECT_TRUE(st.ok()) << st.error().to_string();
    auto m = load_model(o.out_path);
    EXPECT_TRUE(m.ok()) << m.error().to_string();
    return m.ok() ? std::move(*m) : nullptr;
  }

  std::string dir_;  // the test's own directory
};

// A one-layer llama GGUF of width 32 with 2 heads: its keys, the attention matrices and the norms.
// Callers add the feed-forward tensors (dense or experts) and any keys under test.
inline loaders::GgufWriter tiny_llama_writer() {
  loaders::GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.context_length", 64);
  w.set_u32("llama.embedding_length", 32);
  w.set_u32("llama.block_count", 1);
  w.set_u32("llama.feed_forward_length", 32);
  w.set_u32("llama.attention.head_count", 2);
  for (const char* n : {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
                        "blk.0.attn_output.weight"}) {
    w.add_tensor(n, 0, {32, 32});
  }
  for (const char* n : {"blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "output_norm.weight"}) w.add_tensor(n, 0, {32});
  return w;
}

// Writes the file with every tensor's bytes zero; a test failure names the error.
inline std::string write_zeros(const loaders::GgufWriter& w, const std::string& path) {
  const Status st = w.write_file(path, [&w](size_t i, std::vector<uint8_t>& out) { out.assign(w.tensor_nbytes(i), 0); });
  EXPECT_TRUE(st.ok()) << st.error().to_string();
  return path;
}

}  // namespace tessera::testing
