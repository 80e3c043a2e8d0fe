#include "hf_json.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <unordered_map>
#include <nlohmann/json.hpp>

#include "base.h"
#include "bpe.h"
#include "spm.h"

namespace tessera::tok {
namespace {

using nlohmann::json;

constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

Error unsupported(const std::string& path, const std::string& what) {
  return make_error(ErrorCode::kUnsupported, path + ": unsupported " + what);
}

std::string type_of(const json& j) {
  if (!j.is_object()) return "(not an object)";
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "(no type)";
}

Result<std::vector<PreTokenizerStep>> regex_step(std::string_view pattern, bool literal, SplitBehavior behavior,
                                                 bool invert) {
  TS_ASSIGN_OR_RETURN(auto re, Regex::compile(pattern, literal));
  PreTokenizerStep step;
  step.kind = PreTokenizerStep::Kind::kSplit;
  step.regex = std::move(re);
  step.behavior = behavior;
  step.invert = invert;
  std::vector<PreTokenizerStep> steps;
  steps.push_back(std::move(step));
  return steps;
}

Result<PreTokenizerStep> byte_level_step(bool add_prefix_space, bool use_regex) {
  PreTokenizerStep step;
  step.kind = PreTokenizerStep::Kind::kByteLevel;
  step.add_prefix_space = add_prefix_space;
  if (use_regex) {
    TS_ASSIGN_OR_RETURN(step.regex, Regex::compile(kGpt2Pattern, false));
  }
  return step;
}

Result<SplitBehavior> parse_behavior(const std::string& path, const std::string& b) {
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return unsupported(path, "Split behavior '" + b + "'");
}

Status parse_pre(const std::string& path, const json& j, std::vector<PreTokenizerStep>& steps) {
  if (j.is_null()) return ok_status();
  const std::string type = type_of(j);
  if (type == "Sequence") {
    for (const json& p : j.at("pretokenizers")) TS_TRY(parse_pre(path, p, steps));
    return ok_status();
  }
  if (type == "ByteLevel") {
    TS_ASSIGN_OR_RETURN(auto step, byte_level_step(j.value("add_prefix_space", true), j.value("use_regex", true)));
    steps.push_back(std::move(step));
    return ok_status();
  }
  std::vector<PreTokenizerStep> add;
  if (type == "Split") {
    const json& pat = j.at("pattern");
    const bool literal = pat.contains("String");
    const std::string pattern = literal ? pat.at("String").get<std::string>() : pat.at("Regex").get<std::string>();
    TS_ASSIGN_OR_RETURN(auto behavior, parse_behavior(path, j.at("behavior").get<std::string>()));
    TS_ASSIGN_OR_RETURN(add, regex_step(pattern, literal, behavior, j.value("invert", false)));
  } else if (type == "Digits") {
    const bool individual = j.value("individual_digits", false);
    TS_ASSIGN_OR_RETURN(add, regex_step(individual ? R"(\p{N})" : R"(\p{N}+)", false, SplitBehavior::kIsolated, false));
  } else if (type == "Whitespace") {
    TS_ASSIGN_OR_RETURN(add, regex_step(R"(\w+|[^\w\s]+)", false, SplitBehavior::kRemoved, true));
  } else if (type == "WhitespaceSplit") {
    TS_ASSIGN_OR_RETURN(add, regex_step(R"(\s+)", false, SplitBehavior::kRemoved, false));
  } else {
    return unsupported(path, "pre_tokenizer type '" + type + "'");
  }
  for (auto& s : add) steps.push_back(std::move(s));
  return ok_status();
}

Status check_decoder(const std::string& path, const json& j) {
  const std::string type = type_of(j);
  if (type == "ByteLevel") return ok_status();
  if (type == "Sequence" && j.contains("decoders") && j.at("decoders").size() == 1) return check_decoder(path, j.at("decoders")[0]);
  return unsupported(path, "decoder '" + (j.is_null() ? std::string("null") : type) + "' (only ByteLevel)");
}

Status parse_post(const std::string& path, const json& j, const std::unordered_map<std::string, int32_t>& ids,
                  ByteLevelBpeSpec& spec) {
  if (j.is_null()) return ok_status();
  const std::string type = type_of(j);
  if (type == "ByteLevel") return ok_status();
  if (type == "Sequence") {
    for (const json& p : j.at("processors")) TS_TRY(parse_post(path, p, ids, spec));
    return ok_status();
  }
  if (type != "TemplateProcessing") return unsupported(path, "post_processor '" + type + "'");
  const json& special = j.at("special_tokens");
  bool seen_sequence = false;
  for (const json& item : j.at("single")) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    const std::string name = item.at("SpecialToken").at("id").get<std::string>();
    std::vector<int32_t> tok_ids;
    if (special.contains(name)) {
      tok_ids = special.at(name).at("ids").get<std::vector<int32_t>>();
    } else if (auto it = ids.find(name); it != ids.end()) {
      tok_ids.push_back(it->second);
    } else {
      return make_error(ErrorCode::kCorruptFile, path + ": post_processor special token '" + name + "' is not defined");
    }
    auto& dst = seen_sequence ? spec.suffix_ids : spec.prefix_ids;
    dst.insert(dst.end(), tok_ids.begin(), tok_ids.end());
  }
  return ok_status();
}

// "bos_token": "<s>" or {"content": "<s>", ...} in tokenizer_config.json.
int32_t config_token(const json& cfg, const char* key, const std::unordered_map<std::string, int32_t>& ids) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return -1;
  std::string content;
  if (it->is_string()) content = it->get<std::string>();
  else if (it->is_object() && it->contains("content") && it->at("content").is_string()) content = it->at("content").get<std::string>();
  auto found = ids.find(content);
  return found == ids.end() ? -1 : found->second;
}

// "bos_token_id": 1 (or a list, first wins) in config.json.
int32_t config_id(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return -1;
  if (it->is_number_integer()) return it->get<int32_t>();
  if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) return (*it)[0].get<int32_t>();
  return -1;
}

std::optional<json> read_json_beside(const std::string& path, const char* name) {
  const auto p = std::filesystem::path(path).parent_path() / name;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) return std::nullopt;
  auto text = read_whole_file(p.string(), name);
  if (!text.ok()) return std::nullopt;
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

// SentencePiece-style BPE as Llama 2 / Mistral / TinyLlama ship it: pieces spell space as
// U+2581, "<0xXX>" byte-fallback pieces, a normalizer Prepend("▁") + Replace(" " -> "▁") or a
// Metaspace pre-tokenizer. Served by the SentencePiece implementation: a piece's score is
// minus the rank of the first merge that produces it, so "merge the lowest-ranked pair" and
// "merge the highest-scoring result" pick the same pair (Hugging Face's converter writes the
// merges in SentencePiece score order).
Result<std::unique_ptr<Tokenizer>> build_sentencepiece_style(const std::string& path, const json& j) {
  const json& model = j.at("model");
  if (!model.contains("vocab") || !model.at("vocab").is_object() || !model.contains("merges") ||
      !model.at("merges").is_array()) {
    return make_error(ErrorCode::kCorruptFile, path + ": tokenizer.json model.vocab/merges missing or of the wrong type");
  }
  const std::string space = "\xE2\x96\x81";
  bool prepend = false, replace = false, first_only = false, metaspace = false;
  const json norm = j.value("normalizer", json());
  const json pre = j.value("pre_tokenizer", json());
  if (!norm.is_null()) {
    const json list = type_of(norm) == "Sequence" ? norm.at("normalizers") : json::array({norm});
    for (const json& n : list) {
      const std::string t = type_of(n);
      if (t == "Prepend" && n.value("prepend", std::string()) == space) {
        prepend = true;
      } else if (t == "Replace" && n.at("pattern").value("String", std::string()) == " " &&
                 n.value("content", std::string()) == space) {
        replace = true;
      } else {
        return unsupported(path, "normalizer '" + t + "' in a SentencePiece-style tokenizer.json");
      }
    }
  }
  if (type_of(pre) == "Metaspace") {
    if (pre.value("replacement", space) != space || pre.value("split", false)) {
      return unsupported(path, "Metaspace options (replacement other than U+2581, or split = true)");
    }
    replace = true;
    const std::string scheme = pre.value("prepend_scheme", pre.value("add_prefix_space", true) ? "always" : "never");
    prepend = scheme != "never";
    first_only = scheme == "first";
    metaspace = true;
  } else if (type_of(pre) == "Split" && replace && pre.contains("pattern") && pre.at("pattern").is_object() &&
             pre.at("pattern").value("String", std::string()) == " ") {
    // Gemma 3: the normalizer already turned every ' ' into U+2581, so splitting on ' ' never
    // splits anything: a no-op.
  } else if (!pre.is_null()) {
    return unsupported(path, "pre_tokenizer '" + type_of(pre) + "' in a SentencePiece-style tokenizer.json");
  }
  if (!replace) return unsupported(path, "SentencePiece-style tokenizer.json that does not map ' ' to U+2581");

  SpmVocab v;
  v.source = path;
  v.space = space;
  v.add_space_prefix = prepend;
  v.prefix_first_run_only = first_only;
  v.prefix_unless_spaced = metaspace;
  v.merge_user_defined = true;
  std::unordered_map<std::string, int32_t> ids;
  for (const auto& [tok, id_json] : model.at("vocab").items()) {
    const auto id = id_json.get<int64_t>();
    if (id < 0 || id > (1 << 24)) return make_error(ErrorCode::kCorruptFile, path + ": token '" + tok + "' has id " + std::to_string(id));
    if (static_cast<size_t>(id) >= v.pieces.size()) v.pieces.resize(static_cast<size_t>(id) + 1);
    v.pieces[static_cast<size_t>(id)] = tok;
    ids.emplace(tok, static_cast<int32_t>(id));
  }
  constexpr float kNoMerge = -1e30f;  // pieces no merge produces (single characters)
  v.scores.assign(v.pieces.size(), kNoMerge);
  const json& merges = model.at("merges");
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string merged;
    if (m.is_string()) {
      std::string str = m.get<std::string>();
      const size_t sp = str.find(' ');
      if (sp == std::string::npos) return make_error(ErrorCode::kCorruptFile, path + ": merge " + std::to_string(rank) + " '" + str + "' is not two tokens");
      merged = str.erase(sp, 1);
    } else if (m.is_array() && m.size() == 2) {
      merged = m[0].get<std::string>() + m[1].get<std::string>();
    } else {
      return make_error(ErrorCode::kCorruptFile, path + ": merge " + std::to_string(rank) + " is neither \"a b\" nor [a, b]");
    }
    auto it = ids.find(merged);
    if (it == ids.end()) return make_error(ErrorCode::kCorruptFile, path + ": merge " + std::to_string(rank) + " produces '" + merged + "', which is not in the vocabulary");
    float& score = v.scores[static_cast<size_t>(it->second)];
    if (score == kNoMerge) score = -static_cast<float>(rank);
  }
  v.kinds.assign(v.pieces.size(), PieceKind::kNormal);
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    const std::string& p = v.pieces[i];
    if (p.empty()) v.kinds[i] = PieceKind::kUnused;
    if (p.size() == 6 && p.starts_with("<0x") && p.back() == '>') v.kinds[i] = PieceKind::kByte;
  }
  if (j.contains("added_tokens")) {
    for (const json& a : j.at("added_tokens")) {
      const auto id = a.at("id").get<int64_t>();
      const std::string content = a.at("content").get<std::string>();
      if (id < 0 || id > (1 << 24)) return make_error(ErrorCode::kCorruptFile, path + ": added token '" + content + "' has id " + std::to_string(id));
      if (static_cast<size_t>(id) >= v.pieces.size()) {
        v.pieces.resize(static_cast<size_t>(id) + 1);
        v.scores.resize(v.pieces.size(), kNoMerge);
        v.kinds.resize(v.pieces.size(), PieceKind::kUnused);
      }
      v.pieces[static_cast<size_t>(id)] = content;
      v.kinds[static_cast<size_t>(id)] = a.value("special", false) ? PieceKind::kControl : PieceKind::kUserDefined;
      ids.insert_or_assign(content, static_cast<int32_t>(id));
      v.literal.push_back({.content = content, .id = static_cast<int32_t>(id), .lstrip = a.value("lstrip", false),
                           .rstrip = a.value("rstrip", false), .single_word = a.value("single_word", false)});
    }
  }
  if (model.contains("unk_token") && model.at("unk_token").is_string()) {
    if (auto it = ids.find(model.at("unk_token").get<std::string>()); it != ids.end()) {
      v.unk_id = it->second;
      v.kinds[static_cast<size_t>(it->second)] = PieceKind::kUnknown;
    }
  }
  ByteLevelBpeSpec post;  // reuse the post-processor parser for its prefix ids
  TS_TRY(parse_post(path, j.value("post_processor", json()), ids, post));
  if (!post.suffix_ids.empty() || post.prefix_ids.size() > 1) {
    return unsupported(path, "post_processor template other than [BOS] + text for a SentencePiece-style tokenizer");
  }
  v.add_bos = !post.prefix_ids.empty();
  if (v.add_bos) v.bos_id = post.prefix_ids.front();
  if (auto cfg = read_json_beside(path, "tokenizer_config.json")) {
    if (v.bos_id < 0) v.bos_id = config_token(*cfg, "bos_token", ids);
    v.eos_id = config_token(*cfg, "eos_token", ids);
  }
  if (auto cfg = read_json_beside(path, "config.json")) {
    if (v.bos_id < 0) v.bos_id = config_id(*cfg, "bos_token_id");
    if (v.eos_id < 0) v.eos_id = config_id(*cfg, "eos_token_id");
  }
  for (auto [name, slot] : {std::pair{"<s>", &v.bos_id}, std::pair{"</s>", &v.eos_id}}) {
    if (*slot < 0) {
      if (auto it = ids.find(name); it != ids.end()) *slot = it->second;
    }
  }
  return make_spm_tokenizer(std::move(v));
}

Result<std::unique_ptr<Tokenizer>> build(const std::string& path, const json& j) {
  if (!j.is_object()) return make_error(ErrorCode::kCorruptFile, path + ": tokenizer.json is not a JSON object");
  if (!j.contains("model")) return make_error(ErrorCode::kCorruptFile, path + ": no \"model\" section");
  const json& model = j.at("model");
  const std::string mtype = model.value("type", std::string("BPE"));
  if (mtype != "BPE") return unsupported(path, "model type '" + mtype + "' (only byte-level BPE)");
  const bool byte_fallback = model.contains("byte_fallback") && model.at("byte_fallback").is_boolean() &&
                             model.at("byte_fallback").get<bool>();
  const json pre = j.value("pre_tokenizer", json());
  if (byte_fallback || type_of(pre) == "Metaspace") return build_sentencepiece_style(path, j);
  TS_ASSIGN_OR_RETURN(Normalizer normalizer, Normalizer::parse(path, j.value("normalizer", json())));
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model.at(key).is_string() && !model.at(key).get<std::string>().empty()) {
      return unsupported(path, std::string("BPE option ") + key);
    }
  }
  if (model.contains("dropout") && model.at("dropout").is_number() && model.at("dropout").get<double>() > 0) {
    return unsupported(path, "BPE dropout");
  }
  ByteLevelBpeSpec spec;
  spec.source = path;
  spec.normalizer = std::move(normalizer);
  spec.ignore_merges = model.value("ignore_merges", false);
  std::unordered_map<std::string, int32_t> ids;
  if (!model.contains("vocab") || !model.at("vocab").is_object()) {
    return make_error(ErrorCode::kCorruptFile, path + ": tokenizer.json model.vocab is not an object");
  }
  if (!model.contains("merges") || !model.at("merges").is_array()) {
    return make_error(ErrorCode::kCorruptFile, path + ": tokenizer.json model.merges is not an array");
  }
  for (const auto& [tok, id_json] : model.at("vocab").items()) {
    const auto id = id_json.get<int64_t>();
    if (id < 0 || id > (1 << 24)) return make_error(ErrorCode::kCorruptFile, path + ": token '" + tok + "' has id " + std::to_string(id));
    if (static_cast<size_t>(id) >= spec.vocab.size()) spec.vocab.resize(static_cast<size_t>(id) + 1);
    spec.vocab[static_cast<size_t>(id)] = tok;
    ids.emplace(tok, static_cast<int32_t>(id));
  }
  const json& merges = model.at("merges");
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return make_error(ErrorCode::kCorruptFile, path + ": merge " + std::to_string(i) + " '" + s + "' is not two tokens");
      }
      spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2) {
      spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return make_error(ErrorCode::kCorruptFile, path + ": merge " + std::to_string(i) + " is neither \"a b\" nor [a, b]");
    }
  }
  if (j.contains("added_tokens")) {
    for (const json& a : j.at("added_tokens")) {
      BpeAddedToken t;
      t.token.content = a.at("content").get<std::string>();
      t.token.id = a.at("id").get<int32_t>();
      t.token.lstrip = a.value("lstrip", false);
      t.token.rstrip = a.value("rstrip", false);
      t.token.single_word = a.value("single_word", false);
      t.special = a.value("special", false);
      ids.insert_or_assign(t.token.content, t.token.id);
      spec.added.push_back(std::move(t));
    }
  }
  TS_TRY(parse_pre(path, j.value("pre_tokenizer", json()), spec.pre));
  TS_TRY(check_decoder(path, j.value("decoder", json())));
  TS_TRY(parse_post(path, j.value("post_processor", json()), ids, spec));

  if (auto cfg = read_json_beside(path, "tokenizer_config.json")) {
    spec.bos_id = config_token(*cfg, "bos_token", ids);
    spec.eos_id = config_token(*cfg, "eos_token", ids);
  }
  if (auto cfg = read_json_beside(path, "config.json")) {
    if (spec.bos_id < 0) spec.bos_id = config_id(*cfg, "bos_token_id");
    if (spec.eos_id < 0) spec.eos_id = config_id(*cfg, "eos_token_id");
  }
  if (spec.bos_id < 0 && !spec.prefix_ids.empty()) spec.bos_id = spec.prefix_ids.front();
  return make_byte_level_bpe(std::move(spec));
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_hf_tokenizer_json(const std::string& path) {
  TS_ASSIGN_OR_RETURN(const std::string text, read_whole_file(path, "tokenizer.json"));
  try {
    const json j = json::parse(text);
    return build(path, j);
  } catch (const json::parse_error& e) {
    return make_error(ErrorCode::kMalformedMessage, path + ": bad JSON: " + e.what());
  } catch (const json::exception& e) {
    return make_error(ErrorCode::kCorruptFile, path + ": unexpected tokenizer.json structure: " + e.what());
  }
}

Result<std::vector<PreTokenizerStep>> gguf_pre_tokenizer(std::string_view pre) {
  std::vector<PreTokenizerStep> steps;
  if (pre.empty() || pre == "default" || pre == "gpt2" || pre == "gpt-2") {
    // GPT-2 regex only.
  } else if (pre == "smollm" || pre == "starcoder" || pre == "refact") {
    TS_ASSIGN_OR_RETURN(steps, regex_step(R"(\p{N})", false, SplitBehavior::kIsolated, false));
  } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    TS_ASSIGN_OR_RETURN(steps, regex_step(kLlama3Pattern, false, SplitBehavior::kIsolated, false));
    TS_ASSIGN_OR_RETURN(auto bl, byte_level_step(false, false));
    steps.push_back(std::move(bl));
    return steps;
  } else if (pre == "qwen2") {
    TS_ASSIGN_OR_RETURN(steps, regex_step(kQwen2Pattern, false, SplitBehavior::kIsolated, false));
    TS_ASSIGN_OR_RETURN(auto bl, byte_level_step(false, false));
    steps.push_back(std::move(bl));
    return steps;
  } else {
    return make_error(ErrorCode::kUnsupported, "unsupported tokenizer.ggml.pre '" + std::string(pre) + "'");
  }
  TS_ASSIGN_OR_RETURN(auto bl, byte_level_step(false, true));
  steps.push_back(std::move(bl));
  return steps;
}

}  // namespace tessera::tok
