// Every wire example of docs/protocol.md is real: each fenced block whose info string is
// `json wire` is read as a message (JSON standing for msgpack: maps, arrays, strings, ints,
// floats, booleans, as a client's msgpack library would pack them), decoded with the real codec,
// encoded again and decoded back; every key and value the example shows must come back (a key
// the codec ignores or renames fails the test, so the page and the code cannot drift apart).
// A block `json wire error=<code>` must be refused with that error code. At least one example
// per message type of the protocol is required.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/common/protocol.h"

namespace tessera::protocol {
namespace {

using nlohmann::json;

struct Example {
  int line = 0;       // of the opening fence
  std::string info;   // the fence's info string
  std::string body;
};

std::vector<Example> examples() {
  std::ifstream in(TESSERA_PROTOCOL_DOC);
  EXPECT_TRUE(in.good()) << TESSERA_PROTOCOL_DOC;
  std::vector<Example> out;
  std::string line;
  int n = 0;
  Example* open = nullptr;
  while (std::getline(in, line)) {
    ++n;
    const size_t indent = line.find_first_not_of(' ');
    const std::string t = indent == std::string::npos ? "" : line.substr(indent);
    if (open == nullptr && t.rfind("```json wire", 0) == 0) {
      out.push_back({n, t.substr(3), ""});
      open = &out.back();
    } else if (open != nullptr && t.rfind("```", 0) == 0) {
      open = nullptr;
    } else if (open != nullptr) {
      open->body += t + "\n";
    }
  }
  EXPECT_EQ(open, nullptr) << "an unclosed example block";
  return out;
}

// Every key of `want` is in `got` with the same value (numbers: within float32 rounding);
// arrays element by element.
void expect_contains(const json& got, const json& want, const std::string& path) {
  if (want.is_object()) {
    ASSERT_TRUE(got.is_object()) << path << ": expected a map, the codec gave " << got.dump();
    for (const auto& [k, v] : want.items()) {
      ASSERT_TRUE(got.contains(k)) << path << "." << k << " is documented but the codec drops it; it writes " << got.dump();
      expect_contains(got[k], v, path + "." + k);
    }
  } else if (want.is_array()) {
    ASSERT_TRUE(got.is_array() && got.size() == want.size()) << path << ": " << got.dump() << " vs documented " << want.dump();
    for (size_t i = 0; i < want.size(); ++i) expect_contains(got[i], want[i], path + "[" + std::to_string(i) + "]");
  } else if (want.is_number_float() || (want.is_number() && got.is_number_float())) {
    ASSERT_TRUE(got.is_number()) << path << ": " << got.dump();
    const double a = got.get<double>(), b = want.get<double>();
    EXPECT_NEAR(a, b, 1e-6 * std::max(1.0, std::abs(b))) << path;
  } else {
    EXPECT_EQ(got, want) << path;
  }
}

TEST(ProtocolDocExamples, EveryExampleDecodesAndRoundTrips) {
  const std::vector<Example> all = examples();
  ASSERT_GE(all.size(), 10u) << "docs/protocol.md lost its examples";
  std::set<std::string> types;
  for (const Example& ex : all) {
    SCOPED_TRACE("docs/protocol.md line " + std::to_string(ex.line));
    const json doc = json::parse(ex.body, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << "not JSON:\n" << ex.body;
    const std::vector<uint8_t> packed = json::to_msgpack(doc);
    auto decoded = decode(std::string_view(reinterpret_cast<const char*>(packed.data()), packed.size()));
    if (const size_t at = ex.info.find("error="); at != std::string::npos) {
      const int want = std::stoi(ex.info.substr(at + 6));
      ASSERT_FALSE(decoded.ok()) << "documented as refused with " << want;
      EXPECT_EQ(static_cast<int>(decoded.error().code), want) << decoded.error().to_string();
      continue;
    }
    ASSERT_TRUE(decoded.ok()) << decoded.error().to_string() << "\n" << ex.body;
    EXPECT_EQ(std::string(message_type(*decoded)), doc.value("type", "")) << ex.body;
    types.insert(std::string(message_type(*decoded)));
    const std::string again = encode(*decoded);
    const json round = json::from_msgpack(std::vector<uint8_t>(again.begin(), again.end()));
    expect_contains(round, doc, "");
  }
  for (const char* type : {"completion", "chat", "cancel", "token", "final", "error", "heartbeat", "register", "register_ack",
                           "step_plan", "step_result", "drain", "shutdown", "invalidate_user"})
    EXPECT_TRUE(types.count(type)) << "docs/protocol.md has no example of '" << type << "'";
}

}  // namespace
}  // namespace tessera::protocol
