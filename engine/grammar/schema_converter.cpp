// The converter's walk: keywords, combinators, $ref, enum/const, types and strings.
// Objects, arrays and integer ranges have their own files.
#include "engine/grammar/schema_converter.hpp"

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "engine/grammar/gbnf_spell.hpp"
#include "engine/grammar/json_schema.hpp"

namespace tandem::schema {

namespace {

// What each keyword is to the converter. Unknown keywords are refused (an app's typo or a
// keyword we do not know must not be silently dropped), except "x-..." extensions.
enum class Kind { annotation, handled, unsupported };

Kind kind_of(std::string_view k) {
  static constexpr std::array<std::string_view, 15> kAnnotations = {
      "title",     "description",   "default",         "examples",         "example",
      "$schema",   "$id",           "$comment",        "deprecated",       "readOnly",
      "writeOnly", "discriminator", "contentEncoding", "contentMediaType", "$anchor"};
  static constexpr std::array<std::string_view, 27> kHandled = {"type",
                                                                "properties",
                                                                "required",
                                                                "additionalProperties",
                                                                "enum",
                                                                "const",
                                                                "items",
                                                                "prefixItems",
                                                                "additionalItems",
                                                                "minItems",
                                                                "maxItems",
                                                                "anyOf",
                                                                "oneOf",
                                                                "allOf",
                                                                "$ref",
                                                                "$defs",
                                                                "definitions",
                                                                "minLength",
                                                                "maxLength",
                                                                "format",
                                                                "nullable",
                                                                "uniqueItems",
                                                                "minimum",
                                                                "maximum",
                                                                "exclusiveMinimum",
                                                                "exclusiveMaximum",
                                                                "pattern"};
  for (std::string_view a : kAnnotations)
    if (k == a) return Kind::annotation;
  for (std::string_view h : kHandled)
    if (k == h) return Kind::handled;
  if (k.starts_with("x-")) return Kind::annotation;
  return Kind::unsupported;
}

// Keywords that neither constrain nor combine: they may sit beside anything.
bool inert(std::string_view k) {
  return kind_of(k) == Kind::annotation || k == "$defs" || k == "definitions" || k == "nullable";
}

// A schema that accepts everything: true, {}, or only inert keywords.
bool unconstrained(const json::value& v) {
  if (v.is_bool()) return v.get_bool();
  if (!v.is_object()) return false;
  for (const auto& kv : v.get_object())
    if (!inert(kv.key())) return false;
  return true;
}

enum Type : unsigned { tNull = 1, tBoolean = 2, tObject = 4, tArray = 8, tNumber = 16, tInteger = 32, tString = 64 };

unsigned type_bit(std::string_view name, const std::string& path) {
  static constexpr std::pair<std::string_view, unsigned> kTypes[] = {
      {"null", tNull},     {"boolean", tBoolean}, {"object", tObject}, {"array", tArray},
      {"number", tNumber}, {"integer", tInteger}, {"string", tString}};
  for (const auto& [n, bit] : kTypes)
    if (name == n) return bit;
  fail("unknown type '" + std::string(name) + "' in 'type'", path);
}

// The `type` keyword as bits; 0 when absent.
unsigned declared_types(const json::object& o, const std::string& path) {
  const json::value* t = o.if_contains("type");
  if (!t) return 0;
  if (t->is_string()) return type_bit(t->get_string(), path);
  if (!t->is_array() || t->get_array().empty()) fail("'type' must be a type name or a non-empty array of them", path);
  unsigned bits = 0;
  for (const json::value& e : t->get_array()) {
    if (!e.is_string()) fail("'type' must be a type name or a non-empty array of them", path);
    bits |= type_bit(e.get_string(), path);
  }
  return bits;
}

// The types a schema without `type` constrains, from its keywords.
unsigned implied_types(const json::object& o) {
  unsigned bits = 0;
  for (const auto& kv : o) {
    const std::string_view k = kv.key();
    if (k == "properties" || k == "required" || k == "additionalProperties") bits |= tObject;
    if (k == "items" || k == "prefixItems" || k == "additionalItems" || k == "minItems" || k == "maxItems")
      bits |= tArray;
    if (k == "minLength" || k == "maxLength" || k == "format" || k == "pattern") bits |= tString;
    if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum") bits |= tNumber;
  }
  return bits;
}

bool has_range(const json::object& o) {
  return o.contains("minimum") || o.contains("maximum") || o.contains("exclusiveMinimum") ||
         o.contains("exclusiveMaximum");
}

bool matches_type(const json::value& v, unsigned types) {
  switch (v.kind()) {
    case json::kind::null: return types & tNull;
    case json::kind::bool_: return types & tBoolean;
    case json::kind::object: return types & tObject;
    case json::kind::array: return types & tArray;
    case json::kind::string: return types & tString;
    case json::kind::int64:
    case json::kind::uint64: return types & (tNumber | tInteger);
    case json::kind::double_:
      return (types & tNumber) ||
             ((types & tInteger) && std::isfinite(v.get_double()) && v.get_double() == std::floor(v.get_double()));
  }
  return false;
}

// The shortest %g spelling that reads back as the same double.
std::string spell_double(double d) {
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  return buf;
}

// "%7B" and friends in a URI fragment.
std::string percent_decoded(std::string_view s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The value a JSON pointer ("/$defs/a~1b") names in `doc`, or null.
const json::value* resolve_pointer(const json::value& doc, std::string_view pointer) {
  const json::value* at = &doc;
  size_t i = 0;
  while (i < pointer.size()) {
    const size_t end = std::min(pointer.find('/', i + 1), pointer.size());
    std::string token;
    for (size_t k = i + 1; k < end; ++k) {
      if (pointer[k] == '~' && k + 1 < end && (pointer[k + 1] == '0' || pointer[k + 1] == '1')) {
        token += pointer[k + 1] == '0' ? '~' : '/';
        ++k;
      } else {
        token += pointer[k];
      }
    }
    if (at->is_object()) {
      at = at->get_object().if_contains(token);
    } else if (at->is_array()) {
      const json::array& a = at->get_array();
      if (token.empty() || token.size() > 9 || token.find_first_not_of("0123456789") != std::string::npos)
        return nullptr;
      const size_t idx = std::stoul(token);
      at = idx < a.size() ? &a[idx] : nullptr;
    } else {
      return nullptr;
    }
    if (!at) return nullptr;
    i = end;
  }
  return at;
}

}  // namespace

void fail(const std::string& what, const std::string& path) {
  throw SchemaError(what + " at " + (path.empty() ? std::string("/") : path));
}

void fail_keyword(std::string_view keyword, const std::string& path, std::string_view why) {
  std::string what = "unsupported JSON Schema keyword '" + std::string(keyword) + "'";
  what += " at " + (path.empty() ? std::string("/") : path);
  if (!why.empty()) what += ": " + std::string(why);
  throw SchemaError(what);
}

std::string child_path(const std::string& path, std::string_view key) {
  std::string out = path + "/";
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

std::optional<int64_t> count_keyword(const json::object& o, std::string_view keyword, Count kind,
                                     const std::string& path) {
  const json::value* v = o.if_contains(keyword);
  if (!v) return std::nullopt;
  int64_t n = -1;
  if (v->is_int64()) n = v->get_int64();
  if (v->is_uint64()) n = v->get_uint64() > uint64_t{INT64_MAX} ? INT64_MAX : static_cast<int64_t>(v->get_uint64());
  if (v->is_double() && v->get_double() >= 0 && v->get_double() == std::floor(v->get_double()))
    n = v->get_double() > 9e18 ? INT64_MAX : static_cast<int64_t>(v->get_double());
  if (n < 0) fail("'" + std::string(keyword) + "' must be a non-negative integer", path);
  if (n > kSchemaMaxRepeat && kind == Count::lower)
    fail_keyword(keyword, path, std::to_string(n) + " is above the limit of " + std::to_string(kSchemaMaxRepeat));
  return std::min(n, kSchemaMaxRepeat);
}

Converter::Converter(const json::value& document) : doc_(document) {
  reserved_.insert("root");
  for (size_t r = 0; r < static_cast<size_t>(JsonRule::count_); ++r)
    reserved_.insert(std::string(json_rule(static_cast<JsonRule>(r)).name));
}

std::string Converter::run() {
  ref_names_[""] = "root";  // "$ref": "#" is the whole schema
  const MaybeFrag f = schema(doc_, "", "root");
  if (!f) fail("the schema matches no JSON value", "");
  define("root", *f, "");
  check_left_recursion();
  return text();
}

MaybeFrag Converter::schema(const json::value& s, const std::string& path, const std::string& hint) {
  struct Depth {
    int& d;
    ~Depth() { --d; }
  } guard{++depth_};
  if (depth_ > kSchemaMaxDepth)
    fail("the schema nests deeper than " + std::to_string(kSchemaMaxDepth) + " levels", path);
  if (s.is_bool()) return s.get_bool() ? MaybeFrag(use(JsonRule::value)) : std::nullopt;
  if (!s.is_object()) fail("a schema must be an object or a boolean", path);
  return schema_object(s.get_object(), path, hint);
}

MaybeFrag Converter::schema_object(const json::object& o, const std::string& path, const std::string& hint) {
  for (const auto& kv : o)
    if (kind_of(kv.key()) == Kind::unsupported) fail_keyword(kv.key(), path);
  if (const json::value* u = o.if_contains("uniqueItems"); u && !(u->is_bool() && !u->get_bool()))
    fail_keyword("uniqueItems", path, "the grammar cannot compare items");
  bool nullable = false;
  if (const json::value* n = o.if_contains("nullable")) {
    if (!n->is_bool()) fail("'nullable' must be a boolean", path);
    nullable = n->get_bool();
  }
  // Keywords that must be alone but for inert ones: $ref, then the combinators.
  auto alone = [&](std::string_view keyword, std::initializer_list<std::string_view> also) {
    for (const auto& kv : o) {
      const std::string_view k = kv.key();
      if (k == keyword || inert(k)) continue;
      bool allowed = false;
      for (std::string_view a : also) allowed = allowed || k == a;
      if (!allowed) fail_keyword(k, path, "beside '" + std::string(keyword) + "'");
    }
  };
  MaybeFrag f;
  if (o.contains("$ref")) {
    alone("$ref", {});
    f = reference(o, path);
  } else if (o.contains("anyOf") || o.contains("oneOf") || o.contains("allOf")) {
    const std::string_view k = o.contains("anyOf") ? "anyOf" : o.contains("oneOf") ? "oneOf" : "allOf";
    alone(k, {});
    f = combinator(o, k, path, hint);
  } else if (o.contains("enum") || o.contains("const")) {
    alone(o.contains("enum") ? "enum" : "const", {"type", "const"});
    f = enumeration(o, path);
  } else {
    f = typed(o, path, hint);
  }
  if (!nullable) return f;
  const Frag null = use(JsonRule::null);
  return f ? alt({*f, null}) : null;
}

MaybeFrag Converter::reference(const json::object& o, const std::string& path) {
  const json::value& r = o.at("$ref");
  if (!r.is_string()) fail("'$ref' must be a string", path);
  const std::string target(r.get_string());
  if (target.empty() || target[0] != '#')
    fail_keyword("$ref", path, "only local references (\"#/...\") are supported, not '" + target + "'");
  const std::string pointer = percent_decoded(std::string_view(target).substr(1));
  if (!pointer.empty() && pointer[0] != '/')
    fail_keyword("$ref", path, "only JSON pointers (\"#/...\") are supported, not '" + target + "'");
  if (auto it = ref_names_.find(pointer); it != ref_names_.end()) return ref(it->second, false);
  const json::value* at = resolve_pointer(doc_, pointer);
  if (!at) fail("'$ref' target '" + target + "' does not exist", path);
  const std::string name = new_name("def-" + pointer.substr(pointer.rfind('/') + 1));
  ref_names_[pointer] = name;
  const MaybeFrag body = schema(*at, pointer, name);
  if (!body) fail("'$ref' target '" + target + "' matches no JSON value", path);
  define(name, *body, pointer);
  return ref(name, body->nullable);
}

MaybeFrag Converter::combinator(const json::object& o, std::string_view keyword, const std::string& path,
                                const std::string& hint) {
  for (std::string_view other : {"anyOf", "oneOf", "allOf"})
    if (other != keyword && o.contains(other)) fail_keyword(other, path, "beside '" + std::string(keyword) + "'");
  const json::value& v = o.at(keyword);
  if (!v.is_array() || v.get_array().empty())
    fail("'" + std::string(keyword) + "' must be a non-empty array of schemas", path);
  const json::array& branches = v.get_array();
  const std::string at = child_path(path, keyword);
  if (keyword == "allOf") {
    // Only the trivial intersection: one constraining schema among unconstrained ones.
    const json::value* only = nullptr;
    size_t only_index = 0;
    for (size_t i = 0; i < branches.size(); ++i) {
      if (branches[i].is_bool() && !branches[i].get_bool()) return std::nullopt;
      if (unconstrained(branches[i])) continue;
      if (only) fail_keyword("allOf", path, "more than one of its schemas constrains (only one is supported)");
      only = &branches[i];
      only_index = i;
    }
    if (!only) return use(JsonRule::value);
    return schema(*only, child_path(at, std::to_string(only_index)), hint);
  }
  // anyOf, and oneOf as anyOf: exclusivity is not enforced.
  std::vector<Frag> alts;
  for (size_t i = 0; i < branches.size(); ++i)
    if (MaybeFrag b = schema(branches[i], child_path(at, std::to_string(i)), hint + "-" + std::to_string(i)))
      alts.push_back(std::move(*b));
  if (alts.empty()) return std::nullopt;
  return alt(std::move(alts));
}

MaybeFrag Converter::enumeration(const json::object& o, const std::string& path) {
  std::vector<const json::value*> values;
  const json::value* c = o.if_contains("const");
  if (const json::value* e = o.if_contains("enum")) {
    if (!e->is_array()) fail("'enum' must be an array", path);
    for (const json::value& v : e->get_array())
      if (!c || v == *c) values.push_back(&v);
  } else {
    values.push_back(c);
  }
  const unsigned types = declared_types(o, path);
  std::vector<Frag> alts;
  for (const json::value* v : values)
    if (types == 0 || matches_type(*v, types)) alts.push_back(literal(*v, path));
  if (alts.empty()) return std::nullopt;
  return alt(std::move(alts));
}

Frag Converter::literal(const json::value& v, const std::string& path) {
  switch (v.kind()) {
    case json::kind::null: return atom(gbnf_literal("null"));
    case json::kind::bool_: return atom(gbnf_literal(v.get_bool() ? "true" : "false"));
    case json::kind::int64: return atom(gbnf_literal(std::to_string(v.get_int64())));
    case json::kind::uint64: return atom(gbnf_literal(std::to_string(v.get_uint64())));
    case json::kind::double_:
      if (!std::isfinite(v.get_double())) fail("a number in 'enum' or 'const' is out of range", path);
      return atom(gbnf_literal(spell_double(v.get_double())));
    case json::kind::string: return atom(gbnf_literal(json_string_spelling(v.get_string())));
    case json::kind::array: {
      std::vector<Frag> parts{atom(gbnf_literal("[")), use(JsonRule::ws)};
      const json::array& a = v.get_array();
      for (size_t i = 0; i < a.size(); ++i) {
        if (i > 0) parts.insert(parts.end(), {atom(gbnf_literal(",")), use(JsonRule::ws)});
        parts.insert(parts.end(), {literal(a[i], path), use(JsonRule::ws)});
      }
      parts.push_back(atom(gbnf_literal("]")));
      return seq(std::move(parts));
    }
    case json::kind::object: {
      std::vector<Frag> parts{atom(gbnf_literal("{")), use(JsonRule::ws)};
      bool first = true;
      for (const auto& kv : v.get_object()) {
        if (!first) parts.insert(parts.end(), {atom(gbnf_literal(",")), use(JsonRule::ws)});
        first = false;
        parts.insert(parts.end(),
                     {atom(gbnf_literal(json_string_spelling(kv.key()))), use(JsonRule::ws), atom(gbnf_literal(":")),
                      use(JsonRule::ws), literal(kv.value(), path), use(JsonRule::ws)});
      }
      parts.push_back(atom(gbnf_literal("}")));
      return seq(std::move(parts));
    }
  }
  return atom(gbnf_literal("null"));
}

MaybeFrag Converter::typed(const json::object& o, const std::string& path, const std::string& hint) {
  unsigned types = declared_types(o, path);
  if (types == 0) types = implied_types(o);
  if (types == 0) return use(JsonRule::value);
  std::vector<Frag> alts;
  if (types & tObject)
    if (MaybeFrag f = object_type(o, path, hint)) alts.push_back(std::move(*f));
  if (types & tArray)
    if (MaybeFrag f = array_type(o, path, hint)) alts.push_back(std::move(*f));
  if (types & tString)
    if (MaybeFrag f = string_type(o, path)) alts.push_back(std::move(*f));
  if (types & (tNumber | tInteger)) {
    if (has_range(o)) {
      if (MaybeFrag f = types & tNumber ? number_range(o, path) : integer_range(o, path)) alts.push_back(std::move(*f));
    } else {
      alts.push_back(use(types & tNumber ? JsonRule::number : JsonRule::integer));
    }
  }
  if (types & tBoolean) alts.push_back(use(JsonRule::boolean));
  if (types & tNull) alts.push_back(use(JsonRule::null));
  if (alts.empty()) return std::nullopt;
  return alt(std::move(alts));
}

MaybeFrag Converter::string_type(const json::object& o, const std::string& path) {
  const std::optional<int64_t> min = count_keyword(o, "minLength", Count::lower, path);
  const std::optional<int64_t> max = count_keyword(o, "maxLength", Count::upper, path);
  const Frag quote = atom(gbnf_literal("\""));
  if (const json::value* p = o.if_contains("pattern")) {
    if (!p->is_string()) fail("'pattern' must be a string", path);
    if (min || max || o.contains("format")) fail_keyword("pattern", path, "beside minLength, maxLength or format");
    return named("string-pattern", seq({quote, pattern_content(p->get_string(), use(JsonRule::chr), path), quote}),
                 path);
  }
  if (const json::value* f = o.if_contains("format")) {
    if (!f->is_string()) fail("'format' must be a string", path);
    const std::string_view name = f->get_string();
    static constexpr std::pair<std::string_view, JsonRule> kFormats[] = {{"date", JsonRule::date},
                                                                         {"time", JsonRule::time},
                                                                         {"date-time", JsonRule::date_time},
                                                                         {"uuid", JsonRule::uuid}};
    for (const auto& [n, rule] : kFormats) {
      if (name != n) continue;
      if (min || max) {
        // date and uuid have one length; the others vary, and counting inside them is not done.
        const int64_t len = rule == JsonRule::date ? 10 : rule == JsonRule::uuid ? 36 : -1;
        if (len < 0) fail_keyword(min ? "minLength" : "maxLength", path, "beside format '" + std::string(name) + "'");
        if ((min && *min > len) || (max && *max < len)) return std::nullopt;
      }
      return seq({quote, use(rule), quote});
    }
    fail_keyword("format", path,
                 "format '" + std::string(name) + "' is not supported (date, time, date-time, uuid are)");
  }
  if (!min && !max) return use(JsonRule::string);
  if (max && min.value_or(0) > *max) return std::nullopt;
  // A rule, so that every string with the same bounds shares it (and the rules
  // Grammar::parse makes for the repetition).
  return named("string-len", seq({quote, repeat(use(JsonRule::chr1), min.value_or(0), max.value_or(-1)), quote}), path);
}

}  // namespace tandem::schema
