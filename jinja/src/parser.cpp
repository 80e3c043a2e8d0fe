// Recursive-descent parser with jinja2's grammar and operator precedence:
//   cond:  or ('if' or ('else' cond)?)*        or: and ('or' and)*     and: not ('and' not)*
//   not:   'not' not | compare                 compare: math1 (op math1)*   (chained)
//   math1: concat (('+'|'-') concat)*          concat: math2 ('~' math2)*
//   math2: pow (('*'|'/'|'//'|'%') pow)*       pow: unary ('**' unary)*   (left-associative)
//   unary: ('-'|'+') unary | primary postfix*, then filters / tests / calls
#include <set>

#include "ast.h"

namespace tessera::jinja::internal {
namespace {

constexpr int kMaxNesting = 200;

class Parser {
 public:
  Parser(const std::vector<Token>& t, const SourceMap& m) : t_(t), map_(m) {}

  Result<Body> parse_all() {
    Body body;
    TS_TRY(parse_body({}, body));
    if (cur().type != Tok::kEof) return err(cur().offset, "unexpected tag '" + peek_name(1) + "'");
    return body;
  }

 private:
  const Token& cur() const { return t_[pos_]; }
  const Token& at(size_t k) const { return t_[std::min(pos_ + k, t_.size() - 1)]; }
  std::string peek_name(size_t k) const { return at(k).type == Tok::kName ? at(k).text : ""; }
  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::kName && cur().text == n; }

  Error err(size_t offset, const std::string& msg) const {
    return make_error(ErrorCode::kInvalidArgument, "template syntax error at " + map_.where(offset) + ": " + msg);
  }
  Error unexpected() const {
    const Token& k = cur();
    std::string what = k.type == Tok::kEof ? "end of template"
                       : k.type == Tok::kBlockEnd ? "end of statement block"
                       : k.type == Tok::kVarEnd ? "end of print statement"
                       : "'" + k.text + "'";
    return err(k.offset, "unexpected " + what);
  }
  Status expect_op(const char* op) {
    if (!is_op(op)) return err(cur().offset, std::string("expected '") + op + "'");
    ++pos_;
    return {};
  }
  Status expect(Tok type, const char* what) {
    if (cur().type != type) return err(cur().offset, std::string("expected ") + what);
    ++pos_;
    return {};
  }
  Result<std::string> expect_name() {
    if (cur().type != Tok::kName) return err(cur().offset, "expected a name");
    return t_[pos_++].text;
  }

  // Parses nodes until a block tag whose name is in `stop` (left unconsumed) or EOF.
  Status parse_body(const std::set<std::string>& stop, Body& body) {
    if (++depth_ > kMaxNesting) return err(cur().offset, "blocks nested too deeply");
    while (cur().type != Tok::kEof) {
      const Token& k = cur();
      if (k.type == Tok::kData) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->offset = k.offset;
        n->text = k.text;
        body.push_back(std::move(n));
        ++pos_;
      } else if (k.type == Tok::kVarBegin) {
        ++pos_;
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->offset = k.offset;
        TS_ASSIGN_OR_RETURN(n->expr, tuple_expr(true));
        TS_TRY(expect(Tok::kVarEnd, "'}}'"));
        body.push_back(std::move(n));
      } else if (k.type == Tok::kBlockBegin) {
        std::string name = peek_name(1);
        if (stop.count(name)) break;
        ++pos_;
        TS_TRY(statement(body));
      } else {
        return unexpected();
      }
    }
    --depth_;
    return {};
  }

  Status end_tag(const char* name) {
    if (cur().type != Tok::kBlockBegin || peek_name(1) != name) {
      return err(cur().offset, std::string("expected '{% ") + name + " %}'");
    }
    pos_ += 2;
    return expect(Tok::kBlockEnd, "'%}'");
  }

  Status statement(Body& body) {
    size_t offset = cur().offset;
    TS_ASSIGN_OR_RETURN(std::string tag, expect_name());
    auto n = std::make_unique<Node>();
    n->offset = offset;
    if (tag == "if") {
      n->kind = Node::Kind::kIf;
      while (true) {
        TS_ASSIGN_OR_RETURN(ExprPtr c, tuple_expr(true));
        TS_TRY(expect(Tok::kBlockEnd, "'%}'"));
        Body b;
        TS_TRY(parse_body({"elif", "else", "endif"}, b));
        n->branches.emplace_back(std::move(c), std::move(b));
        if (cur().type == Tok::kEof) return err(offset, "missing '{% endif %}'");
        std::string next = peek_name(1);
        pos_ += 2;
        if (next == "elif") continue;
        if (next == "else") {
          TS_TRY(expect(Tok::kBlockEnd, "'%}'"));
          Body e;
          TS_TRY(parse_body({"endif"}, e));
          n->branches.emplace_back(nullptr, std::move(e));
          TS_TRY(end_tag("endif"));
        } else {
          TS_TRY(expect(Tok::kBlockEnd, "'%}'"));
        }
        break;
      }
    } else if (tag == "for") {
      n->kind = Node::Kind::kFor;
      TS_TRY(targets(n->targets));
      if (!is_name("in")) return err(cur().offset, "expected 'in'");
      ++pos_;
      TS_ASSIGN_OR_RETURN(n->expr, tuple_expr(false));
      if (is_name("if")) {
        ++pos_;
        TS_ASSIGN_OR_RETURN(n->cond, expr());
      }
      if (is_name("recursive")) return err(cur().offset, "recursive loops are not supported");
      TS_TRY(expect(Tok::kBlockEnd, "'%}'"));
      TS_TRY(parse_body({"else", "endfor"}, n->body));
      if (cur().type == Tok::kEof) return err(offset, "missing '{% endfor %}'");
      if (peek_name(1) == "else") {
        pos_ += 2;
        TS_TRY(expect(Tok::kBlockEnd, "'%}'"));
        TS_TRY(parse_body({"endfor"}, n->else_body));
      }
      TS_TRY(end_tag("endfor"));
    } else if (tag == "set") {
      TS_ASSIGN_OR_RETURN(std::string first, expect_name());
      if (is_op(".")) {
        ++pos_;
        TS_ASSIGN_OR_RETURN(n->attr, expect_name());
        n->text = first;
      } else if (is_op(",")) {
        n->targets.push_back(first);
        while (is_op(",")) {
          ++pos_;
          TS_ASSIGN_OR_RETURN(std::string t, expect_name());
          n->targets.push_back(t);
        }
      } else {
        n->text = first;
      }
      if (is_op("=")) {
        ++pos_;
        n->kind = Node::Kind::kSet;
        TS_ASSIGN_OR_RETURN(n->expr, tuple_expr(true));
        TS_TRY(expect(Tok::kBlockEnd, "'%}'"));
      } else {
        if (!n->targets.empty() || !n->attr.empty()) return err(cur().offset, "expected '='");
        n->kind = Node::Kind::kSetBlock;
        TS_TRY(expect(Tok::kBlockEnd, "'%}'"));
        TS_TRY(parse_body({"endset"}, n->body));
        TS_TRY(end_tag("endset"));
      }
    } else if (tag == "macro") {
      n->kind = Node::Kind::kMacro;
      TS_ASSIGN_OR_RETURN(n->text, expect_name());
      TS_TRY(expect_op("("));
      while (!is_op(")")) {
        TS_ASSIGN_OR_RETURN(std::string p, expect_name());
        ExprPtr def;
        if (is_op("=")) {
          ++pos_;
          TS_ASSIGN_OR_RETURN(def, expr());
        }
        n->params.emplace_back(std::move(p), std::move(def));
        if (!is_op(",")) break;
        ++pos_;
      }
      TS_TRY(expect_op(")"));
      TS_TRY(expect(Tok::kBlockEnd, "'%}'"));
      TS_TRY(parse_body({"endmacro"}, n->body));
      TS_TRY(end_tag("endmacro"));
    } else if (tag == "break" || tag == "continue") {
      n->kind = tag == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      TS_TRY(expect(Tok::kBlockEnd, "'%}'"));
    } else if (tag == "generation") {  // transformers' AssistantTracker: renders its body as is
      TS_TRY(expect(Tok::kBlockEnd, "'%}'"));
      TS_TRY(parse_body({"endgeneration"}, body));
      return end_tag("endgeneration");
    } else if (tag == "extends" || tag == "block" || tag == "include" || tag == "import" || tag == "from" ||
               tag == "call" || tag == "filter" || tag == "with" || tag == "do" || tag == "autoescape") {
      return err(offset, "the '" + tag + "' tag is not supported");
    } else {
      return err(offset, "unknown tag '" + tag + "'");
    }
    body.push_back(std::move(n));
    return {};
  }

  Status targets(std::vector<std::string>& out) {
    bool paren = is_op("(");
    if (paren) ++pos_;
    while (true) {
      TS_ASSIGN_OR_RETURN(std::string t, expect_name());
      out.push_back(t);
      if (!is_op(",")) break;
      ++pos_;
    }
    if (paren) TS_TRY(expect_op(")"));
    return {};
  }

  ExprPtr node(Expr::Kind kind, size_t offset) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->offset = offset;
    return e;
  }

  // expr (',' expr)* -> a tuple when there is a comma.
  Result<ExprPtr> tuple_expr(bool with_cond) {
    size_t offset = cur().offset;
    TS_ASSIGN_OR_RETURN(ExprPtr first, with_cond ? expr() : or_expr());
    if (!is_op(",")) return first;
    auto t = node(Expr::Kind::kTuple, offset);
    t->args.push_back(std::move(first));
    while (is_op(",")) {
      ++pos_;
      if (cur().type == Tok::kBlockEnd || cur().type == Tok::kVarEnd || is_name("if")) break;
      TS_ASSIGN_OR_RETURN(ExprPtr e, with_cond ? expr() : or_expr());
      t->args.push_back(std::move(e));
    }
    return t;
  }

  Result<ExprPtr> expr() {
    if (++depth_ > kMaxNesting) return err(cur().offset, "expression nested too deeply");
    TS_ASSIGN_OR_RETURN(ExprPtr e, or_expr());
    while (is_name("if")) {
      size_t offset = cur().offset;
      ++pos_;
      auto c = node(Expr::Kind::kCond, offset);
      c->a = std::move(e);
      TS_ASSIGN_OR_RETURN(c->b, or_expr());
      if (is_name("else")) {
        ++pos_;
        TS_ASSIGN_OR_RETURN(c->c, expr());
      }
      e = std::move(c);
    }
    --depth_;
    return e;
  }

  using Sub = Result<ExprPtr> (Parser::*)();
  Result<ExprPtr> binary_chain(Sub sub, const std::vector<const char*>& ops, bool names) {
    TS_ASSIGN_OR_RETURN(ExprPtr left, (this->*sub)());
    while (true) {
      const char* hit = nullptr;
      for (const char* op : ops) {
        if (names ? is_name(op) : is_op(op)) hit = op;
      }
      if (hit == nullptr) return left;
      auto b = node(Expr::Kind::kBinary, cur().offset);
      ++pos_;
      b->name = hit;
      b->a = std::move(left);
      TS_ASSIGN_OR_RETURN(b->b, (this->*sub)());
      left = std::move(b);
    }
  }

  Result<ExprPtr> or_expr() { return binary_chain(&Parser::and_expr, {"or"}, true); }
  Result<ExprPtr> and_expr() { return binary_chain(&Parser::not_expr, {"and"}, true); }

  Result<ExprPtr> not_expr() {
    if (is_name("not")) {
      auto u = node(Expr::Kind::kUnary, cur().offset);
      ++pos_;
      u->name = "not";
      if (++depth_ > kMaxNesting) return err(cur().offset, "expression nested too deeply");
      TS_ASSIGN_OR_RETURN(u->a, not_expr());
      --depth_;
      return u;
    }
    return compare();
  }

  // a < b < c is a chain: (a < b) and (b < c), each operand evaluated once.
  Result<ExprPtr> compare() {
    size_t offset = cur().offset;
    TS_ASSIGN_OR_RETURN(ExprPtr left, math1());
    std::vector<std::string> ops;
    std::vector<ExprPtr> operands;
    operands.push_back(std::move(left));
    while (true) {
      std::string op;
      if (cur().type == Tok::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
           cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        ++pos_;
      } else if (is_name("in")) {
        op = "in";
        ++pos_;
      } else if (is_name("not") && peek_name(1) == "in") {
        op = "notin";
        pos_ += 2;
      } else {
        break;
      }
      TS_ASSIGN_OR_RETURN(ExprPtr right, math1());
      ops.push_back(op);
      operands.push_back(std::move(right));
    }
    if (ops.empty()) return std::move(operands[0]);
    auto c = node(Expr::Kind::kCompare, offset);
    c->ops = std::move(ops);
    c->args = std::move(operands);
    return c;
  }

  Result<ExprPtr> math1() { return binary_chain(&Parser::concat, {"+", "-"}, false); }
  Result<ExprPtr> concat() { return binary_chain(&Parser::math2, {"~"}, false); }
  Result<ExprPtr> math2() { return binary_chain(&Parser::pow_expr, {"*", "/", "//", "%"}, false); }
  Result<ExprPtr> pow_expr() { return binary_chain(&Parser::unary_filtered, {"**"}, false); }
  Result<ExprPtr> unary_filtered() { return unary(true); }

  Result<ExprPtr> unary(bool with_filter) {
    if (++depth_ > kMaxNesting) return err(cur().offset, "expression nested too deeply");
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(Expr::Kind::kUnary, cur().offset);
      e->name = cur().text;
      ++pos_;
      TS_ASSIGN_OR_RETURN(e->a, unary(false));
    } else {
      TS_ASSIGN_OR_RETURN(e, primary());
    }
    TS_ASSIGN_OR_RETURN(e, postfix(std::move(e)));
    if (with_filter) {
      TS_ASSIGN_OR_RETURN(e, filters(std::move(e)));
    }
    --depth_;
    return e;
  }

  Result<ExprPtr> primary() {
    const Token& k = cur();
    size_t offset = k.offset;
    if (k.type == Tok::kName) {
      ++pos_;
      auto e = node(Expr::Kind::kLiteral, offset);
      if (k.text == "true" || k.text == "True") e->literal = Value(true);
      else if (k.text == "false" || k.text == "False") e->literal = Value(false);
      else if (k.text == "none" || k.text == "None") e->literal = Value::none();
      else {
        e->kind = Expr::Kind::kName;
        e->name = k.text;
      }
      return e;
    }
    if (k.type == Tok::kString) {
      std::string s;
      while (cur().type == Tok::kString) s += t_[pos_++].text;
      auto e = node(Expr::Kind::kLiteral, offset);
      e->literal = Value(std::move(s));
      return e;
    }
    if (k.type == Tok::kInt || k.type == Tok::kFloat) {
      ++pos_;
      auto e = node(Expr::Kind::kLiteral, offset);
      try {
        e->literal = k.type == Tok::kInt ? Value(static_cast<int64_t>(std::stoll(k.text))) : Value(std::stod(k.text));
      } catch (...) {
        return err(offset, "number out of range: " + k.text);
      }
      return e;
    }
    if (is_op("(")) {
      ++pos_;
      if (is_op(")")) {
        ++pos_;
        return node(Expr::Kind::kTuple, offset);
      }
      TS_ASSIGN_OR_RETURN(ExprPtr e, expr());
      if (is_op(",")) {
        auto t = node(Expr::Kind::kTuple, offset);
        t->args.push_back(std::move(e));
        while (is_op(",")) {
          ++pos_;
          if (is_op(")")) break;
          TS_ASSIGN_OR_RETURN(ExprPtr x, expr());
          t->args.push_back(std::move(x));
        }
        e = std::move(t);
      }
      TS_TRY(expect_op(")"));
      return e;
    }
    if (is_op("[")) {
      ++pos_;
      auto l = node(Expr::Kind::kList, offset);
      while (!is_op("]")) {
        TS_ASSIGN_OR_RETURN(ExprPtr x, expr());
        l->args.push_back(std::move(x));
        if (!is_op(",")) break;
        ++pos_;
      }
      TS_TRY(expect_op("]"));
      return l;
    }
    if (is_op("{")) {
      ++pos_;
      auto d = node(Expr::Kind::kDict, offset);
      while (!is_op("}")) {
        TS_ASSIGN_OR_RETURN(ExprPtr key, expr());
        TS_TRY(expect_op(":"));
        TS_ASSIGN_OR_RETURN(ExprPtr val, expr());
        d->args.push_back(std::move(key));
        d->args.push_back(std::move(val));
        if (!is_op(",")) break;
        ++pos_;
      }
      TS_TRY(expect_op("}"));
      return d;
    }
    return unexpected();
  }

  Result<ExprPtr> postfix(ExprPtr e) {
    while (true) {
      size_t offset = cur().offset;
      if (is_op(".")) {
        ++pos_;
        if (cur().type == Tok::kInt) {
          auto it = node(Expr::Kind::kItem, offset);
          it->a = std::move(e);
          it->b = node(Expr::Kind::kLiteral, offset);
          it->b->literal = Value(static_cast<int64_t>(std::stoll(t_[pos_++].text)));
          e = std::move(it);
          continue;
        }
        auto a = node(Expr::Kind::kAttr, offset);
        a->a = std::move(e);
        TS_ASSIGN_OR_RETURN(a->name, expect_name());
        e = std::move(a);
      } else if (is_op("[")) {
        ++pos_;
        TS_ASSIGN_OR_RETURN(e, subscript(std::move(e), offset));
        TS_TRY(expect_op("]"));
      } else if (is_op("(")) {
        TS_ASSIGN_OR_RETURN(e, call(std::move(e), offset));
      } else {
        return e;
      }
    }
  }

  Result<ExprPtr> subscript(ExprPtr obj, size_t offset) {
    ExprPtr parts[3];
    int part = 0;
    bool slice = false;
    while (true) {
      if (is_op(":")) {
        slice = true;
        if (++part > 2) return err(cur().offset, "too many ':' in a slice");
        ++pos_;
        continue;
      }
      if (is_op("]")) break;
      TS_ASSIGN_OR_RETURN(parts[part], expr());
      if (!slice && !is_op(":")) break;
    }
    if (!slice) {
      if (!parts[0]) return err(cur().offset, "expected a subscript");
      auto it = node(Expr::Kind::kItem, offset);
      it->a = std::move(obj);
      it->b = std::move(parts[0]);
      return it;
    }
    auto s = node(Expr::Kind::kSlice, offset);
    s->a = std::move(obj);
    for (auto& p : parts) s->args.push_back(std::move(p));
    return s;
  }

  Status call_args(Expr& e) {
    TS_TRY(expect_op("("));
    while (!is_op(")")) {
      if (cur().type == Tok::kName && at(1).type == Tok::kOp && at(1).text == "=") {
        std::string k = t_[pos_].text;
        pos_ += 2;
        TS_ASSIGN_OR_RETURN(ExprPtr v, expr());
        e.kwargs.emplace_back(std::move(k), std::move(v));
      } else {
        if (!e.kwargs.empty()) return err(cur().offset, "positional argument after keyword argument");
        TS_ASSIGN_OR_RETURN(ExprPtr v, expr());
        e.args.push_back(std::move(v));
      }
      if (!is_op(",")) break;
      ++pos_;
    }
    return expect_op(")");
  }

  Result<ExprPtr> call(ExprPtr callee, size_t offset) {
    auto c = node(Expr::Kind::kCall, offset);
    c->a = std::move(callee);
    TS_TRY(call_args(*c));
    return c;
  }

  Result<ExprPtr> filters(ExprPtr e) {
    while (true) {
      size_t offset = cur().offset;
      if (is_op("|")) {
        ++pos_;
        auto f = node(Expr::Kind::kFilter, offset);
        TS_ASSIGN_OR_RETURN(f->name, expect_name());
        f->a = std::move(e);
        if (is_op("(")) TS_TRY(call_args(*f));
        e = std::move(f);
      } else if (is_name("is")) {
        ++pos_;
        auto t = node(Expr::Kind::kTest, offset);
        if (is_name("not")) {
          t->negated = true;
          ++pos_;
        }
        TS_ASSIGN_OR_RETURN(t->name, expect_name());
        t->a = std::move(e);
        if (is_op("(")) {
          TS_TRY(call_args(*t));
        } else if ((cur().type == Tok::kName || cur().type == Tok::kString || cur().type == Tok::kInt ||
                    cur().type == Tok::kFloat || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          TS_ASSIGN_OR_RETURN(ExprPtr arg, primary());
          TS_ASSIGN_OR_RETURN(arg, postfix(std::move(arg)));
          t->args.push_back(std::move(arg));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        TS_ASSIGN_OR_RETURN(e, call(std::move(e), offset));
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& t_;
  const SourceMap& map_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<Body> parse_tokens(const std::vector<Token>& tokens, const SourceMap& map) {
  return Parser(tokens, map).parse_all();
}

}  // namespace tessera::jinja::internal
