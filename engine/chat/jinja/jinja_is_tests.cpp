// Tests ({% if x is t %}, and the test names select/reject take), with Jinja's semantics.
#include <unordered_map>

#include "engine/chat/jinja/jinja_builtins.hpp"
#include "engine/chat/jinja/jinja_ops.hpp"
#include "engine/chat/jinja/jinja_text.hpp"

namespace tandem::jinja {

namespace {

using TestFn = bool (*)(Interpreter&, const Value&, Args&);

Value one_arg(const char* name, Args& args) {
  ArgReader r(name, args);
  Value v = r.required("other");
  r.done();
  return v;
}

void no_test_args(const char* name, Args& args) { ArgReader(name, args).done(); }

bool t_defined(Interpreter&, const Value& v, Args& a) {
  no_test_args("defined", a);
  return !v.is_undefined();
}
bool t_undefined(Interpreter&, const Value& v, Args& a) {
  no_test_args("undefined", a);
  return v.is_undefined();
}
bool t_none(Interpreter&, const Value& v, Args& a) {
  no_test_args("none", a);
  return v.is_none();
}
bool t_boolean(Interpreter&, const Value& v, Args& a) {
  no_test_args("boolean", a);
  return v.kind() == Value::Kind::Bool;
}
bool t_true(Interpreter&, const Value& v, Args& a) {
  no_test_args("true", a);
  return v.kind() == Value::Kind::Bool && v.as_bool();
}
bool t_false(Interpreter&, const Value& v, Args& a) {
  no_test_args("false", a);
  return v.kind() == Value::Kind::Bool && !v.as_bool();
}
bool t_integer(Interpreter&, const Value& v, Args& a) {
  no_test_args("integer", a);
  return v.kind() == Value::Kind::Int;
}
bool t_float(Interpreter&, const Value& v, Args& a) {
  no_test_args("float", a);
  return v.kind() == Value::Kind::Float;
}
bool t_number(Interpreter&, const Value& v, Args& a) {
  no_test_args("number", a);
  return v.is_number();
}
bool t_string(Interpreter&, const Value& v, Args& a) {
  no_test_args("string", a);
  return v.is_string();
}
bool t_mapping(Interpreter&, const Value& v, Args& a) {
  no_test_args("mapping", a);
  return v.kind() == Value::Kind::Dict;
}
bool t_iterable(Interpreter&, const Value& v, Args& a) {
  no_test_args("iterable", a);
  return v.is_undefined() || v.is_string() || v.is_list() || v.kind() == Value::Kind::Dict;
}
bool t_sequence(Interpreter&, const Value& v, Args& a) {
  no_test_args("sequence", a);
  return v.is_undefined() || v.is_string() || v.is_list() || v.kind() == Value::Kind::Dict;
}
bool t_callable(Interpreter&, const Value& v, Args& a) {
  no_test_args("callable", a);
  // Jinja's Undefined and loop objects define __call__, so Python calls them callable.
  return v.kind() == Value::Kind::Function || v.is_undefined() || v.kind() == Value::Kind::Loop;
}
bool t_eq(Interpreter&, const Value& v, Args& a) { return equal(v, one_arg("eq", a)); }
bool t_ne(Interpreter&, const Value& v, Args& a) { return !equal(v, one_arg("ne", a)); }
bool t_lt(Interpreter&, const Value& v, Args& a) { return less(v, one_arg("lt", a), "<"); }
bool t_gt(Interpreter&, const Value& v, Args& a) { return greater(v, one_arg("gt", a), ">"); }
bool t_le(Interpreter&, const Value& v, Args& a) {
  const Value o = one_arg("le", a);
  return less(v, o, "<=") || equal(v, o);
}
bool t_ge(Interpreter&, const Value& v, Args& a) {
  const Value o = one_arg("ge", a);
  return greater(v, o, ">=") || equal(v, o);
}
bool t_in(Interpreter&, const Value& v, Args& a) {
  ArgReader r("in", a);
  const Value seq = r.required("seq");
  r.done();
  return ops::contains(seq, v);
}
bool t_sameas(Interpreter&, const Value& v, Args& a) {
  // Python identity: exact for None/True/False and shared objects; equal numbers and
  // strings are treated as the same object (CPython usually, not always, shares them).
  const Value o = one_arg("sameas", a);
  if (v.kind() != o.kind()) return false;
  if (v.identity() || o.identity()) return v.identity() == o.identity() || (v.is_string() && v.str() == o.str());
  return equal(v, o);
}
bool mod_is(const Value& v, const Value& divisor, int64_t want) {
  return equal(ops::binary(ast::BinOp::Mod, v, divisor), Value::integer(want));
}
bool t_odd(Interpreter&, const Value& v, Args& a) {
  no_test_args("odd", a);
  return mod_is(v, Value::integer(2), 1);
}
bool t_even(Interpreter&, const Value& v, Args& a) {
  no_test_args("even", a);
  return mod_is(v, Value::integer(2), 0);
}
bool t_divisibleby(Interpreter&, const Value& v, Args& a) {
  ArgReader r("divisibleby", a);
  const Value num = r.required("num");
  r.done();
  return mod_is(v, num, 0);
}
bool t_lower(Interpreter&, const Value& v, Args& a) {
  no_test_args("lower", a);
  return text::is_lower(to_str(v));
}
bool t_upper(Interpreter&, const Value& v, Args& a) {
  no_test_args("upper", a);
  return text::is_upper(to_str(v));
}

const std::unordered_map<std::string_view, TestFn>& tests() {
  static const std::unordered_map<std::string_view, TestFn> m = {
      {"defined", t_defined},   {"undefined", t_undefined}, {"none", t_none},
      {"boolean", t_boolean},   {"true", t_true},           {"false", t_false},
      {"integer", t_integer},   {"float", t_float},         {"number", t_number},
      {"string", t_string},     {"mapping", t_mapping},     {"iterable", t_iterable},
      {"sequence", t_sequence}, {"callable", t_callable},   {"eq", t_eq},
      {"equalto", t_eq},        {"==", t_eq},               {"ne", t_ne},
      {"!=", t_ne},             {"lt", t_lt},               {"lessthan", t_lt},
      {"<", t_lt},              {"le", t_le},               {"<=", t_le},
      {"gt", t_gt},             {"greaterthan", t_gt},      {">", t_gt},
      {"ge", t_ge},             {">=", t_ge},               {"in", t_in},
      {"sameas", t_sameas},     {"odd", t_odd},             {"even", t_even},
      {"divisibleby", t_divisibleby}, {"lower", t_lower},   {"upper", t_upper},
  };
  return m;
}

}  // namespace

bool has_test(std::string_view name) { return tests().count(name) != 0; }

bool apply_test(Interpreter& in, std::string_view name, const Value& input, Args& args) {
  auto it = tests().find(name);
  if (it == tests().end()) throw Error("unsupported test '" + std::string(name) + "'");
  return it->second(in, input, args);
}

}  // namespace tandem::jinja
