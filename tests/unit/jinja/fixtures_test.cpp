// Renders the committed fixtures (real chat templates from tokenizer_config.json files and the
// language cases) and checks every output byte-identical to Python's jinja2 reference
// (tests/unit/jinja/make_fixtures.py made them; the jinja_fixtures_fresh test keeps them current).
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "tessera/jinja/template.h"

namespace tessera::jinja {
namespace {

using nlohmann::ordered_json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ordered_json read_json(const std::string& path) {
  std::string text = read_file(path);
  EXPECT_FALSE(text.empty()) << path;
  return ordered_json::parse(text);
}

const std::string kDir = TESSERA_JINJA_FIXTURES;

// The reference pins strftime_now to a fixed date; so do we (a variable overrides the built-in).
Value fixed_strftime() {
  return Value::callable("strftime_now", [](const CallArgs&) -> Result<Value> { return Value("26 Jul 2024"); });
}

void expect_matches(const Result<std::string>& got, const ordered_json& c, const std::string& label) {
  if (c.contains("output")) {
    ASSERT_TRUE(got.ok()) << label << ": " << got.error().to_string();
    EXPECT_EQ(*got, c["output"].get<std::string>()) << label;
    return;
  }
  ASSERT_FALSE(got.ok()) << label << " rendered, but jinja2 raised " << c["error"] << "; got:\n" << *got;
  std::string expected = c["error"].get<std::string>();
  if (expected.rfind("raise_exception: ", 0) == 0) {
    EXPECT_NE(got.error().message.find(expected), std::string::npos) << label << ": " << got.error().message;
  }
}

TEST(JinjaFixtures, RealChatTemplatesRenderLikeJinja2) {
  ordered_json convs = read_json(kDir + "/conversations.json");
  ordered_json renders = read_json(kDir + "/renders.json");
  std::map<std::string, std::pair<std::string, ordered_json>> templates;
  std::map<std::string, ordered_json> by_name;
  for (const auto& c : convs["conversations"]) by_name[c["name"].get<std::string>()] = c;
  size_t checked = 0;
  for (const auto& r : renders) {
    std::string tname = r["template"].get<std::string>();
    if (!templates.count(tname)) {
      templates[tname] = {read_file(kDir + "/templates/" + tname + ".jinja"),
                          read_json(kDir + "/templates/" + tname + ".tokens.json")};
    }
    const auto& [source, tokens] = templates[tname];
    const ordered_json& conv = by_name.at(r["conversation"].get<std::string>());
    ChatTemplateInputs in;
    in.messages = conv["messages"];
    if (r["tools"].get<bool>()) in.tools = convs["tools"];
    in.add_generation_prompt = r["add_generation_prompt"].get<bool>();
    in.bos_token = tokens["bos_token"].get<std::string>();
    in.eos_token = tokens["eos_token"].get<std::string>();
    in.extra = conv.contains("extra") ? conv["extra"] : ordered_json::object();
    in.extra["documents"] = nullptr;
    std::string label = tname + " / " + r["conversation"].get<std::string>() +
                        (r["tools"].get<bool>() ? " / tools" : "") +
                        (in.add_generation_prompt ? " / add_generation_prompt" : "");
    expect_matches(render_chat_template(source, in), r, label);
    ++checked;
  }
  EXPECT_GE(checked, 300u);
  EXPECT_GE(templates.size(), 4u);
}

TEST(JinjaFixtures, LanguageCasesRenderLikeJinja2) {
  ordered_json cases = read_json(kDir + "/language.json");
  for (const auto& c : cases) {
    std::string name = c["name"].get<std::string>();
    auto t = Template::parse(c["template"].get<std::string>());
    if (!t.ok()) {
      expect_matches(t.take_error(), c, name);
      continue;
    }
    Value vars = from_json(c["variables"]);
    Dict d = vars.as_dict();
    d.set("strftime_now", fixed_strftime());
    expect_matches(t->render(d), c, name);
  }
  EXPECT_GE(cases.size(), 50u);
}

}  // namespace
}  // namespace tessera::jinja
