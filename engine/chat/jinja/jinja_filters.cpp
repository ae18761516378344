// Filters ({{ x | f }}), with Jinja's semantics and Hugging Face's tojson. Where Jinja returns a generator (map,
// select, reverse, ...) these return a list, which behaves the same under |list, |join, |first, iteration and the like.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "engine/chat/jinja/jinja_builtins.hpp"
#include "engine/chat/jinja/jinja_interp.hpp"
#include "engine/chat/jinja/jinja_json.hpp"
#include "engine/chat/jinja/jinja_ops.hpp"
#include "engine/chat/jinja/jinja_text.hpp"

namespace tandem::jinja {

namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, Args&);

Value no_args(const char* name, Args& args, Value result) {
  ArgReader(name, args).done();
  return result;
}

// Jinja's attribute getter: "a.b.0" looks up a, then b, then item 0, each with
// getitem-then-getattr; an Undefined result becomes `fallback` when one is given.
Value get_path(const Value& obj, const Value& attribute, const Value* fallback) {
  Value cur = obj;
  auto step = [&](const Value& key) {
    cur = ops::get_item(cur, key);
    if (fallback && cur.is_undefined()) cur = *fallback;
  };
  if (!attribute.is_string()) {
    step(attribute);
    return cur;
  }
  const std::string& a = attribute.str();
  for (const std::string& part : text::split(a, std::string_view("."), -1)) {
    // Jinja turns all-digit parts into integer indexes.
    int64_t index = 0;
    const auto r = std::from_chars(part.data(), part.data() + part.size(), index);
    const bool digits = !part.empty() && part[0] != '-' && r.ec == std::errc() && r.ptr == part.data() + part.size();
    step(digits ? Value::integer(index) : Value::string(part));
  }
  return cur;
}

// Sort/unique/min/max compare strings case-insensitively unless told otherwise.
Value fold_case(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value::string(text::lower(v.str())) : v;
}

// ---- string filters ---------------------------------------------------------------

Value f_trim(Interpreter&, const Value& v, Args& args) {
  ArgReader r("trim", args);
  const std::optional<Value> chars = r.next("chars");
  r.done();
  std::optional<std::string> c;
  if (chars && !chars->is_none()) c = to_str(*chars);
  return Value::string(text::strip(to_str(v), c, true, true));
}

Value f_upper(Interpreter&, const Value& v, Args& a) {
  return no_args("upper", a, Value::string(text::upper(to_str(v))));
}
Value f_lower(Interpreter&, const Value& v, Args& a) {
  return no_args("lower", a, Value::string(text::lower(to_str(v))));
}
Value f_capitalize(Interpreter&, const Value& v, Args& a) {
  return no_args("capitalize", a, Value::string(text::capitalize(to_str(v))));
}
Value f_title(Interpreter&, const Value& v, Args& a) {
  return no_args("title", a, Value::string(text::jinja_title(to_str(v))));
}
Value f_string(Interpreter&, const Value& v, Args& a) { return no_args("string", a, Value::string(to_str(v))); }

Value f_replace(Interpreter&, const Value& v, Args& args) {
  ArgReader r("replace", args);
  const std::string old = to_str(r.required("old"));
  const std::string repl = to_str(r.required("new"));
  const std::optional<Value> count = r.next("count");
  r.done();
  int64_t n = -1;
  if (count && !count->is_none()) {
    if (!count->is_int())
      throw Error(std::string("'") + type_name(*count) + "' object cannot be interpreted as an integer");
    n = count->as_int();
  }
  return checked_string(text::replace(to_str(v), old, repl, n));
}

// Jinja's indent: every line but the first (unless first=True) gets the prefix; blank
// lines only with blank=True.
Value f_indent(Interpreter&, const Value& v, Args& args) {
  ArgReader r("indent", args);
  const Value width = r.get("width", Value::integer(4));
  const bool first = truthy(r.get("first", Value::boolean(false)));
  const bool blank = truthy(r.get("blank", Value::boolean(false)));
  r.done();
  std::string prefix;
  if (width.is_string()) {
    prefix = width.str();
  } else if (width.is_int()) {
    prefix.assign(static_cast<size_t>(std::clamp<int64_t>(width.as_int(), 0, 1024)), ' ');
  } else {
    throw Error(std::string("indent: width must be an int or a string, not ") + type_name(width));
  }
  // Jinja appends a newline first so that a trailing line break survives splitlines().
  const std::vector<std::string> lines = text::splitlines(to_str(v) + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    if ((i > 0 || first) && (blank || !lines[i].empty() || (i == 0 && first))) out += prefix;
    out += lines[i];
    check_string_size(out.size());
  }
  return Value::string(std::move(out));
}

// HTML escaping (markupsafe's): & < > " ' become entities.
Value f_escape(Interpreter&, const Value& v, Args& a) {
  ArgReader("escape", a).done();
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return checked_string(std::move(out));
}

Value f_tojson(Interpreter&, const Value& v, Args& args) {
  ArgReader r("tojson", args);
  JsonOptions o;
  o.ensure_ascii = truthy(r.get("ensure_ascii", Value::boolean(false)));
  const Value indent = r.get("indent", Value::none());
  const Value separators = r.get("separators", Value::none());
  o.sort_keys = truthy(r.get("sort_keys", Value::boolean(false)));
  r.done();
  if (indent.is_int()) {
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(indent.as_int(), 0)), ' ');
  } else if (indent.is_string()) {
    o.indent = indent.str();
  } else if (!indent.is_none()) {
    throw Error(std::string("tojson: indent must be an int or a string, not ") + type_name(indent));
  }
  if (!separators.is_none()) {
    const std::vector<Value> seps = ops::iterate(separators);
    if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string()) {
      throw Error("tojson: separators must be an (item_separator, key_separator) pair of strings");
    }
    o.item_separator = seps[0].str();
    o.key_separator = seps[1].str();
  }
  return checked_string(to_json(v, o));
}

// ---- numbers ------------------------------------------------------------------------

// Python float(str): surrounding whitespace, sign, digits with single underscores,
// optional fraction and exponent, or inf/infinity/nan in any case.
std::optional<double> parse_python_float(const std::string& raw) {
  const std::string s = text::strip(raw, std::nullopt, true, true);
  size_t i = 0;
  std::string lit;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) lit.push_back(s[i++]);
  std::string rest = s.substr(i);
  std::string low = text::lower(rest);
  if (low == "inf" || low == "infinity") return lit == "-" ? -INFINITY : INFINITY;
  if (low == "nan") return NAN;
  bool digits = false;
  auto take_digits = [&]() {
    bool any = false;
    while (i < s.size()) {
      if (s[i] >= '0' && s[i] <= '9') {
        lit.push_back(s[i++]);
        any = true;
      } else if (s[i] == '_' && any && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '9') {
        ++i;
      } else {
        break;
      }
    }
    return any;
  };
  digits = take_digits();
  if (i < s.size() && s[i] == '.') {
    lit.push_back(s[i++]);
    digits = take_digits() || digits;
  }
  if (!digits) return std::nullopt;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    lit.push_back(s[i++]);
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) lit.push_back(s[i++]);
    if (!take_digits()) return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;
  if (lit[0] == '+') lit.erase(0, 1);
  if (lit.back() == '.') lit.push_back('0');
  if (lit[0] == '.' || (lit[0] == '-' && lit.size() > 1 && lit[1] == '.')) lit.insert(lit[0] == '-' ? 1 : 0, "0");
  return text::parse_float(lit);
}

// Python int(str, base): whitespace, sign, optional 0x/0o/0b prefix matching the base
// (any with base 0), digits with single underscores.
std::optional<int64_t> parse_python_int(const std::string& raw, int64_t base) {
  const std::string s = text::strip(raw, std::nullopt, true, true);
  size_t i = 0;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  if (i + 1 < s.size() && s[i] == '0') {
    const char p = static_cast<char>(s[i + 1] | 0x20);
    const int64_t pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (pb && (base == 0 || base == pb)) {
      base = pb;
      i += 2;
      if (i < s.size() && s[i] == '_') ++i;
    }
  }
  if (base == 0) base = 10;
  if (base < 2 || base > 36) throw Error("int() base must be >= 2 and <= 36, or 0");
  int64_t v = 0;
  bool any = false;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_' && any && i + 1 < s.size() && s[i + 1] != '_') continue;
    int d = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? (c | 0x20) - 'a' + 10 : 99;
    if (d >= base) return std::nullopt;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) {
      throw Error("integer overflow (integers are limited to 64 bits here)");
    }
    any = true;
  }
  if (!any) return std::nullopt;
  return neg ? -v : v;
}

std::optional<int64_t> float_to_int(double d) {
  if (std::isnan(d)) return std::nullopt;  // ValueError in Python
  if (std::isinf(d)) throw Error("cannot convert float infinity to integer");
  const double t = std::trunc(d);
  if (t < -9223372036854775808.0 || t >= 9223372036854775808.0) {
    throw Error("integer overflow (integers are limited to 64 bits here)");
  }
  return static_cast<int64_t>(t);
}

Value f_int(Interpreter&, const Value& v, Args& args) {
  ArgReader r("int", args);
  const Value fallback = r.get("default", Value::integer(0));
  const Value base = r.get("base", Value::integer(10));
  r.done();
  if (v.is_undefined()) throw_undefined(v);  // int(Undefined) raises in Jinja
  if (v.is_int()) return Value::integer(v.as_int());
  if (v.kind() == Value::Kind::Float) {
    if (auto i = float_to_int(v.as_double())) return Value::integer(*i);
    return fallback;
  }
  if (v.is_string()) {
    if (!base.is_int()) throw Error("int() base must be an integer");
    if (auto i = parse_python_int(v.str(), base.as_int())) return Value::integer(*i);
    if (auto d = parse_python_float(v.str())) {  // "42.23" | int is 42
      if (auto i = float_to_int(*d)) return Value::integer(*i);
    }
  }
  return fallback;
}

Value f_float(Interpreter&, const Value& v, Args& args) {
  ArgReader r("float", args);
  const Value fallback = r.get("default", Value::number(0.0));
  r.done();
  if (v.is_undefined()) throw_undefined(v);  // float(Undefined) raises in Jinja
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string()) {
    if (auto d = parse_python_float(v.str())) return Value::number(*d);
  }
  return fallback;
}

Value f_abs(Interpreter&, const Value& v, Args& args) {
  ArgReader("abs", args).done();
  if (v.is_int()) {
    if (v.as_int() == std::numeric_limits<int64_t>::min()) throw Error("integer overflow");
    return Value::integer(std::abs(v.as_int()));
  }
  if (v.kind() == Value::Kind::Float) return Value::number(std::fabs(v.as_double()));
  if (v.is_undefined()) throw_undefined(v);
  throw Error(std::string("bad operand type for abs(): '") + type_name(v) + "'");
}

// ---- sequences ----------------------------------------------------------------------

Value f_length(Interpreter&, const Value& v, Args& a) {
  return no_args("length", a, Value::integer(static_cast<int64_t>(ops::length(v))));
}

Value f_list(Interpreter&, const Value& v, Args& a) { return no_args("list", a, Value::list(ops::iterate(v))); }

Value f_first(Interpreter&, const Value& v, Args& a) {
  ArgReader("first", a).done();
  std::vector<Value> items = ops::iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interpreter&, const Value& v, Args& a) {
  ArgReader("last", a).done();
  if (v.is_undefined()) throw_undefined(v);  // reversed() of Undefined fails in Jinja
  std::vector<Value> items = ops::iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_reverse(Interpreter&, const Value& v, Args& a) {
  ArgReader("reverse", a).done();
  if (v.is_string()) return Value::string(text::slice(v.str(), std::nullopt, std::nullopt, -1));
  std::vector<Value> items = ops::iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_join(Interpreter& in, const Value& v, Args& args) {
  ArgReader r("join", args);
  const std::string sep = to_str(r.get("d", Value::string("")));
  const std::optional<Value> attribute = r.next("attribute");
  r.done();
  std::string out;
  bool first = true;
  for (const Value& item : ops::iterate(v)) {
    in.tick();
    if (!first) out += sep;
    first = false;
    out += to_str(attribute && !attribute->is_none() ? get_path(item, *attribute, nullptr) : item);
    check_string_size(out.size());
  }
  return Value::string(std::move(out));
}

Value f_default(Interpreter&, const Value& v, Args& args) {
  ArgReader r("default", args);
  Value fallback = r.get("default_value", Value::string(""));
  const bool boolean = truthy(r.get("boolean", Value::boolean(false)));
  r.done();
  if (v.is_undefined() || (boolean && !truthy(v))) return fallback;
  return v;
}

Value f_items(Interpreter& in, const Value& v, Args& a) {
  ArgReader("items", a).done();
  if (v.is_undefined()) return Value::list({});
  if (v.kind() != Value::Kind::Dict) throw Error("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.dict().entries) {
    in.tick();
    out.push_back(Value::list({k, x}, true));
  }
  return Value::list(std::move(out));
}

Value f_dictsort(Interpreter& in, const Value& v, Args& args) {
  ArgReader r("dictsort", args);
  const bool case_sensitive = truthy(r.get("case_sensitive", Value::boolean(false)));
  const Value by = r.get("by", Value::string("key"));
  const bool reverse = truthy(r.get("reverse", Value::boolean(false)));
  r.done();
  if (v.kind() != Value::Kind::Dict) throw Error("dictsort: can only sort a mapping");
  if (!by.is_string() || (by.str() != "key" && by.str() != "value")) {
    throw Error("You can only sort by either 'key' or 'value'");
  }
  const size_t pos = by.str() == "key" ? 0 : 1;
  std::vector<Value> items;
  for (const auto& [k, x] : v.dict().entries) items.push_back(Value::list({k, x}, true));
  in.tick(items.size());
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    const Value ka = fold_case(a.list().items[pos], case_sensitive);
    const Value kb = fold_case(b.list().items[pos], case_sensitive);
    return reverse ? less(kb, ka) : less(ka, kb);
  });
  return Value::list(std::move(items));
}

// Sort key per Jinja: the attribute (when given), case-folded unless case_sensitive.
struct KeyOptions {
  bool case_sensitive = false;
  std::optional<Value> attribute;
};

Value sort_key(const Value& item, const KeyOptions& k) {
  const Value v = k.attribute && !k.attribute->is_none() ? get_path(item, *k.attribute, nullptr) : item;
  return fold_case(v, k.case_sensitive);
}

Value f_sort(Interpreter& in, const Value& v, Args& args) {
  ArgReader r("sort", args);
  const bool reverse = truthy(r.get("reverse", Value::boolean(false)));
  KeyOptions k;
  k.case_sensitive = truthy(r.get("case_sensitive", Value::boolean(false)));
  k.attribute = r.next("attribute");
  r.done();
  std::vector<Value> items = ops::iterate(v);
  in.tick(items.size());
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& x : items) keyed.emplace_back(sort_key(x, k), std::move(x));
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? less(b.first, a.first) : less(a.first, b.first);
  });
  std::vector<Value> out;
  for (auto& [key, x] : keyed) out.push_back(std::move(x));
  return Value::list(std::move(out));
}

Value f_unique(Interpreter& in, const Value& v, Args& args) {
  ArgReader r("unique", args);
  KeyOptions k;
  k.case_sensitive = truthy(r.get("case_sensitive", Value::boolean(false)));
  k.attribute = r.next("attribute");
  r.done();
  std::vector<Value> out, seen;
  for (const Value& x : ops::iterate(v)) {
    const Value key = sort_key(x, k);
    in.tick(seen.size() + 1);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) {
      seen.push_back(key);
      out.push_back(x);
    }
  }
  return Value::list(std::move(out));
}

Value min_max(Interpreter& in, const Value& v, Args& args, bool want_max) {
  const char* fn = want_max ? "max" : "min";
  ArgReader r(fn, args);
  KeyOptions k;
  k.case_sensitive = truthy(r.get("case_sensitive", Value::boolean(false)));
  k.attribute = r.next("attribute");
  r.done();
  const std::vector<Value> items = ops::iterate(v);
  in.tick(items.size());
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(items[0], k);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = sort_key(items[i], k);
    if (want_max ? less(best_key, key) : less(key, best_key)) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}
Value f_min(Interpreter& in, const Value& v, Args& a) { return min_max(in, v, a, false); }
Value f_max(Interpreter& in, const Value& v, Args& a) { return min_max(in, v, a, true); }

Value f_sum(Interpreter& in, const Value& v, Args& args) {
  ArgReader r("sum", args);
  const std::optional<Value> attribute = r.next("attribute");
  Value total = r.get("start", Value::integer(0));
  r.done();
  for (const Value& x : ops::iterate(v)) {
    in.tick();
    total =
        ops::binary(ast::BinOp::Add, total, attribute && !attribute->is_none() ? get_path(x, *attribute, nullptr) : x);
  }
  return total;
}

Value f_map(Interpreter& in, const Value& v, Args& args) {
  std::vector<Value> out;
  const auto attr =
      std::find_if(args.named.begin(), args.named.end(), [](const auto& a) { return a.first == "attribute"; });
  if (args.positional.empty() && attr != args.named.end()) {
    // map(attribute='x', default=...)
    ArgReader r("map", args);
    const Value attribute = r.required("attribute");
    const std::optional<Value> fallback = r.next("default");
    r.done();
    for (const Value& x : ops::iterate(v)) {
      in.tick();
      out.push_back(get_path(x, attribute, fallback ? &*fallback : nullptr));
    }
    return Value::list(std::move(out));
  }
  // map('filter', args...)
  if (args.positional.empty() || !args.positional[0].is_string()) throw Error("map requires a filter argument");
  const std::string name = args.positional[0].str();
  if (!has_filter(name)) throw Error("unsupported filter '" + name + "'");
  for (const Value& x : ops::iterate(v)) {
    in.tick();
    Args rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.named = args.named;
    out.push_back(apply_filter(in, name, x, rest));
  }
  return Value::list(std::move(out));
}

// select / reject / selectattr / rejectattr: keep the items for which the test (or, with
// no test named, truthiness) holds -- or fails, for the reject forms.
Value select_impl(Interpreter& in, const Value& v, Args& args, bool keep, bool by_attr) {
  size_t next = 0;
  Value attribute;
  if (by_attr) {
    if (args.positional.empty()) throw Error("Missing parameter for attribute name");
    attribute = args.positional[next++];
  }
  std::string test;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string()) throw Error("the test name must be a string");
    test = args.positional[next++].str();
    if (!has_test(test)) throw Error("unsupported test '" + test + "'");
  }
  std::vector<Value> out;
  for (const Value& x : ops::iterate(v)) {
    in.tick();
    const Value subject = by_attr ? get_path(x, attribute, nullptr) : x;
    bool ok;
    if (test.empty()) {
      ok = truthy(subject);
    } else {
      Args targs;
      targs.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
      targs.named = args.named;
      ok = apply_test(in, test, subject, targs);
    }
    if (ok == keep) out.push_back(x);
  }
  return Value::list(std::move(out));
}
Value f_select(Interpreter& in, const Value& v, Args& a) { return select_impl(in, v, a, true, false); }
Value f_reject(Interpreter& in, const Value& v, Args& a) { return select_impl(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, Args& a) { return select_impl(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, Args& a) { return select_impl(in, v, a, false, true); }

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const std::unordered_map<std::string_view, FilterFn> m = {
      {"abs", f_abs},
      {"capitalize", f_capitalize},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", f_map},
      {"max", f_max},
      {"min", f_min},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"safe", f_string},  // autoescape is off, so "safe" only turns the value into text
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"sort", f_sort},
      {"string", f_string},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"unique", f_unique},
      {"upper", f_upper},
  };
  return m;
}

}  // namespace

bool has_filter(std::string_view name) { return filters().count(name) != 0; }

Value apply_filter(Interpreter& in, std::string_view name, const Value& input, Args& args) {
  auto it = filters().find(name);
  if (it == filters().end()) throw Error("unsupported filter '" + std::string(name) + "'");
  return it->second(in, input, args);
}

}  // namespace tandem::jinja
