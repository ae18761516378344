#include "engine/chat/jinja/jinja_json.hpp"

#include <algorithm>
#include <boost/json/basic_parser_impl.hpp>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "engine/chat/jinja/jinja_text.hpp"

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

// Builds template values from Boost.JSON's parser events: its own value type would lose the
// digits of each float, which Python's float() rounds correctly and json::value may not.
class ValueBuilder {
 public:
  static constexpr std::size_t max_object_size = std::size_t(-1);
  static constexpr std::size_t max_array_size = std::size_t(-1);
  static constexpr std::size_t max_key_size = std::size_t(-1);
  static constexpr std::size_t max_string_size = std::size_t(-1);
  using ec_t = boost::system::error_code;
  using sv = boost::json::string_view;

  Value result;
  std::string bad;  // why a value the JSON grammar allows was refused

  bool on_document_begin(ec_t&) { return true; }
  bool on_document_end(ec_t&) { return true; }
  bool on_array_begin(ec_t&) {
    open_.push_back({false, {}, {}, {}});
    return true;
  }
  bool on_array_end(std::size_t, ec_t&) {
    Frame f = std::move(open_.back());
    open_.pop_back();
    return add(Value::list(std::move(f.items)));
  }
  bool on_object_begin(ec_t&) {
    open_.push_back({true, {}, {}, {}});
    return true;
  }
  bool on_object_end(std::size_t, ec_t&) {
    Frame f = std::move(open_.back());
    open_.pop_back();
    return add(Value::dict(std::move(f.dict)));
  }
  bool on_string_part(sv s, std::size_t, ec_t&) {
    text_.append(s.data(), s.size());
    return true;
  }
  bool on_string(sv s, std::size_t, ec_t&) {
    text_.append(s.data(), s.size());
    return add(Value::string(take(text_)));
  }
  bool on_key_part(sv s, std::size_t, ec_t&) {
    text_.append(s.data(), s.size());
    return true;
  }
  bool on_key(sv s, std::size_t, ec_t&) {
    text_.append(s.data(), s.size());
    open_.back().key = take(text_);
    return true;
  }
  bool on_number_part(sv s, ec_t&) {
    number_.append(s.data(), s.size());
    return true;
  }
  bool on_int64(int64_t i, sv, ec_t&) {
    number_.clear();
    return add(Value::integer(i));
  }
  bool on_uint64(uint64_t, sv, ec_t& ec) {
    bad = "integer out of the 64-bit range";
    ec = boost::json::error::exception;
    return false;
  }
  bool on_double(double, sv s, ec_t&) {
    number_.append(s.data(), s.size());
    return add(Value::number(text::parse_float(take(number_))));
  }
  bool on_bool(bool b, ec_t&) { return add(Value::boolean(b)); }
  bool on_null(ec_t&) { return add(Value::none()); }
  bool on_comment_part(sv, ec_t&) { return true; }
  bool on_comment(sv, ec_t&) { return true; }

 private:
  struct Frame {
    bool is_dict;
    std::vector<Value> items;
    Dict dict;
    std::string key;
  };
  std::vector<Frame> open_;
  std::string text_, number_;

  static std::string take(std::string& s) {
    std::string out = std::move(s);
    s.clear();
    return out;
  }
  bool add(Value v) {
    if (open_.empty()) {
      result = std::move(v);
    } else if (open_.back().is_dict) {
      open_.back().dict.set(Value::string(take(open_.back().key)), std::move(v));  // a repeated key: the last wins
    } else {
      open_.back().items.push_back(std::move(v));
    }
    return true;
  }
};

}  // namespace

Value parse_json(std::string_view text) {
  boost::json::parse_options po;
  po.max_depth = kMaxNesting;
  boost::json::basic_parser<ValueBuilder> p(po);
  boost::system::error_code ec;
  const size_t used = p.write_some(false, text.data(), text.size(), ec);
  if (ec) {
    const std::string why = !p.handler().bad.empty() ? p.handler().bad : ec.message();
    throw Error("JSON: " + why + " at byte " + std::to_string(used));
  }
  return std::move(p.handler().result);
}

}  // namespace tandem::jinja
