// Expression evaluation for the chat-template interpreter.
#include "engine/chat/jinja/jinja_builtins.hpp"
#include "engine/chat/jinja/jinja_interp.hpp"
#include "engine/chat/jinja/jinja_ops.hpp"

namespace tandem::jinja {

using namespace ast;

Interpreter::RecursionGuard::RecursionGuard(Interpreter& interp) : in(interp) {
  if (++in.depth_ > kMaxRecursion) {
    --in.depth_;
    throw Error("template recursion too deep (more than " + std::to_string(kMaxRecursion) + " nested calls)");
  }
}

void Interpreter::tick(uint64_t n) {
  iterations_ += n;
  if (iterations_ > limits_.max_iterations) {
    throw Error("template exceeded the limit of " + std::to_string(limits_.max_iterations) + " loop iterations");
  }
}

Value Interpreter::call(const Value& callee, Args& args) {
  if (callee.kind() == Value::Kind::Function) return callee.function().call(*this, args);
  if (callee.is_undefined()) throw_undefined(callee);
  throw Error(std::string("'") + type_name(callee) + "' object is not callable");
}

Value Interpreter::eval(const Expr& e, Frame& frame) {
  RecursionGuard guard(*this);
  try {
    return eval_inner(e, frame);
  } catch (Error& err) {
    // The innermost expression that failed names the position.
    if (err.pos == Error::kNoPos) err.pos = e.pos;
    throw;
  }
}

// One small function per node kind keeps each recursion step's stack frame small.
Value Interpreter::eval_inner(const Expr& e, Frame& frame) {
  switch (e.kind) {
    case ExprKind::Const: return static_cast<const Const&>(e).value;
    case ExprKind::Name: return eval_name(static_cast<const Name&>(e), frame);
    case ExprKind::List: return eval_list(static_cast<const ListExpr&>(e), frame);
    case ExprKind::Dict: return eval_dict(static_cast<const DictExpr&>(e), frame);
    case ExprKind::Getattr: {
      const auto& g = static_cast<const Getattr&>(e);
      return ops::get_attr(eval(*g.obj, frame), g.attr);
    }
    case ExprKind::Getitem: {
      const auto& g = static_cast<const Getitem&>(e);
      const Value obj = eval(*g.obj, frame);
      return ops::get_item(obj, eval(*g.key, frame));
    }
    case ExprKind::Slice: return eval_slice(static_cast<const Slice&>(e), frame);
    case ExprKind::Call: return eval_call(static_cast<const Call&>(e), frame);
    case ExprKind::Filter: {
      const auto& f = static_cast<const Filter&>(e);
      return apply_filter_node(f, eval(*f.obj, frame), frame);
    }
    case ExprKind::Test: return Value::boolean(apply_test_node(static_cast<const Test&>(e), frame));
    case ExprKind::Neg: return ops::negate(eval(*static_cast<const Unary&>(e).operand, frame));
    case ExprKind::Pos: return ops::plus(eval(*static_cast<const Unary&>(e).operand, frame));
    case ExprKind::Not: return Value::boolean(!truthy(eval(*static_cast<const Unary&>(e).operand, frame)));
    case ExprKind::Binary: {
      const auto& b = static_cast<const Binary&>(e);
      const Value left = eval(*b.left, frame);
      return ops::binary(b.op, left, eval(*b.right, frame));
    }
    case ExprKind::And:
    case ExprKind::Or: {
      // Python's and/or yield an operand, not a bool.
      const auto& l = static_cast<const Logical&>(e);
      Value left = eval(*l.left, frame);
      if (truthy(left) == (e.kind == ExprKind::Or)) return left;
      return eval(*l.right, frame);
    }
    case ExprKind::Compare: return eval_compare(static_cast<const Compare&>(e), frame);
    case ExprKind::Cond: {
      const auto& c = static_cast<const Cond&>(e);
      if (truthy(eval(*c.test, frame))) return eval(*c.then, frame);
      if (c.otherwise) return eval(*c.otherwise, frame);
      return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
    }
    case ExprKind::Concat: return eval_concat(static_cast<const Concat&>(e), frame);
  }
  return Value();
}

Value Interpreter::eval_name(const Name& e, Frame& frame) {
  if (const Value* v = frame.find(e.name)) return *v;
  return Value::undefined("'" + e.name + "' is undefined");
}

Value Interpreter::eval_list(const ListExpr& e, Frame& frame) {
  std::vector<Value> items;
  items.reserve(e.items.size());
  for (const auto& x : e.items) items.push_back(eval(*x, frame));
  return Value::list(std::move(items), e.tuple);
}

Value Interpreter::eval_dict(const DictExpr& e, Frame& frame) {
  Dict d;
  for (const auto& [k, v] : e.items) {
    Value key = eval(*k, frame);
    d.set(std::move(key), eval(*v, frame));
  }
  return Value::dict(std::move(d));
}

Value Interpreter::eval_slice(const Slice& e, Frame& frame) {
  const Value obj = eval(*e.obj, frame);
  Value start, stop, step;
  if (e.start) start = eval(*e.start, frame);
  if (e.stop) stop = eval(*e.stop, frame);
  if (e.step) step = eval(*e.step, frame);
  return ops::slice(obj, e.start ? &start : nullptr, e.stop ? &stop : nullptr, e.step ? &step : nullptr);
}

Args Interpreter::eval_args(const CallArgs& a, Frame& frame) {
  Args args;
  args.positional.reserve(a.positional.size());
  for (const auto& x : a.positional) args.positional.push_back(eval(*x, frame));
  for (const auto& [n, x] : a.named) args.named.emplace_back(n, eval(*x, frame));
  return args;
}

Value Interpreter::eval_call(const Call& e, Frame& frame) {
  const Value callee = eval(*e.callee, frame);
  Args args = eval_args(e.args, frame);
  return call(callee, args);
}

Value Interpreter::eval_compare(const Compare& e, Frame& frame) {
  Value left = eval(*e.first, frame);
  for (const auto& operand : e.rest) {
    Value right = eval(*operand.expr, frame);
    bool r = false;
    try {
      switch (operand.op) {
        case CmpOp::Eq: r = equal(left, right); break;
        case CmpOp::Ne: r = !equal(left, right); break;
        case CmpOp::Lt: r = less(left, right, "<"); break;
        case CmpOp::Le: r = less(left, right, "<=") || equal(left, right); break;
        case CmpOp::Gt: r = greater(left, right, ">"); break;
        case CmpOp::Ge: r = greater(left, right, ">=") || equal(left, right); break;
        case CmpOp::In: r = ops::contains(right, left); break;
        case CmpOp::NotIn: r = !ops::contains(right, left); break;
      }
    } catch (Error& err) {
      if (err.pos == Error::kNoPos) err.pos = operand.pos;
      throw;
    }
    if (!r) return Value::boolean(false);  // chained: a < b < c stops at the first false
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Interpreter::eval_concat(const Concat& e, Frame& frame) {
  std::vector<Value> parts;  // strings stay shared; other values are printed first
  size_t total = 0;
  for (const auto& x : e.items) {
    Value v = eval(*x, frame);
    if (!v.is_string()) v = Value::string(to_str(v));
    total += v.str().size();
    check_string_size(total);
    charge_work(v.str().size());
    parts.push_back(std::move(v));
  }
  std::string out;
  out.reserve(total);
  for (const Value& p : parts) out += p.str();
  return Value::string(std::move(out));
}

Value Interpreter::apply_filter_node(const Filter& f, Value input, Frame& frame) {
  Args args = eval_args(f.args, frame);
  try {
    return apply_filter(*this, f.name, input, args);
  } catch (Error& err) {
    if (err.pos == Error::kNoPos) err.pos = f.pos;
    throw;
  }
}

bool Interpreter::apply_test_node(const Test& t, Frame& frame) {
  const Value input = eval(*t.obj, frame);
  Args args = eval_args(t.args, frame);
  return apply_test(*this, t.name, input, args);
}

}  // namespace tandem::jinja
