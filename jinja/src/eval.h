// The evaluator: renders a Program over a Dict of variables. One Renderer per render() call
// (single-threaded); it owns the scope frames, the output buffer and the limit counters.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ast.h"
#include "tessera/jinja/template.h"

namespace tessera::jinja::internal {

// Python operations over Values (pyops.cpp). Errors carry a plain message; the evaluator adds
// the template position.
std::string type_name(const Value& v);  // Python's: 'str', 'int', 'list', 'dict', 'NoneType', ...
Result<std::vector<Value>> iterate(const Value& v);
Result<bool> contains(const Value& container, const Value& item);
Result<int> compare_values(const Value& a, const Value& b, const char* op);  // <0, 0, >0
Result<Value> arithmetic(const std::string& op, const Value& a, const Value& b, size_t max_bytes);
Result<Value> get_item(const Value& obj, const Value& key);
Result<Value> get_attr(const Value& obj, const std::string& name);  // dict keys, str/dict methods
Result<Value> slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
                    std::optional<int64_t> step);
Result<int64_t> length(const Value& v);

// Filters and tests (filters.cpp). A filter gets the Renderer for map()/select() by name.
class Renderer;
Result<Value> call_filter(Renderer& r, const std::string& name, const Value& subject, const CallArgs& args);
Result<bool> call_test(const std::string& name, const Value& subject, const CallArgs& args);

// Built-in globals (globals.cpp): range, namespace, dict, raise_exception, strftime_now.
void add_builtin_globals(Dict& globals, uint64_t max_range);

class Renderer {
 public:
  Renderer(const Program& program, const Dict& variables, const RenderLimits& limits);
  Result<std::string> run();

  const RenderLimits& limits() const { return limits_; }

 private:
  struct Frame {
    Frame* parent = nullptr;
    std::unordered_map<std::string, Value> vars;
  };
  class FrameGuard;
  enum class Flow { kNormal, kBreak, kContinue };

  Error located(size_t offset, const Error& e) const;
  Error error(size_t offset, const std::string& msg, ErrorCode code = ErrorCode::kInvalidArgument) const;
  Status tick(size_t offset);
  Status emit(size_t offset, const std::string& s);

  Status render_body(const Body& body);
  Status render_node(const Node& n);
  Status render_for(const Node& n);
  Status render_set(const Node& n);
  Status assign_targets(Frame& f, const std::vector<std::string>& targets, const Value& v, size_t offset);
  Value make_macro(const Node& n);
  Result<Value> call_macro(const Node& n, const CallArgs& args);

  Result<Value> eval(const Expr& e);
  Result<Value> eval_binary(const Expr& e);
  Result<Value> eval_compare(const Expr& e);
  Result<Value> eval_call(const Expr& e);
  Result<CallArgs> eval_args(const Expr& e);
  Value lookup(const std::string& name) const;

  const Program& program_;
  RenderLimits limits_;
  Frame globals_;
  Frame top_;
  Frame* cur_ = nullptr;
  std::string* out_ = nullptr;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  Flow flow_ = Flow::kNormal;
};

}  // namespace tessera::jinja::internal
