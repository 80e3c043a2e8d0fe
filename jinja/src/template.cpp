#include "tessera/jinja/template.h"

#include "ast.h"
#include "eval.h"

namespace tessera::jinja {

Result<Template> Template::parse(std::string_view source, const TemplateOptions& options) {
  auto program = std::make_shared<internal::Program>();
  program->source = internal::normalize_source(source, options);
  program->map = internal::SourceMap(program->source);
  TS_ASSIGN_OR_RETURN(std::vector<internal::Token> tokens,
                      internal::tokenize(program->source, options, program->map));
  TS_ASSIGN_OR_RETURN(program->body, internal::parse_tokens(tokens, program->map));
  return Template(std::move(program));
}

Result<std::string> Template::render(const Dict& variables, const RenderLimits& limits) const {
  internal::Renderer renderer(*program_, variables, limits);
  return renderer.run();
}

Dict chat_template_variables(const ChatTemplateInputs& inputs) {
  Dict vars;
  vars.set("messages", from_json(inputs.messages));
  vars.set("tools", inputs.tools.is_null() ? Value::none() : from_json(inputs.tools));
  vars.set("add_generation_prompt", Value(inputs.add_generation_prompt));
  vars.set("bos_token", Value(inputs.bos_token));
  vars.set("eos_token", Value(inputs.eos_token));
  if (inputs.extra.is_object()) {
    for (auto it = inputs.extra.begin(); it != inputs.extra.end(); ++it) vars.set(it.key(), from_json(it.value()));
  }
  return vars;
}

Result<std::string> render_chat_template(std::string_view source, const ChatTemplateInputs& inputs,
                                         const RenderLimits& limits) {
  TS_ASSIGN_OR_RETURN(Template t, Template::parse(source));
  return t.render(chat_template_variables(inputs), limits);
}

}  // namespace tessera::jinja
