// Typed access to GGUF metadata values. The values were validated when the file was
// opened (File::parse), so these read straight from the mapping; what they check is
// that the stored type suits the request and the value fits the result.
#include <charconv>
#include <limits>

#include "engine/gguf/gguf.hpp"
#include "engine/gguf/gguf_bytes.hpp"

namespace tandem::gguf {
namespace {

using detail::load;
using detail::quoted;

// Integer (or BOOL) at p as int64; false when a UINT64 does not fit.
bool load_int(ValueType t, const uint8_t* p, int64_t& out) {
  switch (t) {
    case ValueType::UINT8:
    case ValueType::BOOL: out = load<uint8_t>(p); return true;
    case ValueType::INT8: out = load<int8_t>(p); return true;
    case ValueType::UINT16: out = load<uint16_t>(p); return true;
    case ValueType::INT16: out = load<int16_t>(p); return true;
    case ValueType::UINT32: out = load<uint32_t>(p); return true;
    case ValueType::INT32: out = load<int32_t>(p); return true;
    case ValueType::INT64: out = load<int64_t>(p); return true;
    case ValueType::UINT64: {
      const uint64_t u = load<uint64_t>(p);
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
      out = static_cast<int64_t>(u);
      return true;
    }
    default: return false;
  }
}

bool is_int_or_bool(ValueType t) { return detail::is_integer(t) || t == ValueType::BOOL; }
bool is_float(ValueType t) { return t == ValueType::FLOAT32 || t == ValueType::FLOAT64; }

// Any numeric value as a double (UINT64 beyond int64 included).
double load_number(ValueType t, const uint8_t* p) {
  if (t == ValueType::FLOAT32) return load<float>(p);
  if (t == ValueType::FLOAT64) return load<double>(p);
  if (t == ValueType::UINT64) return static_cast<double>(load<uint64_t>(p));
  int64_t v = 0;
  load_int(t, p, v);
  return static_cast<double>(v);
}

std::string_view load_string(const uint8_t* base, uint64_t& pos) {
  const uint64_t len = load<uint64_t>(base + pos);
  std::string_view s(reinterpret_cast<const char*>(base + pos + 8), len);
  pos += 8 + len;
  return s;
}

// Advances pos past one value of type t (already validated, so no checks).
void skip_value(ValueType t, const uint8_t* base, uint64_t& pos) {
  if (t == ValueType::STRING) {
    load_string(base, pos);
  } else if (t == ValueType::ARRAY) {
    const auto elem = static_cast<ValueType>(load<uint32_t>(base + pos));
    const uint64_t count = load<uint64_t>(base + pos + 4);
    pos += 12;
    if (const uint64_t sz = detail::fixed_size(static_cast<uint32_t>(elem))) {
      pos += sz * count;
    } else {
      for (uint64_t i = 0; i < count; ++i) skip_value(elem, base, pos);
    }
  } else {
    pos += detail::fixed_size(static_cast<uint32_t>(t));
  }
}

template <class T>
std::string shortest(T v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// Double-quoted, with escapes, so any string renders on one line.
std::string escaped(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (u < 0x20 || u == 0x7f) {
          out += "\\x";
          out += hex[u >> 4];
          out += hex[u & 15];
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string render_value(ValueType t, const uint8_t* base, uint64_t& pos, size_t max_items);

std::string render_elements(ValueType elem, uint64_t count, const uint8_t* base, uint64_t& pos, size_t max_items) {
  std::string out = "[";
  for (uint64_t i = 0; i < count; ++i) {
    if (i == max_items) {
      out += (i ? ", ..." : "...");
      for (; i < count; ++i) skip_value(elem, base, pos);  // keeps pos right for an enclosing array
      out += "] (" + std::to_string(count) + " items)";
      return out;
    }
    if (i) out += ", ";
    out += render_value(elem, base, pos, max_items);
  }
  return out + "]";
}

std::string render_value(ValueType t, const uint8_t* base, uint64_t& pos, size_t max_items) {
  const uint8_t* p = base + pos;
  switch (t) {
    case ValueType::STRING: return escaped(load_string(base, pos));
    case ValueType::ARRAY: {
      const auto elem = static_cast<ValueType>(load<uint32_t>(p));
      const uint64_t count = load<uint64_t>(p + 4);
      pos += 12;
      return render_elements(elem, count, base, pos, max_items);
    }
    case ValueType::BOOL: pos += 1; return *p ? "true" : "false";
    case ValueType::FLOAT32: pos += 4; return shortest(load<float>(p));
    case ValueType::FLOAT64: pos += 8; return shortest(load<double>(p));
    case ValueType::UINT64: pos += 8; return std::to_string(load<uint64_t>(p));
    default: {
      int64_t v = 0;
      load_int(t, p, v);
      pos += detail::fixed_size(static_cast<uint32_t>(t));
      return std::to_string(v);
    }
  }
}

}  // namespace

bool File::has(std::string_view key) const { return find(key) != nullptr; }

ValueType File::type_of(std::string_view key) const { return require(key).type; }

ValueType File::array_type_of(std::string_view key) const {
  const Kv& kv = require(key);
  if (kv.type != ValueType::ARRAY)
    fail("metadata key " + quoted(key) + " has type " + value_type_name(kv.type) + ", expected an ARRAY");
  return kv.elem_type;
}

std::optional<int64_t> File::get_int(std::string_view key) const {
  const Kv* kv = find(key);
  if (!kv) return std::nullopt;
  if (!is_int_or_bool(kv->type))
    fail("metadata key " + quoted(key) + " has type " + value_type_name(kv->type) + ", expected an integer");
  int64_t v = 0;
  if (!load_int(kv->type, base_ + kv->pos, v))
    fail("metadata key " + quoted(key) + " value " + std::to_string(load<uint64_t>(base_ + kv->pos)) +
         " does not fit in int64");
  return v;
}

std::optional<double> File::get_float(std::string_view key) const {
  const Kv* kv = find(key);
  if (!kv) return std::nullopt;
  if (!is_float(kv->type) && !detail::is_integer(kv->type))
    fail("metadata key " + quoted(key) + " has type " + value_type_name(kv->type) + ", expected a number");
  return load_number(kv->type, base_ + kv->pos);
}

std::optional<bool> File::get_bool(std::string_view key) const {
  const Kv* kv = find(key);
  if (!kv) return std::nullopt;
  if (kv->type != ValueType::BOOL)
    fail("metadata key " + quoted(key) + " has type " + value_type_name(kv->type) + ", expected a BOOL");
  return base_[kv->pos] != 0;
}

std::optional<std::string> File::get_string(std::string_view key) const {
  const Kv* kv = find(key);
  if (!kv) return std::nullopt;
  if (kv->type != ValueType::STRING)
    fail("metadata key " + quoted(key) + " has type " + value_type_name(kv->type) + ", expected a STRING");
  uint64_t pos = kv->pos;
  return std::string(load_string(base_, pos));
}

std::optional<std::vector<std::string>> File::get_string_array(std::string_view key) const {
  const Kv* kv = find(key);
  if (!kv) return std::nullopt;
  if (kv->type != ValueType::ARRAY || kv->elem_type != ValueType::STRING)
    fail("metadata key " + quoted(key) + " is not an array of STRING");
  std::vector<std::string> out;
  out.reserve(kv->count);  // bounded: validated against the file size at open
  uint64_t pos = kv->pos;
  for (uint64_t i = 0; i < kv->count; ++i) out.emplace_back(load_string(base_, pos));
  return out;
}

std::optional<std::vector<float>> File::get_float_array(std::string_view key) const {
  const Kv* kv = find(key);
  if (!kv) return std::nullopt;
  if (kv->type != ValueType::ARRAY || !(is_float(kv->elem_type) || detail::is_integer(kv->elem_type)))
    fail("metadata key " + quoted(key) + " is not an array of numbers");
  const uint64_t sz = detail::fixed_size(static_cast<uint32_t>(kv->elem_type));
  std::vector<float> out(kv->count);
  for (uint64_t i = 0; i < kv->count; ++i)
    out[i] = static_cast<float>(load_number(kv->elem_type, base_ + kv->pos + i * sz));
  return out;
}

std::optional<std::vector<int64_t>> File::get_int_array(std::string_view key) const {
  const Kv* kv = find(key);
  if (!kv) return std::nullopt;
  if (kv->type != ValueType::ARRAY || !is_int_or_bool(kv->elem_type))
    fail("metadata key " + quoted(key) + " is not an array of integers");
  const uint64_t sz = detail::fixed_size(static_cast<uint32_t>(kv->elem_type));
  std::vector<int64_t> out(kv->count);
  for (uint64_t i = 0; i < kv->count; ++i)
    if (!load_int(kv->elem_type, base_ + kv->pos + i * sz, out[i]))
      fail("metadata key " + quoted(key) + " element " + std::to_string(i) + " does not fit in int64");
  return out;
}

size_t File::array_size(std::string_view key) const {
  const Kv* kv = find(key);
  return kv && kv->type == ValueType::ARRAY ? static_cast<size_t>(kv->count) : 0;
}

std::vector<std::string> File::keys() const {
  std::vector<std::string> out;
  out.reserve(kvs_.size());
  for (const Kv& kv : kvs_) out.push_back(kv.key);
  return out;
}

std::string File::value_to_string(std::string_view key, size_t max_array_items) const {
  const Kv& kv = require(key);
  uint64_t pos = kv.pos;
  if (kv.type == ValueType::ARRAY) return render_elements(kv.elem_type, kv.count, base_, pos, max_array_items);
  return render_value(kv.type, base_, pos, max_array_items);
}

std::string File::architecture() const {
  const auto a = get_string("general.architecture");
  if (!a) fail("metadata key 'general.architecture' is missing");
  return *a;
}

}  // namespace tandem::gguf
