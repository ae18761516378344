// The expression half of the Jinja parser (jinja_parser_impl.hpp), loosest-binding first:
// conditional, or, and, not, comparisons, + -, ~, * / // %, **, unary, then postfix
// (attributes, subscripts, calls) and the filter/test chain.
#include "engine/chat/jinja/jinja_builtins.hpp"
#include "engine/chat/jinja/jinja_parser_impl.hpp"

namespace tandem::jinja::parsing {

ExprPtr Parser::parse_condexpr() {
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

ExprPtr Parser::logical(ExprKind k, uint32_t pos, ExprPtr l, ExprPtr r) {
  auto e = std::make_unique<Logical>(k, pos, std::move(l), std::move(r));
  bump(*e, e->left.get());
  bump(*e, e->right.get());
  return e;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    const uint32_t pos = cur().pos;
    ++i_;
    left = logical(ExprKind::Or, pos, std::move(left), parse_and());
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    const uint32_t pos = cur().pos;
    ++i_;
    left = logical(ExprKind::And, pos, std::move(left), parse_not());
  }
  return left;
}

ExprPtr Parser::unary(ExprKind k, uint32_t pos, ExprPtr operand) {
  auto e = std::make_unique<Unary>(k, pos, std::move(operand));
  bump(*e, e->operand.get());
  return e;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    const uint32_t pos = cur().pos;
    Nest nest(*this, pos);
    ++i_;
    return unary(ExprKind::Not, pos, parse_not());
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
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

ExprPtr Parser::binary(BinOp op, uint32_t pos, ExprPtr l, ExprPtr r) {
  auto e = std::make_unique<Binary>(pos, op, std::move(l), std::move(r));
  bump(*e, e->left.get());
  bump(*e, e->right.get());
  return e;
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const BinOp op = cur().text == "+" ? BinOp::Add : BinOp::Sub;
    const uint32_t pos = cur().pos;
    ++i_;
    left = binary(op, pos, std::move(left), parse_concat());
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  const uint32_t pos = cur().pos;
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  auto c = std::make_unique<Concat>(pos);
  c->items.push_back(std::move(first));
  while (skip_op("~")) c->items.push_back(parse_math2());
  for (const auto& e : c->items) bump(*c, e.get());
  return c;
}

ExprPtr Parser::parse_math2() {
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

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (is_op("**")) {
    const uint32_t pos = cur().pos;
    ++i_;
    left = binary(BinOp::Pow, pos, std::move(left), parse_unary(true));
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
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

ExprPtr Parser::parse_primary() {
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

ExprPtr Parser::parse_tuple(bool condexpr, Names extra, bool explicit_parens) {
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

ExprPtr Parser::parse_list() {
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

ExprPtr Parser::parse_dict() {
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

ExprPtr Parser::parse_postfix(ExprPtr node) {
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

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
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

ExprPtr Parser::parse_subscript(ExprPtr node) {
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

CallArgs Parser::parse_call_args() {
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

ExprPtr Parser::parse_call(ExprPtr callee) {
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

std::string Parser::dotted_name() {
  std::string name = expect_name();
  while (skip_op(".")) {
    name.push_back('.');
    name += expect_name();
  }
  return name;
}

void Parser::check_named_callee(const CallArgs& a, size_t index, bool is_test) {
  if (a.positional.size() <= index || a.positional[index]->kind != ExprKind::Const) return;
  const Value& v = static_cast<const Const&>(*a.positional[index]).value;
  if (!v.is_string()) return;
  if (is_test ? !has_test(v.str()) : !has_filter(v.str())) {
    fail(a.positional[index]->pos, std::string("unsupported ") + (is_test ? "test '" : "filter '") + v.str() + "'");
  }
}

ExprPtr Parser::parse_filter(ExprPtr node) {
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

ExprPtr Parser::parse_test(ExprPtr node) {
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

}  // namespace tandem::jinja::parsing
