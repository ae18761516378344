// The parsed form of a chat template: statements (text, {{ }} output, if, for, set,
// macro, ...) holding expression trees. Every node records the byte offset of the
// source construct it came from, so that errors can name a line and column.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/chat/jinja/jinja_value.hpp"

namespace tandem::jinja::ast {

// ---- expressions ------------------------------------------------------------------

enum class ExprKind : uint8_t {
  Const, Name, List, Dict, Getattr, Getitem, Slice, Call, Filter, Test,
  Neg, Pos, Not, Binary, And, Or, Compare, Cond, Concat,
};

struct Expr {
  Expr(ExprKind k, uint32_t p) : kind(k), pos(p) {}
  virtual ~Expr() = default;
  ExprKind kind;
  uint32_t pos;
  uint32_t depth = 1;  // height of the tree below; bounded so evaluation cannot overflow the stack
};
using ExprPtr = std::unique_ptr<Expr>;

struct CallArgs {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> named;
};

struct Const : Expr {
  Const(uint32_t p, Value v) : Expr(ExprKind::Const, p), value(std::move(v)) {}
  Value value;
};
struct Name : Expr {
  Name(uint32_t p, std::string n) : Expr(ExprKind::Name, p), name(std::move(n)) {}
  std::string name;
};
struct ListExpr : Expr {  // [a, b] or (a, b)
  ListExpr(uint32_t p, bool t) : Expr(ExprKind::List, p), tuple(t) {}
  std::vector<ExprPtr> items;
  bool tuple;
};
struct DictExpr : Expr {
  explicit DictExpr(uint32_t p) : Expr(ExprKind::Dict, p) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};
struct Getattr : Expr {  // obj.attr
  Getattr(uint32_t p, ExprPtr o, std::string a) : Expr(ExprKind::Getattr, p), obj(std::move(o)), attr(std::move(a)) {}
  ExprPtr obj;
  std::string attr;
};
struct Getitem : Expr {  // obj[key]
  Getitem(uint32_t p, ExprPtr o, ExprPtr k) : Expr(ExprKind::Getitem, p), obj(std::move(o)), key(std::move(k)) {}
  ExprPtr obj, key;
};
struct Slice : Expr {  // obj[start:stop:step]; omitted parts are null
  Slice(uint32_t p, ExprPtr o) : Expr(ExprKind::Slice, p), obj(std::move(o)) {}
  ExprPtr obj, start, stop, step;
};
struct Call : Expr {  // callee(args)
  Call(uint32_t p, ExprPtr c) : Expr(ExprKind::Call, p), callee(std::move(c)) {}
  ExprPtr callee;
  CallArgs args;
};
struct Filter : Expr {  // obj | name(args); obj is null in {% set x | filter %} blocks
  Filter(uint32_t p, ExprPtr o, std::string n) : Expr(ExprKind::Filter, p), obj(std::move(o)), name(std::move(n)) {}
  ExprPtr obj;
  std::string name;
  CallArgs args;
};
struct Test : Expr {  // obj is [not] name(args)
  Test(uint32_t p, ExprPtr o, std::string n) : Expr(ExprKind::Test, p), obj(std::move(o)), name(std::move(n)) {}
  ExprPtr obj;
  std::string name;
  CallArgs args;
};
struct Unary : Expr {  // -x, +x, not x
  Unary(ExprKind k, uint32_t p, ExprPtr o) : Expr(k, p), operand(std::move(o)) {}
  ExprPtr operand;
};
enum class BinOp : uint8_t { Add, Sub, Mul, Div, FloorDiv, Mod, Pow };
struct Binary : Expr {  // arithmetic
  Binary(uint32_t p, BinOp o, ExprPtr l, ExprPtr r)
      : Expr(ExprKind::Binary, p), op(o), left(std::move(l)), right(std::move(r)) {}
  BinOp op;
  ExprPtr left, right;
};
struct Logical : Expr {  // and / or (Python semantics: yields an operand)
  Logical(ExprKind k, uint32_t p, ExprPtr l, ExprPtr r) : Expr(k, p), left(std::move(l)), right(std::move(r)) {}
  ExprPtr left, right;
};
enum class CmpOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };
struct Compare : Expr {  // a < b <= c, chained as in Python
  Compare(uint32_t p, ExprPtr f) : Expr(ExprKind::Compare, p), first(std::move(f)) {}
  ExprPtr first;
  struct Operand {
    CmpOp op;
    uint32_t pos;
    ExprPtr expr;
  };
  std::vector<Operand> rest;
};
struct Cond : Expr {  // then if test else otherwise; otherwise may be null
  Cond(uint32_t p, ExprPtr t, ExprPtr th) : Expr(ExprKind::Cond, p), test(std::move(t)), then(std::move(th)) {}
  ExprPtr test, then, otherwise;
};
struct Concat : Expr {  // a ~ b ~ c
  explicit Concat(uint32_t p) : Expr(ExprKind::Concat, p) {}
  std::vector<ExprPtr> items;
};

// ---- statements -------------------------------------------------------------------

enum class StmtKind : uint8_t { Text, Print, If, For, Set, SetBlock, Macro, Break, Continue, Block };

struct Stmt {
  Stmt(StmtKind k, uint32_t p) : kind(k), pos(p) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  uint32_t pos;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// What a for loop or set assigns to: a name, `ns.attr` (set only), or a tuple of targets.
struct Target {
  uint32_t pos = 0;
  std::string name;           // empty for a tuple
  std::string attr;           // non-empty for ns.attr
  std::vector<Target> items;  // the tuple's targets
};

struct Text : Stmt {
  Text(uint32_t p, std::string t) : Stmt(StmtKind::Text, p), text(std::move(t)) {}
  std::string text;
};
struct Print : Stmt {  // {{ expr }}
  Print(uint32_t p, ExprPtr e) : Stmt(StmtKind::Print, p), expr(std::move(e)) {}
  ExprPtr expr;
};
struct If : Stmt {
  explicit If(uint32_t p) : Stmt(StmtKind::If, p) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif...
  Body otherwise;
};
struct For : Stmt {
  explicit For(uint32_t p) : Stmt(StmtKind::For, p) {}
  Target target;
  ExprPtr iter, filter;  // filter: `for x in xs if cond`, may be null
  Body body, otherwise;  // otherwise: runs when no item was iterated
};
struct Set : Stmt {  // {% set target = value %}
  explicit Set(uint32_t p) : Stmt(StmtKind::Set, p) {}
  Target target;
  ExprPtr value;
};
struct SetBlock : Stmt {  // {% set target | filters %}body{% endset %}
  explicit SetBlock(uint32_t p) : Stmt(StmtKind::SetBlock, p) {}
  Target target;
  std::vector<std::unique_ptr<Filter>> filters;
  Body body;
};
struct Macro : Stmt {
  explicit Macro(uint32_t p) : Stmt(StmtKind::Macro, p) {}
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
};
struct Block : Stmt {  // a body with no effect of its own ({% generation %})
  explicit Block(uint32_t p) : Stmt(StmtKind::Block, p) {}
  Body body;
};
struct LoopControl : Stmt {  // {% break %}, {% continue %}
  LoopControl(StmtKind k, uint32_t p) : Stmt(k, p) {}
};

struct Template {
  std::string source;  // normalised (see normalize_newlines); node positions index it
  Body body;
};

}  // namespace tandem::jinja::ast
