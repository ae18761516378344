// Internal to the GGUF reader and writer: little-endian loads and the on-disk size of
// each fixed-size metadata value type. GGUF v2/v3 files as written by llama.cpp are
// little-endian and so are the hosts tandem runs on, so a load is a plain memcpy.
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "engine/gguf/gguf.hpp"

namespace tandem::gguf::detail {

static_assert(std::endian::native == std::endian::little, "tandem reads GGUF on little-endian hosts only");

// Unaligned-safe load; the caller has checked that sizeof(T) bytes are there.
template <class T>
inline T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Bytes of one value of a fixed-size type; 0 for STRING and ARRAY (variable) and for
// ids that are not value types.
inline uint64_t fixed_size(uint32_t type) {
  switch (static_cast<ValueType>(type)) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::BOOL: return 1;
    case ValueType::UINT16:
    case ValueType::INT16: return 2;
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::FLOAT32: return 4;
    case ValueType::UINT64:
    case ValueType::INT64:
    case ValueType::FLOAT64: return 8;
    case ValueType::STRING:
    case ValueType::ARRAY: return 0;
  }
  return 0;
}

inline bool is_value_type(uint32_t type) { return type <= static_cast<uint32_t>(ValueType::FLOAT64); }

inline bool is_integer(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::UINT16:
    case ValueType::INT16:
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::UINT64:
    case ValueType::INT64: return true;
    default: return false;
  }
}

// A name as it appears in error messages: single-quoted, control bytes as \xNN, long
// names cut so a corrupt 60 KB "key" does not flood the message.
inline std::string quoted(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  std::string out = "'";
  for (char c : s.substr(0, 200)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  if (s.size() > 200) out += "...";
  return out + "'";
}

}  // namespace tandem::gguf::detail
