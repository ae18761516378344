#include "engine/chat/jinja/jinja_parser.hpp"

#include "engine/chat/jinja/jinja_builtins.hpp"
#include "engine/chat/jinja/jinja_parser_impl.hpp"

namespace tandem::jinja {
namespace parsing {

bool Parser::skip_op(std::string_view op) {
  if (!is_op(op)) return false;
  ++i_;
  return true;
}

bool Parser::skip_name(std::string_view n) {
  if (!is_name(n)) return false;
  ++i_;
  return true;
}

std::string Parser::describe(const Token& t) {
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

void Parser::bump(Expr& parent, const Expr* child, const Parser& p) {
  if (!child) return;
  parent.depth = std::max(parent.depth, child->depth + 1);
  if (parent.depth > kMaxExprDepth) {
    p.fail(parent.pos, "expression nested too deeply (more than " + std::to_string(kMaxExprDepth) + " levels)");
  }
}

Body Parser::parse_body(Names ends, uint32_t open_pos, std::string_view open_what) {
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

StmtPtr Parser::parse_statement(Names ends, uint32_t open_pos, std::string_view open_what) {
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

StmtPtr Parser::parse_if() {
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

StmtPtr Parser::parse_for() {
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

StmtPtr Parser::parse_set() {
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

StmtPtr Parser::parse_macro() {
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

bool Parser::is_tuple_end(Names extra) const {
  const Token& t = cur();
  if (t.type == TokenType::VarEnd || t.type == TokenType::BlockEnd) return true;
  if (t.type == TokenType::Operator && t.text == ")") return true;
  return t.type == TokenType::Name && one_of(t.text, extra);
}

Target Parser::parse_target(bool allow_ns, Names extra) {
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

Target Parser::parse_target_item() {
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

}  // namespace parsing


std::unique_ptr<ast::Template> parse(std::string_view source) {
  auto t = std::make_unique<ast::Template>();
  t->source = normalize_newlines(source);
  parsing::Parser p(tokenize(t->source), t->source);
  t->body = p.parse_template();
  return t;
}

}  // namespace tandem::jinja
