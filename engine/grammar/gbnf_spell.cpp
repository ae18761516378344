#include "engine/grammar/gbnf_spell.hpp"

#include <cstdint>
#include <cstdio>

namespace tandem {

namespace {

constexpr char32_t kReplacement = 0xFFFD;

// "\xHH", "\uHHHH" or "\UHHHHHHHH": the GBNF escapes of a code point, the shortest that fits.
std::string hex_escape(char32_t cp) {
  char buf[16];
  if (cp <= 0xFF)
    std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
  else if (cp <= 0xFFFF)
    std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
  else
    std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(cp));
  return buf;
}

}  // namespace

std::vector<char32_t> utf8_code_points(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    char32_t cp = 0;
    if (b < 0x80) {
      len = 1, cp = b;
    } else if ((b & 0xE0) == 0xC0) {
      len = 2, cp = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      len = 3, cp = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      len = 4, cp = b & 0x07;
    }
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      ok = (c & 0xC0) == 0x80;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (!ok) {
      out.push_back(kReplacement);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string gbnf_literal(std::string_view utf8) {
  std::string out = "\"";
  for (char32_t cp : utf8_code_points(utf8)) {
    if (cp == '"' || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp >= 0x20 && cp < 0x7F) {
      out += static_cast<char>(cp);
    } else {
      out += hex_escape(cp);
    }
  }
  out += '"';
  return out;
}

std::string gbnf_literal(char32_t cp) {
  if (cp == '"' || cp == '\\') return std::string("\"\\") + static_cast<char>(cp) + '"';
  if (cp >= 0x20 && cp < 0x7F) return std::string("\"") + static_cast<char>(cp) + '"';
  std::string out = "\"";  // appended: GCC 12's -Wrestrict misfires on "\"" + std::string
  out += hex_escape(cp);
  out += '"';
  return out;
}

std::string gbnf_class_char(char32_t cp) {
  // The characters with a meaning inside a class, and the quote for good measure.
  if (cp == ']' || cp == '[' || cp == '\\' || cp == '^' || cp == '-' || cp == '"')
    return std::string("\\") + static_cast<char>(cp);
  if (cp > 0x20 && cp < 0x7F) return std::string(1, static_cast<char>(cp));
  return hex_escape(cp);
}

std::string json_string_spelling(std::string_view utf8) {
  std::string out = "\"";
  for (char c : utf8) {
    const auto b = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (b < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(b));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

}  // namespace tandem
