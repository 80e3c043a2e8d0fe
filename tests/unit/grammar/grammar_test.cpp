// tessera_grammar: schema compilation, the byte matcher (acceptance, exact shortest completion),
// and token masks against a brute-force check of every token.
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tessera/grammar/grammar.h"

namespace tessera::grammar {
namespace {

using json = nlohmann::ordered_json;

std::shared_ptr<const Schema> compile(const std::string& s) {
  auto r = compile_json_schema(s);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? r.value() : nullptr;
}

bool accepts(const std::shared_ptr<const Schema>& s, const std::string& text) {
  Matcher m(s);
  return m.feed(text) && m.complete();
}

const char* const kPerson = R"({"type":"object","properties":{
  "name":{"type":"string","minLength":1,"maxLength":12},
  "age":{"type":"integer"},
  "mood":{"enum":["happy","sad",3,null]},
  "tags":{"type":"array","items":{"type":"string","maxLength":4},"minItems":1,"maxItems":3},
  "pet":{"type":["object","null"],"properties":{"kind":{"const":"cat"},"lives":{"type":"number"}},"required":["kind"]}},
  "required":["name","age","tags"],"additionalProperties":false})";

TEST(GrammarTest, AcceptsWhatTheSchemaAllowsAndNothingElse) {
  auto s = compile(kPerson);
  ASSERT_TRUE(s);
  EXPECT_TRUE(accepts(s, R"({"name":"Ann","age":7,"tags":["a"]})"));
  EXPECT_TRUE(accepts(s, R"({"name":"Ann","age":-12,"mood":"sad","tags":["a","bb","c\n"],"pet":null})"));
  EXPECT_TRUE(accepts(s, R"({"name":"\u00e9x","age":0,"mood":3,"tags":["x"],"pet":{"kind":"cat","lives":9.5e+1}})"));
  EXPECT_TRUE(accepts(s, R"({"name":"Ann","age":7,"mood":null,"tags":["a"]})"));
  EXPECT_FALSE(accepts(s, R"({"age":7,"name":"Ann","tags":["a"]})"));            // order
  EXPECT_FALSE(accepts(s, R"({"name":"","age":7,"tags":["a"]})"));               // minLength
  EXPECT_FALSE(accepts(s, R"({"name":"Ann","age":7.5,"tags":["a"]})"));          // integer
  EXPECT_FALSE(accepts(s, R"({"name":"Ann","age":07,"tags":["a"]})"));           // leading zero
  EXPECT_FALSE(accepts(s, R"({"name":"Ann","age":7,"tags":[]})"));               // minItems
  EXPECT_FALSE(accepts(s, R"({"name":"Ann","age":7,"tags":["a","b","c","d"]})")); // maxItems
  EXPECT_FALSE(accepts(s, R"({"name":"Ann","age":7,"tags":["abcde"]})"));        // maxLength
  EXPECT_FALSE(accepts(s, R"({"name":"Ann","age":7,"tags":["a"],"x":1})"));      // undeclared
  EXPECT_FALSE(accepts(s, R"({"name":"Ann","age":7})"));                         // required
  EXPECT_FALSE(accepts(s, R"({"name":"Ann", "age":7,"tags":["a"]})"));           // whitespace
  EXPECT_FALSE(accepts(s, R"({"name":"Ann","age":7,"mood":"angry","tags":["a"]})"));
  EXPECT_FALSE(accepts(s, R"({"name":"Ann","age":7,"tags":["a"],"pet":{"lives":1}})"));
  EXPECT_FALSE(accepts(s, "{\"name\":\"a\tb\",\"age\":7,\"tags\":[\"a\"]}"));  // raw control char
  Matcher m(s);
  EXPECT_TRUE(m.feed(std::string(R"({"name":"Ann","age":7,"tags":["a"])")));
  EXPECT_FALSE(m.complete());
  EXPECT_TRUE(m.feed('}'));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.feed(' '));  // nothing after the value
  EXPECT_TRUE(m.dead());
}

TEST(GrammarTest, JsonObjectAcceptsAnyObject) {
  auto s = any_json_object();
  EXPECT_TRUE(accepts(s, R"({})"));
  EXPECT_TRUE(accepts(s, R"({"a":[1,{"b":null}],"c":"d","e":-0.5E-3,"f":true})"));
  EXPECT_FALSE(accepts(s, R"([1])"));
  EXPECT_FALSE(accepts(s, R"({"a":})"));
  EXPECT_FALSE(accepts(s, R"({"a":1,})"));
  EXPECT_FALSE(accepts(s, R"({"a":tru})"));
}

TEST(GrammarTest, RecursiveReferences) {
  auto s = compile(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
    "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},"$ref":"#/$defs/node"})");
  ASSERT_TRUE(s);
  EXPECT_TRUE(accepts(s, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
  EXPECT_FALSE(accepts(s, R"({"v":1,"kids":[{"w":2}]})"));
}

TEST(GrammarTest, RefusesWhatItCannotEnforceByName) {
  auto r = compile_json_schema(R"({"type":"object","properties":{"zip":{"type":"string","pattern":"^[0-9]+$"}}})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(r.error().message.find("/properties/zip: keyword 'pattern'"), std::string::npos) << r.error().message;
  r = compile_json_schema(R"({"type":"integer","minimum":0})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("'minimum'"), std::string::npos);
  r = compile_json_schema(R"({"anyOf":[{"type":"object"},{"type":"object","properties":{"a":{}}}]})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("can both start with '{'"), std::string::npos) << r.error().message;
  r = compile_json_schema(R"({"$ref":"#/$defs/missing"})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("#/$defs/missing"), std::string::npos);
  r = compile_json_schema(R"({"type":"object","properties":{"a":{"type":"string"}},"required":["b"]})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  r = compile_json_schema(R"({"$defs":{"n":{"type":"object","properties":{"n":{"$ref":"#/$defs/n"}},"required":["n"]}},"$ref":"#/$defs/n"})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("no finite instance"), std::string::npos) << r.error().message;
  EXPECT_FALSE(compile_json_schema("{not json").ok());
  EXPECT_FALSE(compile_json_schema("false").ok());
  EXPECT_FALSE(compile_json_schema(R"({"type":"strange"})").ok());
}

// `levels` schemas nested: levels - 1 one-option anyOf wrappers around an integer.
std::string nested_any_of(int levels) {
  std::string s = R"({"type":"integer"})";
  for (int i = 1; i < levels; ++i) s = R"({"anyOf":[)" + s + "]}";
  return s;
}

TEST(GrammarTest, NestingDepthIsCappedAtCompile) {
  // 64 levels (the matcher's depth) compile and accept; 65 are refused naming the limit and where.
  auto ok = compile(nested_any_of(64));
  ASSERT_TRUE(ok);
  EXPECT_TRUE(accepts(ok, "42"));
  auto r = compile_json_schema(nested_any_of(65));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(r.error().message.find("nests deeper than 64 levels"), std::string::npos) << r.error().message;
  std::string where;
  for (int i = 1; i < 65; ++i) where += "/anyOf/0";
  EXPECT_EQ(r.error().message.rfind(where + ": ", 0), 0u) << r.error().message.substr(0, 200);
  // Properties, items and $ref targets count the same way.
  std::string props = R"({"type":"integer"})";
  for (int i = 1; i < 65; ++i) props = i % 2 ? R"({"type":"object","properties":{"p":)" + props + "}}" : R"({"type":"array","items":)" + props + "}";
  r = compile_json_schema(props);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("nests deeper than 64 levels"), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().message.rfind("/items/properties/p/items/", 0), 0u) << r.error().message.substr(0, 200);
  json defs = json::object();
  for (int i = 0; i < 70; ++i) defs["d" + std::to_string(i)] = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
  defs["d70"] = {{"type", "integer"}};
  r = compile_json_schema(json{{"$defs", defs}, {"$ref", "#/$defs/d0"}}.dump());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("nests deeper than 64 levels"), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().message.rfind("/$defs/d63: ", 0), 0u) << r.error().message.substr(0, 200);
}

TEST(GrammarTest, DeepSchemasOfTheSizeLimitAreRefused) {
  // The largest one-option anyOf nesting that fits in 64 KiB (a grammar's size limit): refused
  // before it is parsed (its JSON nests ~11000 levels), as is a const nested as deep.
  const std::string inner = R"({"type":"integer"})";
  const int levels = static_cast<int>((64 * 1024 - inner.size()) / 12);
  std::string deep;
  deep.reserve(64 * 1024);
  for (int i = 0; i < levels; ++i) deep += R"({"anyOf":[)";
  deep += inner;
  for (int i = 0; i < levels; ++i) deep += "]}";
  ASSERT_LE(deep.size(), 64u * 1024u);
  auto r = compile_json_schema(deep);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(r.error().message.find("nests more than 256 JSON arrays/objects"), std::string::npos) << r.error().message;
  const std::string deep_const = R"({"const":)" + std::string(30000, '[') + std::string(30000, ']') + "}";
  r = compile_json_schema(deep_const);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("nests more than 256"), std::string::npos) << r.error().message;
  // Brackets inside strings do not count.
  auto quoted = compile(R"({"const":")" + std::string(1000, '[') + R"("})");
  ASSERT_TRUE(quoted);
  EXPECT_TRUE(accepts(quoted, "\"" + std::string(1000, '[') + "\""));
}

// Bytes a walk may try: printable ASCII and the two bytes of a 2-byte UTF-8 character.
std::vector<uint8_t> alphabet() {
  std::vector<uint8_t> a;
  for (int c = 32; c < 127; ++c) a.push_back(static_cast<uint8_t>(c));
  a.push_back(0xC3);
  a.push_back(0xA9);
  return a;
}

// A random walk through accepted prefixes, forced to finish within `budget` bytes by the rule the
// token masks use (min_remaining after the byte <= bytes left after it): it must always end
// complete, and min_remaining must be exact (a shortest-completion walk takes exactly that many).
void random_walks(const std::shared_ptr<const Schema>& s, int walks, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<uint8_t> bytes = alphabet();
  for (int w = 0; w < walks; ++w) {
    Matcher m(s);
    const int32_t budget = m.min_remaining() + static_cast<int32_t>(rng() % 40);
    std::string text;
    for (int32_t left = budget; left > 0 && !(m.complete() && rng() % 4 == 0); --left) {
      std::vector<uint8_t> ok;
      for (uint8_t b : bytes) {
        Matcher t = m;
        if (t.feed(b) && t.min_remaining() <= left - 1) ok.push_back(b);
      }
      if (ok.empty()) break;
      const uint8_t b = ok[rng() % ok.size()];
      ASSERT_TRUE(m.feed(b));
      text.push_back(static_cast<char>(b));
    }
    ASSERT_TRUE(m.complete()) << "walk " << w << " stranded: " << text;
    EXPECT_FALSE(json::parse(text, nullptr, false).is_discarded()) << text;
    // Exactness of min_remaining from every prefix of the text.
    for (size_t cut = 0; cut <= text.size(); cut += 3) {
      Matcher p(s);
      ASSERT_TRUE(p.feed(std::string_view(text).substr(0, cut)));
      const int32_t need = p.min_remaining();
      int32_t steps = 0;
      while (!p.complete()) {
        bool moved = false;
        for (uint8_t b : bytes) {
          Matcher t = p;
          if (t.feed(b) && t.min_remaining() == p.min_remaining() - 1) {
            p = t;
            moved = true;
            break;
          }
        }
        ASSERT_TRUE(moved) << "no byte shortens the completion of " << text.substr(0, cut);
        ++steps;
      }
      EXPECT_EQ(steps, need) << text.substr(0, cut);
    }
  }
}

TEST(GrammarTest, RandomWalksEndCompleteWithinTheirBudget) {
  random_walks(compile(kPerson), 150, 1);
  random_walks(any_json_object(), 150, 2);
  random_walks(compile(R"({"type":"array","items":{"anyOf":[{"type":"integer"},{"type":"string","minLength":2},
                          {"type":"boolean"}]},"minItems":2})"), 150, 3);
}

TEST(GrammarTest, TokenMasksEqualBruteForce) {
  std::vector<std::string> vocab = {"", "{", "}", "\"", "\"name", "\":", "\":\"", "a", "An", "n", "\",\"", "age",
                                    ":", "7", "12", ",", "\"tags\":[", "]", "]}", "\"}", "x", "\xC3\xA9", "\xC3", "\xA9",
                                    "true", "\"mood\":", "happy", "\"happy\"", "null", " ", "{\"name\":\""};
  for (int c = 32; c < 127; ++c) vocab.push_back(std::string(1, static_cast<char>(c)));  // every ASCII byte
  TokenVocabulary tv(vocab);
  auto s = compile(kPerson);
  std::mt19937 rng(7);
  const std::vector<int32_t> ends = {0};
  for (int trial = 0; trial < 60; ++trial) {
    Matcher m(s);
    const int32_t budget = 60 + static_cast<int32_t>(rng() % 20);
    for (int32_t used = 0; used < budget; ++used) {
      std::vector<int32_t> got;
      tv.allowed_tokens(m, budget - used, ends, &got);
      std::vector<int32_t> want;
      if (m.complete()) want.push_back(0);
      for (int32_t id = 1; id < tv.size(); ++id) {
        Matcher t = m;
        if (t.feed(vocab[static_cast<size_t>(id)]) && t.min_remaining() <= budget - used - 1) want.push_back(id);
      }
      std::sort(got.begin(), got.end());
      std::sort(want.begin(), want.end());
      ASSERT_EQ(got, want) << "trial " << trial << " step " << used;
      ASSERT_FALSE(got.empty());
      const int32_t pick = got[rng() % got.size()];
      if (pick == 0) break;
      ASSERT_TRUE(m.feed(vocab[static_cast<size_t>(pick)]));
    }
    EXPECT_TRUE(m.complete());
  }
}

}  // namespace
}  // namespace tessera::grammar
