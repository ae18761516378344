#include "engine/chat/jinja/jinja_json.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "engine/chat/jinja/jinja_text.hpp"
#include "engine/text/utf8.hpp"

namespace tandem::jinja {

// ---- output -----------------------------------------------------------------------

namespace {

void append_u16(std::string& out, unsigned u) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\u%04x", u);
  out += buf;
}

void write_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  for (size_t pos = 0; pos < s.size();) {
    const text::Char c = text::char_at(s, pos);
    pos += c.len;
    switch (c.cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c.cp < 0x20) {
      append_u16(out, c.cp);
    } else if (ensure_ascii && c.cp >= 0x80) {
      if (c.cp >= 0x10000) {  // UTF-16 surrogate pair, as Python writes it
        const char32_t v = c.cp - 0x10000;
        append_u16(out, 0xD800 + (v >> 10));
        append_u16(out, 0xDC00 + (v & 0x3FF));
      } else {
        append_u16(out, c.cp);
      }
    } else {
      out.append(s.substr(c.pos, c.len));
    }
  }
  out.push_back('"');
}

std::string float_json(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return text::float_repr(d);
}

// json.dumps turns these key types into strings; anything else is an error.
std::string key_string(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::String: return k.str();
    case Value::Kind::Float: return float_json(k.as_double());
    case Value::Kind::Bool: return k.as_bool() ? "true" : "false";
    case Value::Kind::None: return "null";
    case Value::Kind::Int: return std::to_string(k.as_int());
    default:
      throw Error(std::string("keys must be str, int, float, bool or None, not ") + type_name(k));
  }
}

struct Writer {
  const JsonOptions& o;
  std::string out;

  std::string item_sep() const { return o.item_separator ? *o.item_separator : (o.indent ? "," : ", "); }
  std::string key_sep() const { return o.key_separator ? *o.key_separator : ": "; }

  void newline(int level) {
    if (!o.indent) return;
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += *o.indent;
  }

  void write(const Value& v, int level) {
    switch (v.kind()) {
      case Value::Kind::None: out += "null"; return;
      case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
      case Value::Kind::Int: out += std::to_string(v.as_int()); return;
      case Value::Kind::Float: out += float_json(v.as_double()); return;
      case Value::Kind::String: write_string(out, v.str(), o.ensure_ascii); return;
      case Value::Kind::List: {
        const auto& items = v.list().items;
        if (items.empty()) {
          out += "[]";
          return;
        }
        out.push_back('[');
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep();
          newline(level + 1);
          write(items[i], level + 1);
          check_string_size(out.size());
        }
        newline(level);
        out.push_back(']');
        return;
      }
      case Value::Kind::Dict: {
        std::vector<const std::pair<Value, Value>*> entries;
        for (const auto& e : v.dict().entries) entries.push_back(&e);
        if (entries.empty()) {
          out += "{}";
          return;
        }
        if (o.sort_keys) {
          std::stable_sort(entries.begin(), entries.end(),
                           [](const auto* a, const auto* b) { return less(a->first, b->first); });
        }
        out.push_back('{');
        for (size_t i = 0; i < entries.size(); ++i) {
          if (i) out += item_sep();
          newline(level + 1);
          write_string(out, key_string(entries[i]->first), o.ensure_ascii);
          out += key_sep();
          write(entries[i]->second, level + 1);
          check_string_size(out.size());
        }
        newline(level);
        out.push_back('}');
        return;
      }
      default:
        throw Error(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
    }
  }
};

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  Writer w{options, {}};
  w.write(v, 0);
  return std::move(w.out);
}

// ---- input ------------------------------------------------------------------------

namespace {

struct Reader {
  std::string_view s;
  size_t i = 0;
  uint32_t depth = 0;  // checked before recursing, so deep input cannot exhaust the stack

  [[noreturn]] void fail(const std::string& what) const {
    throw Error("JSON: " + what + " at byte " + std::to_string(i));
  }
  void skip_ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  }
  bool eat(std::string_view word) {
    if (s.substr(i, word.size()) != word) return false;
    i += word.size();
    return true;
  }
  void expect(char c) {
    skip_ws();
    if (i >= s.size() || s[i] != c) fail(std::string("expected '") + c + "'");
    ++i;
  }

  unsigned hex4() {
    if (i + 4 > s.size()) fail("truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s[i++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
      else fail("bad \\u escape");
    }
    return v;
  }

  std::string string() {
    ++i;  // opening quote
    std::string out;
    while (true) {
      if (i >= s.size()) fail("unterminated string");
      const char c = s[i++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (i >= s.size()) fail("unterminated string");
      const char e = s[i++];
      switch (e) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          char32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && s.substr(i, 2) == "\\u") {
            const size_t save = i;
            i += 2;
            const unsigned lo = hex4();
            if (lo >= 0xDC00 && lo < 0xE000) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              i = save;
            }
          }
          if (cp >= 0xD800 && cp < 0xE000) fail("lone UTF-16 surrogate");
          utf8::append(out, cp);
          break;
        }
        default: fail("bad escape");
      }
    }
  }

  Value number() {
    const size_t start = i;
    if (s[i] == '-') ++i;
    if (eat("Infinity")) return Value::number(s[start] == '-' ? -INFINITY : INFINITY);
    auto digits = [&] {
      const size_t b = i;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
      return i > b;
    };
    if (i < s.size() && s[i] == '0') {
      ++i;
    } else if (!digits()) {
      fail("bad number");
    }
    bool is_float = false;
    if (i < s.size() && s[i] == '.') {
      ++i;
      if (!digits()) fail("bad number");
      is_float = true;
    }
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
      ++i;
      if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
      if (!digits()) fail("bad number");
      is_float = true;
    }
    const char* b = s.data() + start;
    const char* e = s.data() + i;
    if (!is_float) {
      int64_t v = 0;
      if (std::from_chars(b, e, v).ec == std::errc()) return Value::integer(v);
      fail("integer out of the 64-bit range");
    }
    return Value::number(text::parse_float(std::string_view(b, static_cast<size_t>(e - b))));
  }

  Value value() {
    skip_ws();
    if (i >= s.size()) fail("unexpected end");
    const char c = s[i];
    if (c == '"') return Value::string(string());
    if ((c == '[' || c == '{') && depth >= kMaxNesting) fail("nested too deeply");
    ++depth;
    struct Unnest {
      uint32_t& d;
      ~Unnest() { --d; }
    } unnest{depth};
    if (c == '[') {
      ++i;
      std::vector<Value> items;
      skip_ws();
      if (i < s.size() && s[i] == ']') {
        ++i;
        return Value::list(std::move(items));
      }
      while (true) {
        items.push_back(value());
        skip_ws();
        if (i < s.size() && s[i] == ',') {
          ++i;
          continue;
        }
        expect(']');
        return Value::list(std::move(items));
      }
    }
    if (c == '{') {
      ++i;
      Dict d;
      skip_ws();
      if (i < s.size() && s[i] == '}') {
        ++i;
        return Value::dict(std::move(d));
      }
      while (true) {
        skip_ws();
        if (i >= s.size() || s[i] != '"') fail("expected a string key");
        Value key = Value::string(string());
        expect(':');
        d.set(std::move(key), value());
        skip_ws();
        if (i < s.size() && s[i] == ',') {
          ++i;
          continue;
        }
        expect('}');
        return Value::dict(std::move(d));
      }
    }
    if (eat("true")) return Value::boolean(true);
    if (eat("false")) return Value::boolean(false);
    if (eat("null")) return Value::none();
    if (eat("NaN")) return Value::number(NAN);
    if (c == '-' || (c >= '0' && c <= '9') || c == 'I') return number();
    fail("unexpected character");
  }
};

}  // namespace

Value parse_json(std::string_view text) {
  Reader r{text};
  Value v = r.value();
  r.skip_ws();
  if (r.i != text.size()) r.fail("trailing characters");
  return v;
}

}  // namespace tandem::jinja
