#include "eval.h"

namespace tessera::jinja::internal {

class Renderer::FrameGuard {
 public:
  FrameGuard(Renderer& r, Frame& f) : r_(r), saved_(r.cur_) { r.cur_ = &f; }
  ~FrameGuard() { r_.cur_ = saved_; }
  FrameGuard(const FrameGuard&) = delete;
  FrameGuard& operator=(const FrameGuard&) = delete;

 private:
  Renderer& r_;
  Frame* saved_;
};

Renderer::Renderer(const Program& program, const Dict& variables, const RenderLimits& limits)
    : program_(program), limits_(limits) {
  Dict builtins;
  add_builtin_globals(builtins, limits.max_steps);
  for (const auto& [k, v] : builtins.items()) globals_.vars[k] = v;
  for (const auto& [k, v] : variables.items()) globals_.vars[k] = v;
  top_.parent = &globals_;
  cur_ = &top_;
}

Result<std::string> Renderer::run() {
  std::string out;
  out_ = &out;
  TS_TRY(render_body(program_.body));
  return out;
}

Error Renderer::located(size_t offset, const Error& e) const {
  if (e.message.rfind("template ", 0) == 0) return e;  // already located (a nested call)
  return make_error(e.code, "template error at " + program_.map.where(offset) + ": " + e.message);
}

Error Renderer::error(size_t offset, const std::string& msg, ErrorCode code) const {
  return located(offset, make_error(code, msg));
}

Status Renderer::tick(size_t offset) {
  if (++steps_ > limits_.max_steps) {
    return error(offset, "render exceeded " + std::to_string(limits_.max_steps) + " steps",
                 ErrorCode::kResourceExhausted);
  }
  return {};
}

Status Renderer::emit(size_t offset, const std::string& s) {
  if (out_->size() + s.size() > limits_.max_output_bytes) {
    return error(offset, "output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes",
                 ErrorCode::kResourceExhausted);
  }
  out_->append(s);
  return {};
}

Status Renderer::render_body(const Body& body) {
  for (const auto& n : body) {
    TS_TRY(render_node(*n));
    if (flow_ != Flow::kNormal) return {};
  }
  return {};
}

Status Renderer::render_node(const Node& n) {
  TS_TRY(tick(n.offset));
  switch (n.kind) {
    case Node::Kind::kText: return emit(n.offset, n.text);
    case Node::Kind::kOutput: {
      TS_ASSIGN_OR_RETURN(Value v, eval(*n.expr));
      return emit(n.offset, to_str(v));
    }
    case Node::Kind::kIf:
      for (const auto& [cond, body] : n.branches) {
        bool take = true;
        if (cond) {
          TS_ASSIGN_OR_RETURN(Value c, eval(*cond));
          take = c.truthy();
        }
        if (take) return render_body(body);
      }
      return {};
    case Node::Kind::kFor: return render_for(n);
    case Node::Kind::kSet:
    case Node::Kind::kSetBlock: return render_set(n);
    case Node::Kind::kMacro: cur_->vars[n.text] = make_macro(n); return {};
    case Node::Kind::kBreak: flow_ = Flow::kBreak; return {};
    case Node::Kind::kContinue: flow_ = Flow::kContinue; return {};
  }
  return {};
}

Status Renderer::assign_targets(Frame& f, const std::vector<std::string>& targets, const Value& v, size_t offset) {
  if (targets.size() == 1) {
    f.vars[targets[0]] = v;
    return {};
  }
  auto items = iterate(v);
  if (!items.ok()) return located(offset, items.error());
  if (items->size() != targets.size()) {
    return error(offset, items->size() < targets.size()
                             ? "not enough values to unpack (expected " + std::to_string(targets.size()) + ")"
                             : "too many values to unpack (expected " + std::to_string(targets.size()) + ")");
  }
  for (size_t i = 0; i < targets.size(); ++i) f.vars[targets[i]] = (*items)[i];
  return {};
}

Status Renderer::render_for(const Node& n) {
  TS_ASSIGN_OR_RETURN(Value seq, eval(*n.expr));
  auto listed = iterate(seq);
  if (!listed.ok()) return located(n.expr->offset, listed.error());
  std::vector<Value> items = std::move(listed).value();
  if (n.cond) {
    Frame f;
    f.parent = cur_;
    FrameGuard guard(*this, f);
    std::vector<Value> kept;
    for (const Value& item : items) {
      TS_TRY(tick(n.offset));
      TS_TRY(assign_targets(f, n.targets, item, n.offset));
      TS_ASSIGN_OR_RETURN(Value c, eval(*n.cond));
      if (c.truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) return render_body(n.else_body);
  const auto len = static_cast<int64_t>(items.size());
  size_t cycle_index = 0;
  for (int64_t i = 0; i < len; ++i) {
    TS_TRY(tick(n.offset));
    // Each iteration gets a fresh frame: a `set` in the body does not carry over (jinja2).
    Frame f;
    f.parent = cur_;
    FrameGuard guard(*this, f);
    const Value& item = items[static_cast<size_t>(i)];
    TS_TRY(assign_targets(f, n.targets, item, n.offset));
    Dict loop;
    loop.set("index", Value(i + 1));
    loop.set("index0", Value(i));
    loop.set("revindex", Value(len - i));
    loop.set("revindex0", Value(len - i - 1));
    loop.set("first", Value(i == 0));
    loop.set("last", Value(i == len - 1));
    loop.set("length", Value(len));
    loop.set("depth", Value(int64_t{1}));
    loop.set("depth0", Value(int64_t{0}));
    if (i > 0) loop.set("previtem", items[static_cast<size_t>(i - 1)]);
    if (i + 1 < len) loop.set("nextitem", items[static_cast<size_t>(i + 1)]);
    cycle_index = static_cast<size_t>(i);
    loop.set("cycle", Value::callable("loop.cycle", [cycle_index](const CallArgs& a) -> Result<Value> {
      if (a.positional.empty()) return make_error(ErrorCode::kInvalidArgument, "no items for cycling given");
      return a.positional[cycle_index % a.positional.size()];
    }));
    f.vars["loop"] = Value::dict(std::move(loop));
    TS_TRY(render_body(n.body));
    if (flow_ == Flow::kBreak) {
      flow_ = Flow::kNormal;
      break;
    }
    flow_ = Flow::kNormal;
  }
  return {};
}

Status Renderer::render_set(const Node& n) {
  Value v;
  if (n.kind == Node::Kind::kSetBlock) {
    std::string captured;
    std::string* saved = out_;
    out_ = &captured;
    Status st = render_body(n.body);
    out_ = saved;
    TS_TRY(st);
    v = Value(std::move(captured));
  } else {
    TS_ASSIGN_OR_RETURN(v, eval(*n.expr));
  }
  if (!n.attr.empty()) {
    Value target = lookup(n.text);
    if (!target.is_namespace()) {
      return error(n.offset, "cannot assign attribute on non-namespace object '" + n.text + "'");
    }
    target.mutable_dict().set(n.attr, v);
    return {};
  }
  if (!n.targets.empty()) return assign_targets(*cur_, n.targets, v, n.offset);
  cur_->vars[n.text] = v;
  return {};
}

Value Renderer::make_macro(const Node& n) {
  const Node* node = &n;
  return Value::callable(n.text, [this, node](const CallArgs& args) { return call_macro(*node, args); });
}

Result<Value> Renderer::call_macro(const Node& n, const CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth) {
    return error(n.offset, "macro calls nested deeper than " + std::to_string(limits_.max_call_depth),
                 ErrorCode::kResourceExhausted);
  }
  if (args.positional.size() > n.params.size()) {
    return error(n.offset, "macro '" + n.text + "' takes not more than " + std::to_string(n.params.size()) +
                               " argument(s)");
  }
  Frame f;
  f.parent = &top_;
  FrameGuard guard(*this, f);
  for (size_t i = 0; i < n.params.size(); ++i) {
    const auto& [name, def] = n.params[i];
    if (i < args.positional.size()) {
      f.vars[name] = args.positional[i];
    } else if (const Value* kw = args.kw(name)) {
      f.vars[name] = *kw;
    } else if (def) {
      TS_ASSIGN_OR_RETURN(f.vars[name], eval(*def));
    } else {
      f.vars[name] = Value::undefined("parameter '" + name + "' was not provided");
    }
  }
  for (const auto& [k, v] : args.keyword) {
    bool known = false;
    for (const auto& p : n.params) known = known || p.first == k;
    if (!known) return error(n.offset, "macro '" + n.text + "' takes no keyword argument '" + k + "'");
  }
  std::string captured;
  std::string* saved = out_;
  out_ = &captured;
  ++call_depth_;
  Flow saved_flow = flow_;
  Status st = render_body(n.body);
  flow_ = saved_flow;
  --call_depth_;
  out_ = saved;
  TS_TRY(st);
  return Value(std::move(captured));
}

Value Renderer::lookup(const std::string& name) const {
  for (const Frame* f = cur_; f != nullptr; f = f->parent) {
    auto it = f->vars.find(name);
    if (it != f->vars.end()) return it->second;
  }
  return Value::undefined("'" + name + "' is undefined");
}

Result<CallArgs> Renderer::eval_args(const Expr& e) {
  CallArgs args;
  for (const auto& a : e.args) {
    TS_ASSIGN_OR_RETURN(Value v, eval(*a));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [k, a] : e.kwargs) {
    TS_ASSIGN_OR_RETURN(Value v, eval(*a));
    args.keyword.emplace_back(k, std::move(v));
  }
  return args;
}

Result<Value> Renderer::eval_call(const Expr& e) {
  TS_ASSIGN_OR_RETURN(Value callee, eval(*e.a));
  if (callee.is_undefined()) return error(e.offset, callee.undefined_hint());
  if (!callee.is_callable()) return error(e.offset, "'" + type_name(callee) + "' object is not callable");
  TS_ASSIGN_OR_RETURN(CallArgs args, eval_args(e));
  auto r = callee.function()(args);
  if (!r.ok()) return located(e.offset, r.error());
  return r;
}

namespace {

// jinja2 folds constant subexpressions into Python literals when it compiles a template.
bool is_constant(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral: return true;
    case Expr::Kind::kName:
    case Expr::Kind::kCall: return false;
    default: break;
  }
  for (const Expr* c : {e.a.get(), e.b.get(), e.c.get()}) {
    if (c != nullptr && !is_constant(*c)) return false;
  }
  for (const auto& x : e.args) {
    if (x && !is_constant(*x)) return false;
  }
  for (const auto& [k, x] : e.kwargs) {
    if (!is_constant(*x)) return false;
  }
  return true;
}

}  // namespace

Result<Value> Renderer::eval_binary(const Expr& e) {
  TS_ASSIGN_OR_RETURN(Value a, eval(*e.a));
  if (e.name == "and") {
    if (!a.truthy()) return a;
    return eval(*e.b);
  }
  if (e.name == "or") {
    if (a.truthy()) return a;
    return eval(*e.b);
  }
  TS_ASSIGN_OR_RETURN(Value b, eval(*e.b));
  if (e.name == "~") {
    std::string s = to_str(a) + to_str(b);
    if (s.size() > limits_.max_output_bytes) return error(e.offset, "string too large", ErrorCode::kResourceExhausted);
    return Value(std::move(s));
  }
  // A folded negative constant is written without parentheses, so `-2 ** x` (and `(1 - 3) ** x`)
  // is -(2 ** x) in jinja2's generated Python (when x is not constant too): reproduce that.
  if (e.name == "**" && a.is_number() && !a.is_bool() && a.as_float() < 0 && is_constant(*e.a) &&
      !is_constant(*e.b)) {
    Value magnitude = a.is_float() ? Value(-a.as_float()) : Value(-a.as_int());
    auto r = arithmetic("**", magnitude, b, limits_.max_output_bytes);
    if (!r.ok()) return located(e.offset, r.error());
    return r->is_float() ? Value(-r->as_float()) : Value(-r->as_int());
  }
  auto r = arithmetic(e.name, a, b, limits_.max_output_bytes);
  if (!r.ok()) return located(e.offset, r.error());
  return r;
}

Result<Value> Renderer::eval_compare(const Expr& e) {
  TS_ASSIGN_OR_RETURN(Value left, eval(*e.args[0]));
  for (size_t i = 0; i < e.ops.size(); ++i) {
    TS_ASSIGN_OR_RETURN(Value right, eval(*e.args[i + 1]));
    const std::string& op = e.ops[i];
    bool r = false;
    if (op == "==" || op == "!=") {
      r = equals(left, right) == (op == "==");
    } else if (op == "in" || op == "notin") {
      auto c = contains(right, left);
      if (!c.ok()) return located(e.offset, c.error());
      r = *c == (op == "in");
    } else {
      auto c = compare_values(left, right, op.c_str());
      if (!c.ok()) return located(e.offset, c.error());
      r = op == "<" ? *c < 0 : op == ">" ? *c > 0 : op == "<=" ? *c <= 0 : *c >= 0;
    }
    if (!r) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Result<Value> Renderer::eval(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral: return e.literal;
    case Expr::Kind::kName: return lookup(e.name);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      std::vector<Value> items;
      for (const auto& a : e.args) {
        TS_ASSIGN_OR_RETURN(Value v, eval(*a));
        items.push_back(std::move(v));
      }
      return Value::list(std::move(items), e.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        TS_ASSIGN_OR_RETURN(Value k, eval(*e.args[i]));
        TS_ASSIGN_OR_RETURN(Value v, eval(*e.args[i + 1]));
        d.set(to_str(k), std::move(v));
      }
      return Value::dict(std::move(d));
    }
    case Expr::Kind::kAttr: {
      TS_ASSIGN_OR_RETURN(Value obj, eval(*e.a));
      if (obj.is_undefined()) return error(e.offset, obj.undefined_hint());
      auto r = get_attr(obj, e.name);
      if (!r.ok()) return located(e.offset, r.error());
      return r;
    }
    case Expr::Kind::kItem: {
      TS_ASSIGN_OR_RETURN(Value obj, eval(*e.a));
      if (obj.is_undefined()) return error(e.offset, obj.undefined_hint());
      TS_ASSIGN_OR_RETURN(Value key, eval(*e.b));
      auto r = get_item(obj, key);
      if (!r.ok()) return located(e.offset, r.error());
      return r;
    }
    case Expr::Kind::kSlice: {
      TS_ASSIGN_OR_RETURN(Value obj, eval(*e.a));
      if (obj.is_undefined()) return error(e.offset, obj.undefined_hint());
      std::optional<int64_t> parts[3];
      for (size_t i = 0; i < 3; ++i) {
        if (!e.args[i]) continue;
        TS_ASSIGN_OR_RETURN(Value p, eval(*e.args[i]));
        if (p.is_none()) continue;
        if (!p.is_int() && !p.is_bool()) return error(e.offset, "slice indices must be integers or None");
        parts[i] = p.as_int();
      }
      auto r = slice(obj, parts[0], parts[1], parts[2]);
      if (!r.ok()) return located(e.offset, r.error());
      return r;
    }
    case Expr::Kind::kCall: return eval_call(e);
    case Expr::Kind::kFilter: {
      TS_ASSIGN_OR_RETURN(Value subject, eval(*e.a));
      TS_ASSIGN_OR_RETURN(CallArgs args, eval_args(e));
      auto r = call_filter(*this, e.name, subject, args);
      if (!r.ok()) return located(e.offset, r.error());
      return r;
    }
    case Expr::Kind::kTest: {
      TS_ASSIGN_OR_RETURN(Value subject, eval(*e.a));
      TS_ASSIGN_OR_RETURN(CallArgs args, eval_args(e));
      auto r = call_test(e.name, subject, args);
      if (!r.ok()) return located(e.offset, r.error());
      return Value(*r != e.negated);
    }
    case Expr::Kind::kUnary: {
      TS_ASSIGN_OR_RETURN(Value v, eval(*e.a));
      if (e.name == "not") return Value(!v.truthy());
      if (v.is_undefined()) return error(e.offset, v.undefined_hint());
      if (!v.is_number()) return error(e.offset, "bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
      if (e.name == "+") return v.is_float() ? v : Value(v.as_int());
      return v.is_float() ? Value(-v.as_float()) : Value(-v.as_int());
    }
    case Expr::Kind::kBinary: return eval_binary(e);
    case Expr::Kind::kCompare: return eval_compare(e);
    case Expr::Kind::kCond: {
      TS_ASSIGN_OR_RETURN(Value c, eval(*e.b));
      if (c.truthy()) return eval(*e.a);
      if (e.c) return eval(*e.c);
      return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
    }
  }
  return Value();
}

}  // namespace tessera::jinja::internal
