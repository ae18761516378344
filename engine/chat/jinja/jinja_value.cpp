#include "engine/chat/jinja/jinja_value.hpp"

#include <algorithm>
#include <cmath>

#include "engine/chat/jinja/jinja_text.hpp"

namespace tandem::jinja {

// ---- Dict -------------------------------------------------------------------------

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : entries) {
    if (equal(k, key)) return &v;
  }
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

void Dict::set(Value key, Value value) {
  if (key.kind() == Value::Kind::List && !key.list().tuple) throw Error("unhashable type: 'list'");
  if (key.kind() == Value::Kind::Dict) throw Error("unhashable type: 'dict'");
  for (auto& [k, v] : entries) {
    if (equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

// ---- Value ------------------------------------------------------------------------

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.ptr_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.scalar_.b = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::Int;
  v.scalar_.i = i;
  return v;
}

Value Value::number(double f) {
  Value v;
  v.kind_ = Kind::Float;
  v.scalar_.f = f;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::String;
  v.ptr_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

namespace {

uint32_t checked_depth(uint32_t inner) {
  if (inner + 1 > kMaxNesting) {
    throw Error("value nested deeper than the limit of " + std::to_string(kMaxNesting) + " lists/dicts");
  }
  return inner + 1;
}

uint32_t dict_depth(const Dict& d) {
  uint32_t inner = 0;
  for (const auto& [k, v] : d.entries) inner = std::max({inner, nesting(k), nesting(v)});
  return checked_depth(inner);
}

}  // namespace

Value Value::list(std::vector<Value> items, bool tuple) {
  uint32_t inner = 0;
  for (const Value& x : items) inner = std::max(inner, nesting(x));
  Value v;
  v.kind_ = Kind::List;
  v.ptr_ = std::make_shared<const List>(List{std::move(items), tuple, checked_depth(inner)});
  return v;
}

Value Value::dict(Dict d) {
  d.depth = dict_depth(d);
  Value v;
  v.kind_ = Kind::Dict;
  v.ptr_ = std::make_shared<const Dict>(std::move(d));
  return v;
}

Value Value::ns(Dict d) {
  d.depth = dict_depth(d);
  Value v;
  v.kind_ = Kind::Namespace;
  v.ptr_ = std::make_shared<Dict>(std::move(d));
  return v;
}

Value Value::function(std::shared_ptr<const Function> f) {
  Value v;
  v.kind_ = Kind::Function;
  v.ptr_ = std::move(f);
  return v;
}

Value Value::loop(std::shared_ptr<const LoopInfo> l) {
  Value v;
  v.kind_ = Kind::Loop;
  v.ptr_ = std::move(l);
  return v;
}

double Value::as_double() const {
  switch (kind_) {
    case Kind::Float: return scalar_.f;
    case Kind::Int: return static_cast<double>(scalar_.i);
    case Kind::Bool: return scalar_.b ? 1.0 : 0.0;
    default: return 0.0;
  }
}

const std::string& Value::str() const { return *std::get<std::shared_ptr<const std::string>>(ptr_); }
const List& Value::list() const { return *std::get<std::shared_ptr<const List>>(ptr_); }
const Dict& Value::dict() const {
  if (kind_ == Kind::Namespace) return *std::get<std::shared_ptr<Dict>>(ptr_);
  return *std::get<std::shared_ptr<const Dict>>(ptr_);
}
Dict& Value::ns_dict() const { return *std::get<std::shared_ptr<Dict>>(ptr_); }
const Function& Value::function() const { return *std::get<std::shared_ptr<const Function>>(ptr_); }
const LoopInfo& Value::loop() const { return *std::get<std::shared_ptr<const LoopInfo>>(ptr_); }

const std::string& Value::undefined_hint() const {
  static const std::string empty;
  if (const auto* p = std::get_if<std::shared_ptr<const std::string>>(&ptr_)) return **p;
  return empty;
}

const void* Value::identity() const {
  return std::visit(
      [](const auto& p) -> const void* {
        if constexpr (std::is_same_v<std::decay_t<decltype(p)>, std::monostate>) {
          return nullptr;
        } else {
          return p.get();
        }
      },
      ptr_);
}

uint32_t nesting(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::List: return v.list().depth;
    case Value::Kind::Dict:
    case Value::Kind::Namespace: return v.dict().depth;
    default: return 0;
  }
}

namespace {

bool contains_identity(const Value& v, const void* target) {
  switch (v.kind()) {
    case Value::Kind::List:
      for (const Value& x : v.list().items) {
        if (contains_identity(x, target)) return true;
      }
      return false;
    case Value::Kind::Namespace:
      if (v.identity() == target) return true;
      [[fallthrough]];
    case Value::Kind::Dict:
      for (const auto& [k, x] : v.dict().entries) {
        if (contains_identity(x, target)) return true;
      }
      return false;
    default: return false;
  }
}

}  // namespace

void namespace_set(const Value& ns, const std::string& key, Value value) {
  if (contains_identity(value, ns.identity())) throw Error("cannot store a namespace inside itself");
  Dict& d = ns.ns_dict();
  d.depth = std::max(d.depth, checked_depth(nesting(value)));
  d.set(Value::string(key), std::move(value));
}

// ---- Python semantics --------------------------------------------------------------

const char* type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::List: return v.list().tuple ? "tuple" : "list";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Namespace: return "Namespace";
    case Value::Kind::Function: return "function";
    case Value::Kind::Loop: return "LoopContext";
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.as_bool();
    case Value::Kind::Int: return v.as_int() != 0;
    case Value::Kind::Float: return v.as_double() != 0.0;
    case Value::Kind::String: return !v.str().empty();
    case Value::Kind::List: return !v.list().items.empty();
    case Value::Kind::Dict: return !v.dict().entries.empty();
    default: return true;
  }
}

namespace {

// Exact comparison of an integer with a double, as Python does it (no rounding of the
// integer to double first).
bool int_equals_double(int64_t i, double d) {
  if (!std::isfinite(d) || d != std::trunc(d)) return false;
  if (d < -9223372036854775808.0 || d >= 9223372036854775808.0) return false;
  return static_cast<int64_t>(d) == i;
}

bool int_less_double(int64_t i, double d) {  // i < d
  if (std::isnan(d)) return false;
  if (d >= 9223372036854775808.0) return true;
  if (d < -9223372036854775808.0) return false;
  const double fl = std::floor(d);
  const auto fi = static_cast<int64_t>(fl);
  return i < fi || (i == fi && fl < d);
}

bool double_less_int(double d, int64_t i) {  // d < i
  if (std::isnan(d)) return false;
  return !int_less_double(i, d) && !int_equals_double(i, d);
}

}  // namespace

bool equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
    if (a.is_int()) return int_equals_double(a.as_int(), b.as_double());
    if (b.is_int()) return int_equals_double(b.as_int(), a.as_double());
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::Undefined:
    case K::None: return true;
    case K::String: return a.str() == b.str();
    case K::List: {
      const List& x = a.list();
      const List& y = b.list();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!equal(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case K::Dict: {
      const Dict& x = a.dict();
      const Dict& y = b.dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* other = y.find(k);
        if (!other || !equal(v, *other)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

namespace {

// a < b; `swapped` when the template wrote b > a, so that errors name the operands in
// the template's order, as Python does.
bool less_impl(const Value& a, const Value& b, const char* op, bool swapped) {
  if (a.is_undefined()) throw_undefined(a);
  if (b.is_undefined()) throw_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() < b.as_int();
    if (a.is_int()) return int_less_double(a.as_int(), b.as_double());
    if (b.is_int()) return double_less_int(a.as_double(), b.as_int());
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order = code point order
  if (a.is_list() && b.is_list() && a.list().tuple == b.list().tuple) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equal(x[i], y[i])) return less_impl(x[i], y[i], op, swapped);
    }
    return x.size() < y.size();
  }
  const Value& first = swapped ? b : a;
  const Value& second = swapped ? a : b;
  throw Error(std::string("'") + op + "' not supported between instances of '" + type_name(first) + "' and '" +
              type_name(second) + "'");
}

}  // namespace

bool less(const Value& a, const Value& b, const char* op) { return less_impl(a, b, op, false); }
bool greater(const Value& a, const Value& b, const char* op) { return less_impl(b, a, op, true); }

std::string repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::String: return text::str_repr(v.str());
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.as_bool() ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.as_int());
    case Value::Kind::Float: return text::float_repr(v.as_double());
    case Value::Kind::String: return v.str();
    case Value::Kind::List: {
      const List& l = v.list();
      std::string out(1, l.tuple ? '(' : '[');
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        out += repr(l.items[i]);
        check_string_size(out.size());  // a list may hold one huge string many times
      }
      if (l.tuple && l.items.size() == 1) out += ",";
      out += l.tuple ? ')' : ']';
      return out;
    }
    case Value::Kind::Dict:
    case Value::Kind::Namespace: {
      std::string out = v.kind() == Value::Kind::Namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, x] : v.dict().entries) {
        if (!first) out += ", ";
        first = false;
        out += repr(k) + ": " + repr(x);
        check_string_size(out.size());
      }
      out += v.kind() == Value::Kind::Namespace ? "}>" : "}";
      return out;
    }
    case Value::Kind::Function: return "<function " + std::string(v.function().name()) + ">";
    case Value::Kind::Loop:
      return "<LoopContext " + std::to_string(v.loop().index0 + 1) + "/" + std::to_string(v.loop().items->size()) +
             ">";
  }
  return "";
}

void throw_undefined(const Value& v) {
  const std::string& hint = v.undefined_hint();
  throw Error(hint.empty() ? "undefined value" : hint);
}

void check_string_size(size_t bytes) {
  if (bytes > kMaxStringBytes) {
    throw Error("string of " + std::to_string(bytes) + " bytes exceeds the limit of " +
                std::to_string(kMaxStringBytes));
  }
}

namespace {
thread_local WorkBudget* t_budget = nullptr;
}

WorkBudget::WorkBudget(uint64_t limit) : limit_(limit), outer_(t_budget) { t_budget = this; }
WorkBudget::~WorkBudget() { t_budget = outer_; }

void WorkBudget::charge(uint64_t bytes) {
  used_ += bytes;
  if (used_ > limit_) {
    throw Error("template exceeded the limit of " + std::to_string(limit_) +
                " bytes of strings and lists built while rendering");
  }
}

void charge_work(uint64_t bytes) {
  if (t_budget) t_budget->charge(bytes);
}

Value checked_string(std::string s) {
  check_string_size(s.size());
  charge_work(s.size());
  return Value::string(std::move(s));
}

}  // namespace tandem::jinja
