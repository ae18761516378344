#include "engine/jinja_parser.hpp"

#include <algorithm>
#include <initializer_list>

#include "engine/jinja_builtins.hpp"
#include "engine/jinja_lexer.hpp"

namespace tandem::jinja {

namespace {

using namespace ast;

// Parser recursion (parentheses, nested statements, unary chains) and expression-tree
// height are bounded so that neither parsing nor evaluating can overflow the stack.
constexpr int kMaxParseNesting = 200;  // about two per bracket or statement level
constexpr uint32_t kMaxExprDepth = 256;

using Names = std::initializer_list<std::string_view>;

bool one_of(std::string_view s, Names names) { return std::find(names.begin(), names.end(), s) != names.end(); }

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
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    ++i_;
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    ++i_;
    return true;
  }

  [[noreturn]] void fail(uint32_t pos, const std::string& what) const { throw Error(what, pos); }

  std::string where(uint32_t pos) const {
    const LineCol lc = line_col(src_, pos);
    return std::to_string(lc.line) + ":" + std::to_string(lc.column);
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::Data:
        return "template text";
      case TokenType::VarBegin:
        return "'{{'";
      case TokenType::VarEnd:
        return "end of print statement '}}'";
      case TokenType::BlockBegin:
        return "'{%'";
      case TokenType::BlockEnd:
        return "end of statement '%}'";
      case TokenType::Name:
        return "'" + t.text + "'";
      case TokenType::String:
        return "string literal";
      case TokenType::Int:
      case TokenType::Float:
        return "number " + t.text;
      case TokenType::Operator:
        return "'" + t.text + "'";
      case TokenType::Eof:
        return "end of template";
    }
    return "token";
  }

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

  static void bump(Expr& parent, const Expr* child, const Parser& p) {
    if (!child) return;
    parent.depth = std::max(parent.depth, child->depth + 1);
    if (parent.depth > kMaxExprDepth) {
      p.fail(parent.pos, "expression nested too deeply (more than " + std::to_string(kMaxExprDepth) + " levels)");
    }
  }
  void bump(Expr& parent, const Expr* child) const { bump(parent, child, *this); }
  void bump_args(Expr& parent, const CallArgs& a) const {
    for (const auto& e : a.positional) bump(parent, e.get());
    for (const auto& [n, e] : a.named) bump(parent, e.get());
  }

  // ---- statements ------------------------------------------------------------------

  // Statements until `{% <one of ends> %}` (left unconsumed, positioned at its name) or,
  // when `ends` is empty, the end of the template.
  Body parse_body(Names ends, uint32_t open_pos, std::string_view open_what) {
    Body body;
    while (true) {
      const Token& t = cur();
      switch (t.type) {
        case TokenType::Data:
          body.push_back(std::make_unique<Text>(t.pos, t.text));
          ++i_;
          break;
        case TokenType::VarBegin: {
          const uint32_t pos = t.pos;
          ++i_;
          ExprPtr e = parse_tuple(true, {});
          if (cur().type != TokenType::VarEnd) fail(cur().pos, "expected '}}', got " + describe(cur()));
          ++i_;
          body.push_back(std::make_unique<Print>(pos, std::move(e)));
          break;
        }
        case TokenType::BlockBegin: {
          const Token& name = look();
          if (name.type == TokenType::Name && one_of(name.text, ends)) {
            ++i_;
            return body;
          }
          ++i_;
          body.push_back(parse_statement(ends, open_pos, open_what));
          break;
        }
        case TokenType::Eof:
          if (ends.size() != 0) {
            std::string_view closer = *std::prev(ends.end());
            for (std::string_view e : ends) {
              if (e.starts_with("end")) closer = e;
            }
            fail(open_pos,
                 "'" + std::string(open_what) + "' is never closed: missing {% " + std::string(closer) + " %}");
          }
          return body;
        default:
          fail(t.pos, "unexpected " + describe(t));
      }
    }
  }

  StmtPtr parse_statement(Names ends, uint32_t open_pos, std::string_view open_what) {
    const Token& t = cur();
    if (t.type != TokenType::Name) fail(t.pos, "expected a statement name after '{%', got " + describe(t));
    Nest nest(*this, t.pos);
    const std::string& n = t.text;
    if (n == "if") return parse_if();
    if (n == "for") return parse_for();
    if (n == "set") return parse_set();
    if (n == "macro") return parse_macro();
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) fail(t.pos, "'" + n + "' outside of a for loop");
      const uint32_t pos = t.pos;
      const StmtKind k = n == "break" ? StmtKind::Break : StmtKind::Continue;
      ++i_;
      expect_block_end();
      return std::make_unique<LoopControl>(k, pos);
    }
    if (n == "generation") {  // transformers' assistant-mask tag: renders its body
      auto b = std::make_unique<Block>(t.pos);
      ++i_;
      expect_header_end();
      b->body = parse_body({"endgeneration"}, b->pos, "generation");
      ++i_;
      expect_block_end();
      return b;
    }
    if (one_of(n, {"block", "extends", "include", "import", "from", "call", "filter", "with", "autoescape", "do",
                   "trans", "pluralize", "raw"})) {
      fail(t.pos, "unsupported statement '{% " + n + " %}'");
    }
    if (n.starts_with("end") || n == "elif" || n == "else") {
      std::string msg = "unexpected '{% " + n + " %}'";
      if (ends.size() != 0) {
        msg += " inside the '" + std::string(open_what) + "' at " + where(open_pos) + " (expected";
        for (std::string_view e : ends) msg += " '" + std::string(e) + "'";
        msg += ")";
      }
      fail(t.pos, msg);
    }
    fail(t.pos, "unknown statement '{% " + n + " %}'");
  }

  StmtPtr parse_if() {
    auto node = std::make_unique<If>(cur().pos);
    ++i_;
    while (true) {
      ExprPtr cond = parse_tuple(false, {});
      expect_header_end();
      Body body = parse_body({"elif", "else", "endif"}, node->pos, "if");
      node->branches.emplace_back(std::move(cond), std::move(body));
      const std::string tag = toks_[i_++].text;
      if (tag == "elif") continue;
      if (tag == "else") {
        expect_header_end();
        node->otherwise = parse_body({"endif"}, node->pos, "if");
        ++i_;
      }
      expect_block_end();
      return node;
    }
  }

  StmtPtr parse_for() {
    auto node = std::make_unique<For>(cur().pos);
    ++i_;
    node->target = parse_target(false, {"in"});
    check_not_loop(node->target);
    if (!skip_name("in")) fail(cur().pos, "expected 'in' in for loop, got " + describe(cur()));
    node->iter = parse_tuple(false, {"recursive"});
    if (skip_name("if")) node->filter = parse_expression(true);
    if (is_name("recursive")) fail(cur().pos, "unsupported: recursive for loops");
    expect_header_end();
    ++loop_depth_;
    node->body = parse_body({"endfor", "else"}, node->pos, "for");
    --loop_depth_;
    if (toks_[i_++].text == "else") {
      expect_header_end();
      node->otherwise = parse_body({"endfor"}, node->pos, "for");
      ++i_;
    }
    expect_block_end();
    return node;
  }

  StmtPtr parse_set() {
    const uint32_t pos = cur().pos;
    ++i_;
    Target target = parse_target(true, {});
    if (skip_op("=")) {
      auto node = std::make_unique<Set>(pos);
      node->target = std::move(target);
      node->value = parse_tuple(true, {});
      expect_block_end();
      return node;
    }
    auto node = std::make_unique<SetBlock>(pos);
    node->target = std::move(target);
    while (is_op("|")) {
      ExprPtr f = parse_filter(nullptr);
      node->filters.emplace_back(static_cast<Filter*>(f.release()));
    }
    expect_header_end();
    node->body = parse_body({"endset"}, pos, "set");
    ++i_;
    expect_block_end();
    return node;
  }

  StmtPtr parse_macro() {
    auto node = std::make_unique<Macro>(cur().pos);
    ++i_;
    node->name = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      if (!node->params.empty()) expect_op(",");
      const uint32_t ppos = cur().pos;
      node->params.push_back(expect_name());
      if (skip_op("=")) {
        node->defaults.push_back(parse_expression(true));
      } else if (!node->defaults.empty()) {
        fail(ppos, "non-default macro argument follows default argument");
      }
    }
    ++i_;
    expect_header_end();
    const int saved_loops = loop_depth_;
    const bool saved_macro = in_macro_;
    loop_depth_ = 0;
    in_macro_ = true;
    node->body = parse_body({"endmacro"}, node->pos, "macro");
    loop_depth_ = saved_loops;
    in_macro_ = saved_macro;
    ++i_;
    expect_block_end();
    return node;
  }

  void check_not_loop(const Target& t) const {
    if (t.name == "loop") fail(t.pos, "cannot assign to the special loop variable 'loop' in a for-loop target");
    for (const Target& item : t.items) check_not_loop(item);
  }

  bool is_tuple_end(Names extra) const {
    const Token& t = cur();
    if (t.type == TokenType::VarEnd || t.type == TokenType::BlockEnd) return true;
    if (t.type == TokenType::Operator && t.text == ")") return true;
    return t.type == TokenType::Name && one_of(t.text, extra);
  }

  // A for/set target: a name, `ns.attr` (set only), or a tuple of targets.
  Target parse_target(bool allow_ns, Names extra) {
    Target t;
    t.pos = cur().pos;
    if (allow_ns && cur().type == TokenType::Name && look().type == TokenType::Operator && look().text == ".") {
      t.name = expect_name();
      ++i_;
      t.attr = expect_name();
      return t;
    }
    bool tuple = false;
    std::vector<Target> items;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra)) break;
      items.push_back(parse_target_item());
      if (is_op(",")) {
        tuple = true;
      } else {
        break;
      }
    }
    if (items.empty()) fail(cur().pos, "expected an assignment target, got " + describe(cur()));
    if (!tuple) return std::move(items[0]);
    t.items = std::move(items);
    return t;
  }

  Target parse_target_item() {
    Nest nest(*this, cur().pos);
    if (skip_op("(")) {
      Target t = parse_target(false, {});
      expect_op(")");
      return t;
    }
    const Token& tok = cur();
    if (tok.type != TokenType::Name || one_of(tok.text, {"true", "false", "True", "False", "none", "None"})) {
      fail(tok.pos, "cannot assign to " + describe(tok));
    }
    Target t;
    t.pos = tok.pos;
    t.name = tok.text;
    ++i_;
    return t;
  }

  // ---- expressions -----------------------------------------------------------------

  ExprPtr parse_expression(bool condexpr) {
    Nest nest(*this, cur().pos);
    return condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr e1 = parse_or();
    while (is_name("if")) {
      const uint32_t pos = cur().pos;
      ++i_;
      ExprPtr e2 = parse_or();
      ExprPtr e3;
      if (skip_name("else")) {
        Nest nest(*this, pos);
        e3 = parse_condexpr();
      }
      auto c = std::make_unique<Cond>(pos, std::move(e2), std::move(e1));
      c->otherwise = std::move(e3);
      bump(*c, c->test.get());
      bump(*c, c->then.get());
      bump(*c, c->otherwise.get());
      e1 = std::move(c);
    }
    return e1;
  }

  ExprPtr logical(ExprKind k, uint32_t pos, ExprPtr l, ExprPtr r) {
    auto e = std::make_unique<Logical>(k, pos, std::move(l), std::move(r));
    bump(*e, e->left.get());
    bump(*e, e->right.get());
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const uint32_t pos = cur().pos;
      ++i_;
      left = logical(ExprKind::Or, pos, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const uint32_t pos = cur().pos;
      ++i_;
      left = logical(ExprKind::And, pos, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr unary(ExprKind k, uint32_t pos, ExprPtr operand) {
    auto e = std::make_unique<Unary>(k, pos, std::move(operand));
    bump(*e, e->operand.get());
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      const uint32_t pos = cur().pos;
      Nest nest(*this, pos);
      ++i_;
      return unary(ExprKind::Not, pos, parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const uint32_t pos = cur().pos;
    ExprPtr first = parse_math1();
    std::unique_ptr<Compare> cmp;
    while (true) {
      const Token& t = cur();
      CmpOp op;
      if (t.type == TokenType::Operator && one_of(t.text, {"==", "!=", "<", "<=", ">", ">="})) {
        op = t.text == "==" ? CmpOp::Eq
             : t.text == "!=" ? CmpOp::Ne
             : t.text == "<"  ? CmpOp::Lt
             : t.text == "<=" ? CmpOp::Le
             : t.text == ">"  ? CmpOp::Gt
                              : CmpOp::Ge;
        ++i_;
      } else if (is_name("in")) {
        op = CmpOp::In;
        ++i_;
      } else if (is_name("not") && look().type == TokenType::Name && look().text == "in") {
        op = CmpOp::NotIn;
        i_ += 2;
      } else {
        break;
      }
      if (!cmp) cmp = std::make_unique<Compare>(pos, std::move(first));
      ExprPtr rhs = parse_math1();
      bump(*cmp, rhs.get());
      cmp->rest.push_back({op, t.pos, std::move(rhs)});
    }
    if (!cmp) return first;
    bump(*cmp, cmp->first.get());
    return cmp;
  }

  ExprPtr binary(BinOp op, uint32_t pos, ExprPtr l, ExprPtr r) {
    auto e = std::make_unique<Binary>(pos, op, std::move(l), std::move(r));
    bump(*e, e->left.get());
    bump(*e, e->right.get());
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const BinOp op = cur().text == "+" ? BinOp::Add : BinOp::Sub;
      const uint32_t pos = cur().pos;
      ++i_;
      left = binary(op, pos, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    const uint32_t pos = cur().pos;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto c = std::make_unique<Concat>(pos);
    c->items.push_back(std::move(first));
    while (skip_op("~")) c->items.push_back(parse_math2());
    for (const auto& e : c->items) bump(*c, e.get());
    return c;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string& t = cur().text;
      const BinOp op = t == "*" ? BinOp::Mul : t == "/" ? BinOp::Div : t == "//" ? BinOp::FloorDiv : BinOp::Mod;
      const uint32_t pos = cur().pos;
      ++i_;
      left = binary(op, pos, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const uint32_t pos = cur().pos;
      ++i_;
      left = binary(BinOp::Pow, pos, std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    const uint32_t pos = cur().pos;
    Nest nest(*this, pos);
    ExprPtr node;
    if (skip_op("-")) {
      node = unary(ExprKind::Neg, pos, parse_unary(false));
    } else if (skip_op("+")) {
      node = unary(ExprKind::Pos, pos, parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.type) {
      case TokenType::Name: {
        ++i_;
        if (one_of(t.text, {"true", "True"})) return std::make_unique<Const>(t.pos, Value::boolean(true));
        if (one_of(t.text, {"false", "False"})) return std::make_unique<Const>(t.pos, Value::boolean(false));
        if (one_of(t.text, {"none", "None"})) return std::make_unique<Const>(t.pos, Value::none());
        if (in_macro_ && one_of(t.text, {"varargs", "kwargs", "caller"})) {
          fail(t.pos, "unsupported: '" + t.text + "' in a macro");
        }
        return std::make_unique<Name>(t.pos, t.text);
      }
      case TokenType::String: {
        const uint32_t pos = t.pos;
        std::string s;
        while (cur().type == TokenType::String) s += toks_[i_++].text;  // "a" "b" is "ab"
        return std::make_unique<Const>(pos, Value::string(std::move(s)));
      }
      case TokenType::Int: ++i_; return std::make_unique<Const>(t.pos, Value::integer(t.int_value));
      case TokenType::Float: ++i_; return std::make_unique<Const>(t.pos, Value::number(t.float_value));
      case TokenType::Operator:
        if (t.text == "(") {
          ++i_;
          ExprPtr e = parse_tuple(true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default: break;
    }
    fail(t.pos, "unexpected " + describe(t));
  }

  // Comma-separated expressions: one expression, or a tuple when there is a comma.
  ExprPtr parse_tuple(bool condexpr, Names extra, bool explicit_parens = false) {
    const uint32_t pos = cur().pos;
    std::vector<ExprPtr> items;
    bool tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra)) break;
      items.push_back(parse_expression(condexpr));
      if (is_op(",")) {
        tuple = true;
      } else {
        break;
      }
    }
    if (!tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail(cur().pos, "expected an expression, got " + describe(cur()));
    }
    auto l = std::make_unique<ListExpr>(pos, true);
    l->items = std::move(items);
    for (const auto& e : l->items) bump(*l, e.get());
    return l;
  }

  ExprPtr parse_list() {
    auto l = std::make_unique<ListExpr>(cur().pos, false);
    ++i_;
    while (!is_op("]")) {
      if (!l->items.empty()) expect_op(",");
      if (is_op("]")) break;
      l->items.push_back(parse_expression(true));
      bump(*l, l->items.back().get());
    }
    ++i_;
    return l;
  }

  ExprPtr parse_dict() {
    auto d = std::make_unique<DictExpr>(cur().pos);
    ++i_;
    while (!is_op("}")) {
      if (!d->items.empty()) expect_op(",");
      if (is_op("}")) break;
      ExprPtr k = parse_expression(true);
      expect_op(":");
      ExprPtr v = parse_expression(true);
      bump(*d, k.get());
      bump(*d, v.get());
      d->items.emplace_back(std::move(k), std::move(v));
    }
    ++i_;
    return d;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& t = toks_[i_++];
    if (t.text == ".") {
      const Token& a = toks_[i_++];
      ExprPtr e;
      if (a.type == TokenType::Name) {
        e = std::make_unique<Getattr>(a.pos, std::move(node), a.text);
        bump(*e, static_cast<Getattr&>(*e).obj.get());
      } else if (a.type == TokenType::Int) {
        e = std::make_unique<Getitem>(a.pos, std::move(node),
                                      std::make_unique<Const>(a.pos, Value::integer(a.int_value)));
        bump(*e, static_cast<Getitem&>(*e).obj.get());
      } else {
        fail(a.pos, "expected a name or number after '.', got " + describe(a));
      }
      return e;
    }
    // '[': an index or a slice. Jinja also parses x[a, b] (a tuple key), which no
    // Python list, str or dict accepts; it is rejected here.
    const uint32_t pos = t.pos;
    if (is_op("]")) fail(cur().pos, "expected an index or slice");
    ExprPtr start, stop, step;
    bool slice = false;
    if (!is_op(":")) {
      start = parse_expression(true);
    }
    if (skip_op(":")) {
      slice = true;
      if (!is_op(":") && !is_op("]") && !is_op(",")) stop = parse_expression(true);
      if (skip_op(":")) {
        if (!is_op("]") && !is_op(",")) step = parse_expression(true);
      }
    }
    if (is_op(",")) fail(cur().pos, "unsupported: subscript with several indices");
    expect_op("]");
    if (!slice) {
      auto e = std::make_unique<Getitem>(pos, std::move(node), std::move(start));
      bump(*e, e->obj.get());
      bump(*e, e->key.get());
      return e;
    }
    auto e = std::make_unique<Slice>(pos, std::move(node));
    e->start = std::move(start);
    e->stop = std::move(stop);
    e->step = std::move(step);
    for (const Expr* x : {e->obj.get(), e->start.get(), e->stop.get(), e->step.get()}) bump(*e, x);
    return e;
  }

  CallArgs parse_call_args() {
    expect_op("(");
    CallArgs a;
    bool need_comma = false;
    while (!is_op(")")) {
      if (need_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) fail(cur().pos, "unsupported: *args / **kwargs in a call");
      if (cur().type == TokenType::Name && look().type == TokenType::Operator && look().text == "=") {
        std::string name = cur().text;
        i_ += 2;
        a.named.emplace_back(std::move(name), parse_expression(true));
      } else {
        if (!a.named.empty()) fail(cur().pos, "positional argument follows keyword argument");
        a.positional.push_back(parse_expression(true));
      }
      need_comma = true;
    }
    ++i_;
    return a;
  }

  ExprPtr parse_call(ExprPtr callee) {
    const uint32_t pos = cur().pos;
    if (callee->kind == ExprKind::Getattr) {
      const auto& g = static_cast<const Getattr&>(*callee);
      if (!has_method(g.attr)) fail(g.pos, "unsupported method '" + g.attr + "()'");
    } else if (callee->kind == ExprKind::Name) {
      const std::string& n = static_cast<const Name&>(*callee).name;
      if (is_unsupported_global(n)) fail(callee->pos, "unsupported function '" + n + "()'");
      if (n == "loop") fail(callee->pos, "unsupported: recursive loop call 'loop()'");
    }
    auto c = std::make_unique<Call>(pos, std::move(callee));
    c->args = parse_call_args();
    bump(*c, c->callee.get());
    bump_args(*c, c->args);
    return c;
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (skip_op(".")) name += "." + expect_name();
    return name;
  }

  // Filters and tests that take the name of another filter or test as an argument are
  // checked here too, when that name is a literal.
  void check_named_callee(const CallArgs& a, size_t index, bool is_test) {
    if (a.positional.size() <= index || a.positional[index]->kind != ExprKind::Const) return;
    const Value& v = static_cast<const Const&>(*a.positional[index]).value;
    if (!v.is_string()) return;
    if (is_test ? !has_test(v.str()) : !has_filter(v.str())) {
      fail(a.positional[index]->pos, std::string("unsupported ") + (is_test ? "test '" : "filter '") + v.str() + "'");
    }
  }

  ExprPtr parse_filter(ExprPtr node) {
    ++i_;  // '|'
    const uint32_t pos = cur().pos;
    std::string name = dotted_name();
    if (!has_filter(name)) fail(pos, "unsupported filter '" + name + "'");
    auto f = std::make_unique<Filter>(pos, std::move(node), name);
    if (is_op("(")) f->args = parse_call_args();
    if (name == "map") check_named_callee(f->args, 0, false);
    if (name == "select" || name == "reject") check_named_callee(f->args, 0, true);
    if (name == "selectattr" || name == "rejectattr") check_named_callee(f->args, 1, true);
    bump(*f, f->obj.get());
    bump_args(*f, f->args);
    return f;
  }

  ExprPtr parse_test(ExprPtr node) {
    const uint32_t is_pos = cur().pos;
    ++i_;  // 'is'
    const bool negated = skip_name("not");
    const uint32_t pos = cur().pos;
    std::string name = dotted_name();
    if (!has_test(name)) fail(pos, "unsupported test '" + name + "'");
    auto t = std::make_unique<Test>(pos, std::move(node), name);
    const Token& c = cur();
    if (is_op("(")) {
      t->args = parse_call_args();
    } else if ((c.type == TokenType::Name || c.type == TokenType::String || c.type == TokenType::Int ||
                c.type == TokenType::Float || is_op("[") || is_op("{")) &&
               !(c.type == TokenType::Name && one_of(c.text, {"else", "or", "and"}))) {
      // One argument without parentheses: `x is divisibleby 3`, `x is sameas none`.
      if (is_name("is")) fail(c.pos, "cannot chain tests with 'is'");
      ExprPtr arg = parse_postfix(parse_primary());
      t->args.positional.push_back(std::move(arg));
    }
    bump(*t, t->obj.get());
    bump_args(*t, t->args);
    if (!negated) return t;
    return unary(ExprKind::Not, is_pos, std::move(t));
  }
};

}  // namespace

std::unique_ptr<ast::Template> parse(std::string_view source) {
  auto t = std::make_unique<ast::Template>();
  t->source = normalize_newlines(source);
  Parser p(tokenize(t->source), t->source);
  t->body = p.parse_template();
  return t;
}

}  // namespace tandem::jinja
