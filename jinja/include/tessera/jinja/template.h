// A Jinja2 template engine covering what Hugging Face chat templates use, rendering
// byte-identical to Python's jinja2 as transformers configures it (trim_blocks, lstrip_blocks,
// the loopcontrols extension, its own `tojson`, `raise_exception`, `strftime_now`).
//
// Supported: {{ }}, {% %}, {# #}, `-`/`+` whitespace markers; if/elif/else, for (tuple targets,
// `if` filter, else, loop.index/index0/revindex/revindex0/first/last/length/previtem/nextitem/
// cycle), break/continue, set (names, tuples, `ns.attr`, block set), macro, raw, generation;
// expressions with Python semantics (literals, lists, dicts, tuples, attribute/item access,
// slices, calls with keyword arguments, arithmetic, ~, comparisons, and/or/not, in, `is` tests,
// filters, x if c else y), the filters and string/dict methods docs/api.md lists, and the
// globals range, namespace, dict, raise_exception, strftime_now. Not supported (an error naming
// the tag): extends/block/include/import, call/filter blocks, recursive loops.
// Case mapping (upper/lower/title/capitalize) is ASCII-only.
//
// Errors (Result, code kInvalidArgument unless a limit was hit) name the line and column:
// syntax errors from parse(); undefined callables, type errors, raise_exception(msg) (the
// message is kept verbatim) from render(). Rendering never recurses or loops without bound:
// RenderLimits caps output bytes, steps (nodes and loop iterations) and macro call depth
// (kResourceExhausted when exceeded).
//
// Thread-safety: a parsed Template is immutable; render() may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tessera/common/result.h"
#include "tessera/jinja/value.h"

namespace tessera::jinja {

struct TemplateOptions {
  bool trim_blocks = true;             // drop the first newline after a block or comment tag
  bool lstrip_blocks = true;           // strip spaces/tabs before a block or comment tag on its line
  bool keep_trailing_newline = false;  // jinja2's default drops one trailing newline
};

struct RenderLimits {
  size_t max_output_bytes = size_t{8} << 20;  // also caps any string or list built on the way
  uint64_t max_steps = 2'000'000;             // statements executed + loop iterations
  int max_call_depth = 64;                    // nested macro calls
};

namespace internal {
struct Program;
}

class Template {
 public:
  static Result<Template> parse(std::string_view source, const TemplateOptions& options = {});

  // Renders with `variables` as the globals (over the built-in ones: range, namespace, dict,
  // raise_exception, strftime_now).
  Result<std::string> render(const Dict& variables, const RenderLimits& limits = {}) const;

 private:
  explicit Template(std::shared_ptr<const internal::Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const internal::Program> program_;
};

// The variables transformers' apply_chat_template passes: messages, tools (None when empty),
// add_generation_prompt, bos_token, eos_token, and any extra (e.g. enable_thinking).
struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null or an array of tool schemas
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

Dict chat_template_variables(const ChatTemplateInputs& inputs);

// Parses and renders in one call.
Result<std::string> render_chat_template(std::string_view source, const ChatTemplateInputs& inputs,
                                         const RenderLimits& limits = {});

}  // namespace tessera::jinja
