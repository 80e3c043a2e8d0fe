// The parsed template: expression and statement trees. Owned by a Program; immutable after
// parsing, so one Program renders on many threads.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lexer.h"
#include "tessera/jinja/value.h"

namespace tessera::jinja::internal {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // args
    kTuple,    // args
    kDict,     // args: key, value, key, value...
    kAttr,     // a.name
    kItem,     // a[b]
    kSlice,    // a[args[0]:args[1]:args[2]] (null parts allowed)
    kCall,     // a(args, kwargs)
    kFilter,   // a | name(args, kwargs)
    kTest,     // a is [not] name(args)
    kUnary,    // name in {"-", "+", "not"}, operand a
    kBinary,   // a name b: + - * / // % ** ~ and or
    kCompare,  // args[0] ops[0] args[1] ops[1] ...: == != < > <= >= in notin
    kCond,     // a if b else c (c may be null)
  };
  Kind kind = Kind::kLiteral;
  size_t offset = 0;
  Value literal;
  std::string name;
  bool negated = false;
  ExprPtr a, b, c;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue };
  Kind kind = Kind::kText;
  size_t offset = 0;
  std::string text;                  // kText; kSet/kSetBlock/kMacro: the name
  std::string attr;                  // kSet: `set name.attr = ...`
  std::vector<std::string> targets;  // kFor / kSet tuple targets
  ExprPtr expr;                      // kOutput, kSet value, kFor iterable
  ExprPtr cond;                      // kFor `if` filter
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: (condition or null for else, body)
  Body body;                         // kFor, kSetBlock, kMacro
  Body else_body;                    // kFor
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro (default may be null)
};

struct Program {
  std::string source;  // normalized
  SourceMap map{""};
  Body body;
};

Result<Body> parse_tokens(const std::vector<Token>& tokens, const SourceMap& map);

}  // namespace tessera::jinja::internal
