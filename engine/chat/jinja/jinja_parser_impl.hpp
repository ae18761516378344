// The Jinja parser's internals, shared by jinja_parser.cpp (templates and statements) and
// jinja_parse_expr.cpp (expressions): a recursive-descent parser over the lexer's tokens.
// Private to engine/chat/jinja/; the interface is jinja_parser.hpp.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat/jinja/jinja_ast.hpp"
#include "engine/chat/jinja/jinja_lexer.hpp"

namespace tandem::jinja::parsing {

using namespace ast;

// Parser recursion (parentheses, nested statements, unary chains) and expression-tree
// height are bounded so that neither parsing nor evaluating can overflow the stack.
constexpr int kMaxParseNesting = 200;  // about two per bracket or statement level
constexpr uint32_t kMaxExprDepth = 256;

using Names = std::initializer_list<std::string_view>;

inline bool one_of(std::string_view s, Names names) { return std::find(names.begin(), names.end(), s) != names.end(); }

class Parser {
 public:
  Parser(std::vector<Token> toks, std::string_view source) : toks_(std::move(toks)), src_(source) {}

  Body parse_template() {
    Body body = parse_body({}, 0, "");
    return body;
  }

 private:
  std::vector<Token> toks_;
  std::string_view src_;
  size_t i_ = 0;
  int nesting_ = 0;
  int loop_depth_ = 0;  // for loops enclosing the current statement (reset inside macros)
  bool in_macro_ = false;

  struct Nest {
    Nest(Parser& p, uint32_t pos) : p(p) {
      if (++p.nesting_ > kMaxParseNesting) {
        p.fail(pos, "template nested too deeply (more than " + std::to_string(kMaxParseNesting / 2) + " levels)");
      }
    }
    ~Nest() { --p.nesting_; }
    Parser& p;
  };

  // ---- token helpers ---------------------------------------------------------------

  const Token& cur() const { return toks_[i_]; }
  const Token& look() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
  bool is_op(std::string_view op) const { return cur().type == TokenType::Operator && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == TokenType::Name && cur().text == n; }
  bool skip_op(std::string_view op);
  bool skip_name(std::string_view n);

  [[noreturn]] void fail(uint32_t pos, const std::string& what) const { throw Error(what, pos); }

  std::string where(uint32_t pos) const {
    const LineCol lc = line_col(src_, pos);
    return std::to_string(lc.line) + ":" + std::to_string(lc.column);
  }

  static std::string describe(const Token& t);

  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail(cur().pos, "expected '" + std::string(op) + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != TokenType::Name) fail(cur().pos, "expected a name, got " + describe(cur()));
    return toks_[i_++].text;
  }
  void expect_block_end() {
    if (cur().type != TokenType::BlockEnd) fail(cur().pos, "expected end of statement '%}', got " + describe(cur()));
    ++i_;
  }
  // The end of a statement that opens a body; Jinja accepts a Python-style colon here.
  void expect_header_end() {
    skip_op(":");
    expect_block_end();
  }

  static void bump(Expr& parent, const Expr* child, const Parser& p);
  void bump(Expr& parent, const Expr* child) const { bump(parent, child, *this); }
  void bump_args(Expr& parent, const CallArgs& a) const {
    for (const auto& e : a.positional) bump(parent, e.get());
    for (const auto& [n, e] : a.named) bump(parent, e.get());
  }

  // ---- statements ------------------------------------------------------------------

  // Statements until `{% <one of ends> %}` (left unconsumed, positioned at its name) or,
  // when `ends` is empty, the end of the template.
  Body parse_body(Names ends, uint32_t open_pos, std::string_view open_what);

  StmtPtr parse_statement(Names ends, uint32_t open_pos, std::string_view open_what);

  StmtPtr parse_if();

  StmtPtr parse_for();

  StmtPtr parse_set();

  StmtPtr parse_macro();

  void check_not_loop(const Target& t) const {
    if (t.name == "loop") fail(t.pos, "cannot assign to the special loop variable 'loop' in a for-loop target");
    for (const Target& item : t.items) check_not_loop(item);
  }

  bool is_tuple_end(Names extra) const;

  // A for/set target: a name, `ns.attr` (set only), or a tuple of targets.
  Target parse_target(bool allow_ns, Names extra);

  Target parse_target_item();

  // ---- expressions -----------------------------------------------------------------

  ExprPtr parse_expression(bool condexpr) {
    Nest nest(*this, cur().pos);
    return condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr();

  ExprPtr logical(ExprKind k, uint32_t pos, ExprPtr l, ExprPtr r);

  ExprPtr parse_or();

  ExprPtr parse_and();

  ExprPtr unary(ExprKind k, uint32_t pos, ExprPtr operand);

  ExprPtr parse_not();

  ExprPtr parse_compare();

  ExprPtr binary(BinOp op, uint32_t pos, ExprPtr l, ExprPtr r);

  ExprPtr parse_math1();

  ExprPtr parse_concat();

  ExprPtr parse_math2();

  ExprPtr parse_pow();

  ExprPtr parse_unary(bool with_filter);

  ExprPtr parse_primary();

  // Comma-separated expressions: one expression, or a tuple when there is a comma.
  ExprPtr parse_tuple(bool condexpr, Names extra, bool explicit_parens = false);

  ExprPtr parse_list();

  ExprPtr parse_dict();

  ExprPtr parse_postfix(ExprPtr node);

  ExprPtr parse_filter_expr(ExprPtr node);

  ExprPtr parse_subscript(ExprPtr node);

  CallArgs parse_call_args();

  ExprPtr parse_call(ExprPtr callee);

  std::string dotted_name();

  // Filters and tests that take the name of another filter or test as an argument are
  // checked here too, when that name is a literal.
  void check_named_callee(const CallArgs& a, size_t index, bool is_test);

  ExprPtr parse_filter(ExprPtr node);

  ExprPtr parse_test(ExprPtr node);
};

}  // namespace tandem::jinja::parsing
