// Unit tests of tessera_jinja's pieces that the jinja2 reference cases do not reach: error
// reporting (line/column, raise_exception), limits, and transformers-only tags.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tessera/jinja/template.h"

namespace tessera::jinja {
namespace {

Result<std::string> render(std::string_view src, Dict vars = {}, RenderLimits limits = {}) {
  auto t = Template::parse(src);
  if (!t.ok()) return t.take_error();
  return t->render(vars, limits);
}

TEST(Jinja, RendersChatInputs) {
  ChatTemplateInputs in;
  in.messages = nlohmann::ordered_json::parse(R"([{"role":"user","content":"hi"}])");
  in.bos_token = "<s>";
  auto out = render_chat_template(
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}[assistant]{% endif %}{{ tools is none }}",
      in);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_EQ(*out, "<s>[user]hi[assistant]True");
}

TEST(Jinja, SyntaxErrorsNameLineAndColumn) {
  auto bad = Template::parse("line one\n{% if x %}\n  {{ x + }}\n{% endif %}");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.error().message.find("line 3, column 10"), std::string::npos) << bad.error().message;

  for (const char* src : {"{% if x %}never closed", "{{ unclosed", "{% for x in %}{% endfor %}", "{% unknown %}",
                          "{% include 'x' %}", "{{ (1 }}", "{# no end", "{% endif %}", "{{ 'abc }}", "{{ x[] }}"}) {
    auto r = Template::parse(src);
    EXPECT_FALSE(r.ok()) << src;
    if (!r.ok()) {
      EXPECT_NE(r.error().message.find("line "), std::string::npos) << r.error().message;
    }
  }
}

TEST(Jinja, RuntimeErrorsNameLineAndTheProblem) {
  auto r = render("ok\n{{ nope.attr }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("line 2, column"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("'nope' is undefined"), std::string::npos) << r.error().message;

  r = render("{{ missing_function(1) }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("'missing_function' is undefined"), std::string::npos);

  r = render("{{ 'a' + 1 }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("can only concatenate str"), std::string::npos) << r.error().message;

  r = render("{{ 1 | nosuchfilter }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("no filter named 'nosuchfilter'"), std::string::npos);

  r = render("{{ [1] | tojson }}{{ x | tojson }}");
  ASSERT_FALSE(r.ok());
}

TEST(Jinja, RaiseExceptionKeepsTheMessage) {
  auto r = render("{% if true %}{{ raise_exception('Conversation roles must alternate') }}{% endif %}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("raise_exception: Conversation roles must alternate"), std::string::npos)
      << r.error().message;
}

TEST(Jinja, LimitsStopRunawayTemplates) {
  RenderLimits small{.max_output_bytes = 1000, .max_steps = 10'000, .max_call_depth = 8};
  auto r = render("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}", {}, small);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kResourceExhausted);

  r = render("{% for i in range(5000) %}xx{% endfor %}", {}, small);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kResourceExhausted);

  r = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", {}, small);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kResourceExhausted);

  r = render("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", {}, small);
  ASSERT_FALSE(r.ok());

  r = render("{{ 'x' * 100000000000 }}", {}, small);
  ASSERT_FALSE(r.ok());

  std::string deep(5000, '(');
  EXPECT_FALSE(Template::parse("{{ " + deep + "1" + std::string(5000, ')') + " }}").ok());
}

TEST(Jinja, GenerationTagRendersItsBody) {
  auto r = render("{% generation %}gen {{ 1 + 1 }}{% endgeneration %}");
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(*r, "gen 2");
}

TEST(Jinja, VariablesOverrideBuiltinsAndNamespacesAreShared) {
  Dict vars;
  vars.set("range", Value("shadowed"));
  auto r = render("{{ range }}", vars);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "shadowed");

  r = render("{% set ns = namespace(items=[]) %}{% macro add(n) %}{% set ns.items = ns.items + [n] %}{% endmacro %}"
             "{{ add(1) }}{{ add(2) }}{{ ns.items }}");
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(*r, "[1, 2]");
}

TEST(Jinja, TemplatesAreReusableAndIndependent) {
  auto t = Template::parse("{% set x = (x or 0) + 1 %}{{ x }}");
  ASSERT_TRUE(t.ok());
  Dict a;
  a.set("x", Value(int64_t{41}));
  EXPECT_EQ(*t->render(a), "42");
  EXPECT_EQ(*t->render({}), "1");
}

TEST(Jinja, FloatFormattingMatchesPython) {
  EXPECT_EQ(format_float(0.1), "0.1");
  EXPECT_EQ(format_float(1e-5), "1e-05");
  EXPECT_EQ(format_float(1e16), "1e+16");
  EXPECT_EQ(format_float(123456789012345.0), "123456789012345.0");
  EXPECT_EQ(format_float(-2.5), "-2.5");
  EXPECT_EQ(format_float(0.0001), "0.0001");
}

}  // namespace
}  // namespace tessera::jinja

namespace tessera::jinja {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every prefix and every one-byte corruption of the real templates parses or fails cleanly, and
// whatever parses renders or fails cleanly: no crash, no hang.
TEST(Jinja, DamagedTemplatesFailCleanly) {
  ChatTemplateInputs in;
  in.messages = nlohmann::ordered_json::parse(
      R"([{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"assistant","content":"a"}])");
  RenderLimits limits{.max_output_bytes = 1 << 16, .max_steps = 20'000, .max_call_depth = 8};
  size_t rendered = 0;
  for (const char* name : {"llama3_1", "qwen3", "gemma3", "deepseek_v3", "gemini"}) {
    std::string src = slurp(std::string(TESSERA_JINJA_FIXTURES) + "/templates/" + name + ".jinja");
    ASSERT_FALSE(src.empty()) << name;
    for (size_t cut = 0; cut <= src.size(); cut += 7) {
      auto r = render_chat_template(src.substr(0, cut), in, limits);
      rendered += r.ok();
    }
    for (size_t at = 0; at < src.size(); at += 13) {
      for (char c : {'{', '}', '%', '(', '"', '|', '-'}) {
        std::string bad = src;
        bad[at] = c;
        (void)render_chat_template(bad, in, limits);
      }
    }
  }
  EXPECT_GT(rendered, 0u);
}

}  // namespace
}  // namespace tessera::jinja
