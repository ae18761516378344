#include "engine/grammar/gbnf_compose.hpp"

#include <cstdio>
#include <stdexcept>

namespace tandem {
namespace {
bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}
}  // namespace

std::string gbnf_prefix_rules(std::string_view g, std::string_view prefix) {
  for (char c : prefix)
    if (!name_char(c)) throw std::invalid_argument("gbnf_prefix_rules: a prefix of rule-name characters only");
  std::string out;
  out.reserve(g.size() + g.size() / 8);
  size_t i = 0;
  // Copies a quoted literal or a class, escapes included, up to its closing `close`.
  auto copy_quoted = [&](char close) {
    out += g[i++];
    while (i < g.size() && g[i] != close) {
      if (g[i] == '\\' && i + 1 < g.size()) out += g[i++];
      out += g[i++];
    }
    if (i < g.size()) out += g[i++];
  };
  while (i < g.size()) {
    const char c = g[i];
    if (c == '"') {
      copy_quoted('"');
    } else if (c == '[') {
      copy_quoted(']');
    } else if (c == '#') {
      while (i < g.size() && g[i] != '\n') out += g[i++];
    } else if (c == '{') {  // a repetition count: digits, not a name
      while (i < g.size() && g[i] != '}') out += g[i++];
    } else if (name_char(c)) {
      out += prefix;
      while (i < g.size() && name_char(g[i])) out += g[i++];
    } else {
      out += g[i++];
    }
  }
  return out;
}

std::string gbnf_quote(std::string_view text) {
  std::string out = "\"";
  for (char ch : text) {
    const auto b = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (b < 0x20 || b == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", b);
      out += buf;
    } else {
      out += ch;  // UTF-8 bytes pass through: the parser reads literals as UTF-8
    }
  }
  return out + "\"";
}

}  // namespace tandem
