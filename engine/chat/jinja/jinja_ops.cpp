#include "engine/chat/jinja/jinja_ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/chat/jinja/jinja_builtins.hpp"
#include "engine/chat/jinja/jinja_text.hpp"

namespace tandem::jinja::ops {

namespace {

// How Jinja names an object in "has no attribute" messages.
std::string object_name(const Value& obj) {
  if (obj.is_none()) return "None";
  return std::string(type_name(obj)) + " object";
}

// (Messages are built with append: GCC 12 warns falsely (-Wrestrict) on some
// operator+ chains that start with a literal.)
Value missing_attr(const Value& obj, std::string_view name) {
  std::string msg = "'";
  msg.append(object_name(obj)).append("' has no attribute '").append(name).append("'");
  return Value::undefined(std::move(msg));
}

Value missing_item(const Value& obj, const Value& key) {
  if (key.is_string()) return missing_attr(obj, key.str());
  std::string msg = "'";
  msg.append(object_name(obj)).append("' has no element ").append(repr(key));
  return Value::undefined(std::move(msg));
}

[[noreturn]] void overflow() {
  throw Error("integer overflow (integers are limited to 64 bits here; Python's are unbounded)");
}

[[noreturn]] void unsupported(const char* op, const Value& a, const Value& b) {
  throw Error(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" +
              type_name(b) + "'");
}

Value loop_attr(const Value& obj, std::string_view name) {
  const LoopInfo& l = obj.loop();
  const auto n = static_cast<int64_t>(l.items->size());
  const auto i = static_cast<int64_t>(l.index0);
  if (name == "index") return Value::integer(i + 1);
  if (name == "index0") return Value::integer(i);
  if (name == "revindex") return Value::integer(n - i);
  if (name == "revindex0") return Value::integer(n - i - 1);
  if (name == "first") return Value::boolean(i == 0);
  if (name == "last") return Value::boolean(i + 1 == n);
  if (name == "length") return Value::integer(n);
  if (name == "depth") return Value::integer(1);
  if (name == "depth0") return Value::integer(0);
  if (name == "previtem") return i > 0 ? (*l.items)[l.index0 - 1] : Value::undefined("there is no previous item");
  if (name == "nextitem") return i + 1 < n ? (*l.items)[l.index0 + 1] : Value::undefined("there is no next item");
  if (auto m = bound_method(obj, name)) return *m;
  return missing_attr(obj, name);
}

int64_t repeat_count(const Value& n) {
  if (!n.is_int()) throw Error(std::string("can't multiply sequence by non-int of type '") + type_name(n) + "'");
  return std::max<int64_t>(n.as_int(), 0);
}

Value repeat(const Value& seq, int64_t n) {
  if (seq.is_string()) {
    const std::string& s = seq.str();
    if (!s.empty() && static_cast<uint64_t>(n) > kMaxStringBytes / s.size()) {
      throw Error("string repetition exceeds the limit of " + std::to_string(kMaxStringBytes) + " bytes");
    }
    const size_t total = s.size() * static_cast<size_t>(n);
    charge_work(total);
    if (total == 0) return Value::string("");
    std::string out = s;  // doubled until long enough: O(log n) appends
    out.reserve(total);
    while (out.size() * 2 <= total) out.append(out);
    out.append(out, 0, total - out.size());
    return Value::string(std::move(out));
  }
  const List& l = seq.list();
  if (!l.items.empty() && static_cast<uint64_t>(n) > kMaxListItems / l.items.size()) {
    throw Error("list repetition exceeds the limit of " + std::to_string(kMaxListItems) + " items");
  }
  charge_work(uint64_t{sizeof(Value)} * l.items.size() * static_cast<uint64_t>(n));
  std::vector<Value> out;
  out.reserve(l.items.size() * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), l.items.begin(), l.items.end());
  return Value::list(std::move(out), l.tuple);
}

// Python's float floor division and modulo (results take the divisor's sign).
void float_divmod(double vx, double wx, double* floordiv, double* mod) {
  double m = std::fmod(vx, wx);
  double div = (vx - m) / wx;
  if (m != 0) {
    if ((wx < 0) != (m < 0)) {
      m += wx;
      div -= 1.0;
    }
  } else {
    m = std::copysign(0.0, wx);
  }
  double fd;
  if (div != 0) {
    fd = std::floor(div);
    if (div - fd > 0.5) fd += 1.0;
  } else {
    fd = std::copysign(0.0, vx / wx);
  }
  if (floordiv) *floordiv = fd;
  if (mod) *mod = m;
}

Value int_pow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if ((exp & 1) && __builtin_mul_overflow(result, base, &result)) overflow();
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) overflow();
  }
  return Value::integer(result);
}

}  // namespace

Value get_attr(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::Undefined: throw_undefined(obj);
    case Value::Kind::Dict:
      if (auto m = bound_method(obj, name)) return *m;
      if (const Value* v = obj.dict().find(name)) return *v;
      return missing_attr(obj, name);
    case Value::Kind::Namespace:
      if (const Value* v = obj.dict().find(name)) return *v;
      return missing_attr(obj, name);
    case Value::Kind::Loop: return loop_attr(obj, name);
    default:
      if (auto m = bound_method(obj, name)) return *m;
      return missing_attr(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::Undefined: throw_undefined(obj);
    case Value::Kind::Dict:
      if (key.kind() != Value::Kind::Dict && !(key.is_list() && !key.list().tuple)) {  // else unhashable
        if (const Value* v = obj.dict().find(key)) return *v;
      }
      break;
    case Value::Kind::List:
    case Value::Kind::String:
      if (key.is_int()) {
        const int64_t n = static_cast<int64_t>(obj.is_string() ? text::length(obj.str()) : obj.list().items.size());
        int64_t i = key.as_int();
        if (i < 0) i += n;
        if (i < 0 || i >= n) return missing_item(obj, key);
        if (obj.is_list()) return obj.list().items[static_cast<size_t>(i)];
        return Value::string(text::slice(obj.str(), i, i + 1, 1));
      }
      break;
    default: break;
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return missing_item(obj, key);
}

Value slice(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  // Jinja compiles slices to a plain Python subscript (not its lenient getitem), so every
  // failure here is an error, never Undefined.
  if (obj.is_undefined()) throw_undefined(obj);
  if (!obj.is_string() && !obj.is_list()) {
    throw Error(std::string("'") + type_name(obj) + "' object is not subscriptable with a slice");
  }
  auto bound = [](const Value* v) -> std::optional<int64_t> {
    if (!v || v->is_none()) return std::nullopt;
    if (v->is_undefined()) throw_undefined(*v);
    if (!v->is_int()) throw Error("slice indices must be integers or None or have an __index__ method");
    return v->as_int();
  };
  const auto b = bound(start);
  const auto e = bound(stop);
  const int64_t st = bound(step).value_or(1);
  if (st == 0) throw Error("slice step cannot be zero");
  if (obj.is_string()) return Value::string(text::slice(obj.str(), b, e, st));
  const List& l = obj.list();
  std::vector<Value> out;
  for (size_t i : text::slice_indices(l.items.size(), b, e, st)) out.push_back(l.items[i]);
  return Value::list(std::move(out), l.tuple);
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List: return v.list().items;
    case Value::Kind::Dict: {
      std::vector<Value> keys;
      keys.reserve(v.dict().entries.size());
      for (const auto& [k, x] : v.dict().entries) keys.push_back(k);
      return keys;
    }
    case Value::Kind::String: {
      const std::string& s = v.str();
      std::vector<Value> chars;
      for (size_t pos = 0; pos < s.size();) {
        const text::Char c = text::char_at(s, pos);
        chars.push_back(Value::string(s.substr(pos, c.len)));
        pos += c.len;
      }
      return chars;
    }
    default: throw Error(std::string("'") + type_name(v) + "' object is not iterable");
  }
}

size_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return text::length(v.str());
    case Value::Kind::List: return v.list().items.size();
    case Value::Kind::Dict: return v.dict().entries.size();
    default: throw Error(std::string("object of type '") + type_name(v) + "' has no len()");
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::Undefined: return false;
    case Value::Kind::String:
      if (!item.is_string()) {
        if (item.is_undefined()) throw_undefined(item);
        throw Error(std::string("'in <string>' requires string as left operand, not ") + type_name(item));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::List:
      for (const Value& x : container.list().items) {
        if (equal(x, item)) return true;
      }
      return false;
    case Value::Kind::Dict: return container.dict().find(item) != nullptr;
    default: throw Error(std::string("argument of type '") + type_name(container) + "' is not iterable");
  }
}

Value binary(ast::BinOp op, const Value& a, const Value& b) {
  using ast::BinOp;
  if (a.is_undefined()) throw_undefined(a);
  if (b.is_undefined()) throw_undefined(b);
  const bool nums = a.is_number() && b.is_number();
  const bool ints = a.is_int() && b.is_int();
  switch (op) {
    case BinOp::Add:
      if (ints) {
        int64_t r;
        if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) overflow();
        return Value::integer(r);
      }
      if (nums) return Value::number(a.as_double() + b.as_double());
      if (a.is_string() && b.is_string()) {
        check_string_size(a.str().size() + b.str().size());
        charge_work(a.str().size() + b.str().size());
        return Value::string(a.str() + b.str());
      }
      if (a.is_list() && b.is_list() && a.list().tuple == b.list().tuple) {
        if (a.list().items.size() + b.list().items.size() > kMaxListItems) {
          throw Error("list exceeds the limit of " + std::to_string(kMaxListItems) + " items");
        }
        charge_work(uint64_t{sizeof(Value)} * (a.list().items.size() + b.list().items.size()));
        std::vector<Value> out = a.list().items;
        out.insert(out.end(), b.list().items.begin(), b.list().items.end());
        return Value::list(std::move(out), a.list().tuple);
      }
      if (a.is_string() || a.is_list()) {
        throw Error(std::string("can only concatenate ") + type_name(a) + " (not \"" + type_name(b) + "\") to " +
                    type_name(a));
      }
      unsupported("+", a, b);
    case BinOp::Sub:
      if (ints) {
        int64_t r;
        if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) overflow();
        return Value::integer(r);
      }
      if (nums) return Value::number(a.as_double() - b.as_double());
      unsupported("-", a, b);
    case BinOp::Mul:
      if (ints) {
        int64_t r;
        if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) overflow();
        return Value::integer(r);
      }
      if (nums) return Value::number(a.as_double() * b.as_double());
      if (a.is_string() || a.is_list()) return repeat(a, repeat_count(b));
      if (b.is_string() || b.is_list()) return repeat(b, repeat_count(a));
      unsupported("*", a, b);
    case BinOp::Div:
      if (!nums) unsupported("/", a, b);
      if (b.as_double() == 0) throw Error("division by zero");
      return Value::number(a.as_double() / b.as_double());
    case BinOp::FloorDiv:
    case BinOp::Mod: {
      const bool div = op == BinOp::FloorDiv;
      if (a.is_string() && !div) throw Error("unsupported: printf-style '%' string formatting");
      if (!nums) unsupported(div ? "//" : "%", a, b);
      if (ints) {
        const int64_t x = a.as_int(), y = b.as_int();
        if (y == 0) throw Error("integer division or modulo by zero");
        if (x == std::numeric_limits<int64_t>::min() && y == -1) {
          if (div) overflow();
          return Value::integer(0);
        }
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) {
          --q;
          r += y;
        }
        return Value::integer(div ? q : r);
      }
      if (b.as_double() == 0) throw Error(div ? "float floor division by zero" : "float modulo");
      double q, r;
      float_divmod(a.as_double(), b.as_double(), &q, &r);
      return Value::number(div ? q : r);
    }
    case BinOp::Pow: {
      if (!nums) unsupported("** or pow()", a, b);
      if (ints && b.as_int() >= 0) return int_pow(a.as_int(), b.as_int());
      const double x = a.as_double(), y = b.as_double();
      if (x == 0 && y < 0) throw Error("0.0 cannot be raised to a negative power");
      if (x < 0 && y != std::trunc(y)) throw Error("unsupported: complex result of '**'");
      const double r = std::pow(x, y);
      if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) throw Error("(34, 'Numerical result out of range')");
      return Value::number(r);
    }
  }
  return Value();
}

Value negate(const Value& v) {
  if (v.is_undefined()) throw_undefined(v);
  if (v.is_int()) {
    if (v.as_int() == std::numeric_limits<int64_t>::min()) overflow();
    return Value::integer(-v.as_int());
  }
  if (v.kind() == Value::Kind::Float) return Value::number(-v.as_double());
  throw Error(std::string("bad operand type for unary -: '") + type_name(v) + "'");
}

Value plus(const Value& v) {
  if (v.is_undefined()) throw_undefined(v);
  if (v.is_int()) return Value::integer(v.as_int());
  if (v.kind() == Value::Kind::Float) return v;
  throw Error(std::string("bad operand type for unary +: '") + type_name(v) + "'");
}

}  // namespace tandem::jinja::ops
