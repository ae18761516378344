// Methods templates call on values (str.strip(), dict.items(), loop.cycle(), ...), the
// global functions, and argument binding for all built-ins.
#include <algorithm>
#include <ctime>
#include <map>

#include "engine/chat/jinja/jinja_builtins.hpp"
#include "engine/chat/jinja/jinja_interp.hpp"
#include "engine/chat/jinja/jinja_ops.hpp"
#include "engine/chat/jinja/jinja_text.hpp"

namespace tandem::jinja {

// ---- ArgReader ---------------------------------------------------------------------

std::optional<Value> ArgReader::next(std::string_view param) {
  params_.push_back(param);
  auto named = std::find_if(args_.named.begin(), args_.named.end(), [&](const auto& a) { return a.first == param; });
  if (used_positional_ < args_.positional.size()) {
    if (named != args_.named.end()) {
      throw Error(std::string(fn_) + "() got multiple values for argument '" + std::string(param) + "'");
    }
    return args_.positional[used_positional_++];
  }
  if (named == args_.named.end()) return std::nullopt;
  return named->second;
}

Value ArgReader::required(std::string_view param) {
  std::optional<Value> v = next(param);
  if (!v) throw Error(std::string(fn_) + "() missing required argument '" + std::string(param) + "'");
  return std::move(*v);
}

void ArgReader::done() const {
  if (used_positional_ < args_.positional.size()) {
    throw Error(std::string(fn_) + "() takes at most " + std::to_string(params_.size()) + " argument(s) (" +
                std::to_string(args_.positional.size()) + " given)");
  }
  for (const auto& [name, v] : args_.named) {
    if (std::find(params_.begin(), params_.end(), name) == params_.end()) {
      throw Error(std::string(fn_) + "() got an unexpected keyword argument '" + name + "'");
    }
  }
}

namespace {

std::string str_arg(const Value& v, const char* fn, const char* what) {
  if (!v.is_string()) {
    throw Error(std::string(fn) + "() argument '" + what + "' must be str, not " + type_name(v));
  }
  return v.str();
}

std::optional<std::string> opt_str_arg(const std::optional<Value>& v, const char* fn, const char* what) {
  if (!v || v->is_none()) return std::nullopt;
  return str_arg(*v, fn, what);
}

int64_t int_arg(const Value& v, const char* fn, const char* what) {
  if (!v.is_int()) throw Error(std::string(fn) + "() argument '" + what + "' must be int, not " + type_name(v));
  return v.as_int();
}

std::optional<int64_t> opt_int_arg(const std::optional<Value>& v, const char* fn, const char* what) {
  if (!v || v->is_none()) return std::nullopt;
  return int_arg(*v, fn, what);
}

Value str_list(std::vector<std::string> parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}

using MethodFn = Value (*)(Interpreter&, const Value& self, Args&);

// ---- str ----------------------------------------------------------------------------

Value strip_impl(const Value& self, Args& args, const char* fn, bool left, bool right) {
  ArgReader r(fn, args);
  const std::optional<std::string> chars = opt_str_arg(r.next("chars"), fn, "chars");
  r.done();
  return Value::string(text::strip(self.str(), chars, left, right));
}
Value m_strip(Interpreter&, const Value& s, Args& a) { return strip_impl(s, a, "strip", true, true); }
Value m_lstrip(Interpreter&, const Value& s, Args& a) { return strip_impl(s, a, "lstrip", true, false); }
Value m_rstrip(Interpreter&, const Value& s, Args& a) { return strip_impl(s, a, "rstrip", false, true); }

Value split_impl(const Value& self, Args& args, bool right) {
  const char* fn = right ? "rsplit" : "split";
  ArgReader r(fn, args);
  const std::optional<std::string> sep = opt_str_arg(r.next("sep"), fn, "sep");
  const int64_t maxsplit = opt_int_arg(r.next("maxsplit"), fn, "maxsplit").value_or(-1);
  r.done();
  if (sep && sep->empty()) throw Error("empty separator");
  return str_list(right ? text::rsplit(self.str(), sep, maxsplit) : text::split(self.str(), sep, maxsplit));
}
Value m_split(Interpreter&, const Value& s, Args& a) { return split_impl(s, a, false); }
Value m_splitlines(Interpreter&, const Value& self, Args& args) {
  ArgReader r("splitlines", args);
  const bool keepends = truthy(r.get("keepends", Value::boolean(false)));
  r.done();
  if (keepends) throw Error("unsupported: splitlines(keepends=True)");
  return str_list(text::splitlines(self.str()));
}
Value m_rsplit(Interpreter&, const Value& s, Args& a) { return split_impl(s, a, true); }

// The part of `s` between optional start/end character indices, as str methods take them.
std::string bounded(const std::string& s, const std::optional<int64_t>& start, const std::optional<int64_t>& end) {
  if (!start && !end) return s;
  return text::slice(s, start, end, 1);
}

Value affix_impl(const Value& self, Args& args, bool prefix) {
  const char* fn = prefix ? "startswith" : "endswith";
  ArgReader r(fn, args);
  const Value affix = r.required(prefix ? "prefix" : "suffix");
  const auto start = opt_int_arg(r.next("start"), fn, "start");
  const auto end = opt_int_arg(r.next("end"), fn, "end");
  r.done();
  const std::string s = bounded(self.str(), start, end);
  auto test = [&](const Value& v) {
    if (!v.is_string()) {
      throw Error(std::string(fn) + " first arg must be str or a tuple of str, not " + type_name(v));
    }
    const std::string& a = v.str();
    return prefix ? s.starts_with(a) : s.ends_with(a);
  };
  if (affix.is_list() && affix.list().tuple) {
    for (const Value& v : affix.list().items) {
      if (test(v)) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  return Value::boolean(test(affix));
}
Value m_startswith(Interpreter&, const Value& s, Args& a) { return affix_impl(s, a, true); }
Value m_endswith(Interpreter&, const Value& s, Args& a) { return affix_impl(s, a, false); }

Value case_impl(const Value& self, Args& args, const char* name, std::string (*f)(std::string_view)) {
  ArgReader(name, args).done();
  return Value::string(f(self.str()));
}
Value m_lower(Interpreter&, const Value& s, Args& a) { return case_impl(s, a, "lower", text::lower); }
Value m_upper(Interpreter&, const Value& s, Args& a) { return case_impl(s, a, "upper", text::upper); }
Value m_title(Interpreter&, const Value& s, Args& a) { return case_impl(s, a, "title", text::title); }
Value m_capitalize(Interpreter&, const Value& s, Args& a) { return case_impl(s, a, "capitalize", text::capitalize); }

Value m_replace(Interpreter&, const Value& self, Args& args) {
  ArgReader r("replace", args);
  const std::string old = str_arg(r.required("old"), "replace", "old");
  const std::string repl = str_arg(r.required("new"), "replace", "new");
  const int64_t count = opt_int_arg(r.next("count"), "replace", "count").value_or(-1);
  r.done();
  return checked_string(text::replace(self.str(), old, repl, count));
}

Value search_impl(const Value& self, Args& args, bool find) {
  const char* fn = find ? "find" : "count";
  ArgReader r(fn, args);
  const std::string sub = str_arg(r.required("sub"), fn, "sub");
  const auto start = opt_int_arg(r.next("start"), fn, "start");
  const auto end = opt_int_arg(r.next("end"), fn, "end");
  r.done();
  const std::string s = bounded(self.str(), start, end);
  if (!find) return Value::integer(text::count(s, sub));
  int64_t at = text::find(s, sub);
  if (at >= 0 && start) {
    // Report the index in the whole string: add where the searched part began.
    const auto n = static_cast<int64_t>(text::length(self.str()));
    int64_t b = *start < 0 ? std::max<int64_t>(*start + n, 0) : std::min(*start, n);
    at += b;
  }
  return Value::integer(at);
}
Value m_find(Interpreter&, const Value& s, Args& a) { return search_impl(s, a, true); }
Value m_count(Interpreter&, const Value& s, Args& a) { return search_impl(s, a, false); }

Value m_join(Interpreter& in, const Value& self, Args& args) {
  ArgReader r("join", args);
  const Value seq = r.required("iterable");
  r.done();
  std::string out;
  size_t i = 0;
  for (const Value& v : ops::iterate(seq)) {
    in.tick();
    if (!v.is_string()) {
      throw Error("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(v) + " found");
    }
    if (i++) out += self.str();
    out += v.str();
    check_string_size(out.size());
  }
  return Value::string(std::move(out));
}

// ---- dict ---------------------------------------------------------------------------

Value m_items(Interpreter& in, const Value& self, Args& args) {
  ArgReader("items", args).done();
  std::vector<Value> out;
  for (const auto& [k, v] : self.dict().entries) {
    in.tick();
    out.push_back(Value::list({k, v}, true));
  }
  return Value::list(std::move(out));
}

Value m_keys(Interpreter&, const Value& self, Args& args) {
  ArgReader("keys", args).done();
  return Value::list(ops::iterate(self));
}

Value m_values(Interpreter&, const Value& self, Args& args) {
  ArgReader("values", args).done();
  std::vector<Value> out;
  for (const auto& [k, v] : self.dict().entries) out.push_back(v);
  return Value::list(std::move(out));
}

Value m_get(Interpreter&, const Value& self, Args& args) {
  ArgReader r("get", args);
  const Value key = r.required("key");
  Value fallback = r.get("default", Value::none());
  r.done();
  if (const Value* v = self.dict().find(key)) return *v;
  return fallback;
}

// ---- loop ---------------------------------------------------------------------------

Value m_cycle(Interpreter&, const Value& self, Args& args) {
  if (!args.named.empty()) throw Error("cycle() takes no keyword arguments");
  if (args.positional.empty()) throw Error("no items for cycling given");
  return args.positional[self.loop().index0 % args.positional.size()];
}

const std::map<std::string_view, MethodFn>& str_methods() {
  static const std::map<std::string_view, MethodFn> m = {
      {"strip", m_strip},
      {"lstrip", m_lstrip},
      {"rstrip", m_rstrip},
      {"split", m_split},
      {"rsplit", m_rsplit},
      {"splitlines", m_splitlines},
      {"startswith", m_startswith},
      {"endswith", m_endswith},
      {"lower", m_lower},
      {"upper", m_upper},
      {"title", m_title},
      {"capitalize", m_capitalize},
      {"replace", m_replace},
      {"find", m_find},
      {"count", m_count},
      {"join", m_join},
  };
  return m;
}

const std::map<std::string_view, MethodFn>& dict_methods() {
  static const std::map<std::string_view, MethodFn> m = {
      {"items", m_items}, {"keys", m_keys}, {"values", m_values}, {"get", m_get}};
  return m;
}

class BoundMethod : public Function {
 public:
  BoundMethod(Value self, std::string_view name, MethodFn fn) : self_(std::move(self)), name_(name), fn_(fn) {}
  std::string_view name() const override { return name_; }
  Value call(Interpreter& in, Args& args) const override { return fn_(in, self_, args); }

 private:
  Value self_;
  std::string name_;
  MethodFn fn_;
};

// ---- globals ------------------------------------------------------------------------

using GlobalFn = Value (*)(Interpreter&, Args&);

class GlobalFunction : public Function {
 public:
  GlobalFunction(std::string_view name, GlobalFn fn) : name_(name), fn_(fn) {}
  std::string_view name() const override { return name_; }
  Value call(Interpreter& in, Args& args) const override { return fn_(in, args); }

 private:
  std::string_view name_;
  GlobalFn fn_;
};

Value g_range(Interpreter& in, Args& args) {
  if (!args.named.empty()) throw Error("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) throw Error("range expected 1 to 3 arguments, got " + std::to_string(p.size()));
  for (const Value& v : p) {
    if (!v.is_int()) throw Error(std::string("'") + type_name(v) + "' object cannot be interpreted as an integer");
  }
  const int64_t start = p.size() == 1 ? 0 : p[0].as_int();
  const int64_t stop = p.size() == 1 ? p[0].as_int() : p[1].as_int();
  const int64_t step = p.size() == 3 ? p[2].as_int() : 1;
  if (step == 0) throw Error("range() arg 3 must not be zero");
  // The sandbox that transformers renders in refuses ranges over 100000 items.
  constexpr int64_t kMaxRange = 100000;
  const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  const __int128 stride = step > 0 ? static_cast<__int128>(step) : -static_cast<__int128>(step);
  const __int128 n = span <= 0 ? 0 : (span + stride - 1) / stride;
  if (n > kMaxRange) throw Error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) {
    in.tick();
    out.push_back(Value::integer(start + i * step));
  }
  return Value::list(std::move(out));
}

Dict kwargs_dict(const char* fn, Args& args, bool namespace_rules) {
  Dict d;
  if (args.positional.size() > 1) throw Error(std::string(fn) + "() expected at most 1 positional argument");
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.kind() == Value::Kind::Dict) {
      d = src.dict();
    } else {
      for (const Value& pair : ops::iterate(src)) {
        const std::vector<Value> kv = ops::iterate(pair);
        if (kv.size() != 2) throw Error(std::string(fn) + "(): sequence elements must be key/value pairs");
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [n, v] : args.named) d.set(Value::string(n), std::move(v));
  if (namespace_rules) {
    for (const auto& [k, v] : d.entries) {
      if (k.is_string() && k.str().starts_with("_")) {
        throw Error("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" +
                    k.str() + "'. Please rename the attribute.");
      }
    }
  }
  return d;
}

Value g_namespace(Interpreter&, Args& args) { return Value::ns(kwargs_dict("namespace", args, true)); }
Value g_dict(Interpreter&, Args& args) { return Value::dict(kwargs_dict("dict", args, false)); }

Value g_raise_exception(Interpreter&, Args& args) {
  ArgReader r("raise_exception", args);
  const Value msg = r.required("message");
  r.done();
  throw Error(to_str(msg), Error::kNoPos, /*raised=*/true);
}

Value g_strftime_now(Interpreter&, Args& args) {
  ArgReader r("strftime_now", args);
  const std::string fmt = str_arg(r.required("format"), "strftime_now", "format");
  r.done();
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  if (fmt.empty()) return Value::string("");
  std::string buf(256, '\0');
  for (int tries = 0; tries < 8; ++tries) {
    const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &local);
    if (n > 0) {
      buf.resize(n);
      return Value::string(std::move(buf));
    }
    buf.resize(buf.size() * 4);
  }
  return Value::string("");  // a format that expands to nothing
}

}  // namespace

bool has_method(std::string_view name) {
  return str_methods().count(name) || dict_methods().count(name) || name == "cycle";
}

std::optional<Value> bound_method(const Value& obj, std::string_view name) {
  const std::map<std::string_view, MethodFn>* table = nullptr;
  switch (obj.kind()) {
    case Value::Kind::String: table = &str_methods(); break;
    case Value::Kind::Dict: table = &dict_methods(); break;
    case Value::Kind::Loop:
      if (name == "cycle") return Value::function(std::make_shared<BoundMethod>(obj, name, m_cycle));
      return std::nullopt;
    default: return std::nullopt;
  }
  auto it = table->find(name);
  if (it == table->end()) return std::nullopt;
  return Value::function(std::make_shared<BoundMethod>(obj, name, it->second));
}

const Dict& global_functions() {
  static const Dict d = [] {
    Dict g;
    const std::pair<std::string_view, GlobalFn> fns[] = {
        {"range", g_range},
        {"namespace", g_namespace},
        {"dict", g_dict},
        {"raise_exception", g_raise_exception},
        {"strftime_now", g_strftime_now},
    };
    for (const auto& [n, f] : fns) {
      g.set(Value::string(std::string(n)), Value::function(std::make_shared<GlobalFunction>(n, f)));
    }
    return g;
  }();
  return d;
}

bool is_unsupported_global(std::string_view name) {
  return name == "lipsum" || name == "cycler" || name == "joiner";
}

}  // namespace tandem::jinja
