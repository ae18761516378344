#include "tests/support/gguf_dump.hpp"

#include <array>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "tests/support/paths.hpp"

namespace tandem::test {
namespace {

using gguf::ValueType;

// Splits value_to_string's "[a, b, c]" (or a scalar) into its items.
std::vector<std::string> items(const std::string& rendered) {
  std::string s = rendered;
  if (!s.empty() && s.front() == '[') s = s.substr(1, s.size() - 2);
  std::vector<std::string> out;
  if (s.empty()) return out;
  size_t start = 0;
  for (;;) {
    const size_t comma = s.find(", ", start);
    out.push_back(s.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 2;
  }
  return out;
}

// One numeric item rendered by value_to_string, in the dump's notation.
std::string number(const std::string& item, ValueType t) {
  char buf[32];
  if (t == ValueType::FLOAT32) {
    float f = 0;
    std::from_chars(item.data(), item.data() + item.size(), f);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    std::snprintf(buf, sizeof buf, "f:%08x", bits);
    return buf;
  }
  if (t == ValueType::FLOAT64) {
    double d = 0;
    std::from_chars(item.data(), item.data() + item.size(), d);
    uint64_t bits;
    std::memcpy(&bits, &d, 8);
    std::snprintf(buf, sizeof buf, "d:%016llx", static_cast<unsigned long long>(bits));
    return buf;
  }
  if (t == ValueType::BOOL) return item == "true" ? "1" : "0";
  return item;
}

}  // namespace

std::string hex(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    out += digits[u >> 4];
    out += digits[u & 15];
  }
  return out;
}

uint32_t crc32(const uint8_t* p, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::string gguf_dump(const gguf::File& f) {
  std::string out;
  out += "version " + std::to_string(f.version()) + "\n";
  out += "alignment " + std::to_string(f.alignment()) + "\n";
  out += "data_offset " + std::to_string(f.data_offset()) + "\n";
  for (const std::string& key : f.keys()) {
    const ValueType t = f.type_of(key);
    std::string types = gguf::value_type_name(t);
    std::vector<std::string> values;
    if (t == ValueType::STRING) {
      values.push_back("s:" + hex(*f.get_string(key)));
    } else if (t == ValueType::ARRAY) {
      const ValueType elem = f.array_type_of(key);
      if (elem == ValueType::ARRAY) {
        out += "kv " + hex(key) + " nested\n";
        continue;
      }
      if (f.array_size(key) > 0) types += "," + gguf::value_type_name(elem);  // as gguf-py does
      if (elem == ValueType::STRING) {
        const std::vector<std::string> strings = *f.get_string_array(key);
        for (const auto& s : strings) values.push_back("s:" + hex(s));
      } else {
        for (const auto& item : items(f.value_to_string(key, std::numeric_limits<size_t>::max())))
          values.push_back(number(item, elem));
      }
    } else {
      values.push_back(number(f.value_to_string(key), t));
    }
    out += "kv " + hex(key) + " " + types + " " + std::to_string(values.size());
    for (const auto& v : values) out += " " + v;
    out += "\n";
  }
  for (const gguf::TensorInfo& t : f.tensors()) {
    std::string dims;
    for (size_t i = 0; i < t.dims.size(); ++i) {
      if (i) dims += ",";
      dims += std::to_string(t.dims[i]);
    }
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", crc32(f.tensor_data(t), t.nbytes));
    out += "tensor " + hex(t.name) + " " + std::to_string(static_cast<uint32_t>(t.type)) + " " + dims + " " +
           std::to_string(f.data_offset() + t.offset) + " " + std::to_string(t.nbytes) + " " + crc + "\n";
  }
  return out;
}

bool gguf_dump_python(const std::string& path, std::string* out) {
  return run_python("tests/python/gguf_dump.py", "'" + path + "' 2>&1", out) == 0;
}

}  // namespace tandem::test
