#include "engine/chat/jinja/jinja_lexer.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "engine/chat/jinja/jinja_text.hpp"
#include "engine/chat/jinja/jinja_value.hpp"
#include "engine/text/utf8.hpp"

namespace tandem::jinja {

std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

namespace {

constexpr size_t npos = std::string_view::npos;

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

int digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'z') return c - 'a' + 10;
  if (c >= 'A' && c <= 'Z') return c - 'A' + 10;
  return 99;
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  std::vector<Token> run() {
    if (src_.size() >= Error::kNoPos) throw Error("template larger than 4 GiB", 0);
    size_t pos = 0;
    while (pos < src_.size()) {
      const size_t tag = find_tag(pos);
      if (tag == npos) {
        emit_data(pos, src_.substr(pos));
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
      emit_data(pos, strip_before(src_.substr(pos, tag - pos), sign, kind != '{'));
      const size_t inner = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        pos = skip_comment(tag, inner);
      } else if (size_t body = kind == '%' ? raw_begin(inner) : npos; body != npos) {
        pos = lex_raw(tag, body);
      } else {
        pos = lex_tag(kind == '{', tag, inner);
      }
    }
    out_.push_back(Token{TokenType::Eof, static_cast<uint32_t>(src_.size()), {}});
    return std::move(out_);
  }

 private:
  std::string_view src_;
  std::vector<Token> out_;
  // Whether the text consumed last ended a line: lstrip_blocks then applies to a tag
  // that starts the following text, even though the newline itself was trimmed away.
  bool line_starting_ = true;

  [[noreturn]] void fail(size_t pos, const std::string& what) const {
    throw Error(what, static_cast<uint32_t>(pos));
  }

  bool at(size_t pos, std::string_view s) const { return src_.substr(pos, s.size()) == s; }

  size_t find_tag(size_t pos) const {
    for (size_t p = src_.find('{', pos); p != npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) return p;
    }
    return npos;
  }

  size_t skip_space(size_t p) const {
    while (p < src_.size()) {
      const text::Char c = text::char_at(src_, p);
      if (!text::is_space(c.cp)) break;
      p += c.len;
    }
    return p;
  }

  void emit_data(size_t pos, std::string_view text) {
    if (!text.empty()) out_.push_back(Token{TokenType::Data, static_cast<uint32_t>(pos), std::string(text)});
  }

  // Whitespace control on the text before a tag.
  std::string_view strip_before(std::string_view text, char sign, bool block_or_comment) const {
    if (sign == '-') return text.substr(0, rstrip_len(text));
    if (sign == '+' || !block_or_comment) return text;
    // lstrip_blocks: drop the tag's indentation when only whitespace precedes it on its line.
    const size_t nl = text.rfind('\n');
    const size_t line = nl == npos ? 0 : nl + 1;
    if ((line > 0 || line_starting_) && line < text.size() && rstrip_len(text.substr(line)) == 0) {
      return text.substr(0, line);
    }
    return text;
  }

  static size_t rstrip_len(std::string_view text) {
    // Python's str.rstrip(): Unicode whitespace. Walk forward so multi-byte spaces count.
    size_t keep = 0;
    for (size_t p = 0; p < text.size();) {
      const text::Char c = text::char_at(text, p);
      p += c.len;
      if (!text::is_space(c.cp)) keep = p;
    }
    return keep;
  }

  // After a block or comment end: "+": nothing; "-": all whitespace; else one newline.
  size_t after_end(size_t p, char sign) {
    if (sign == '-') {
      p = skip_space(p);
    } else if (sign != '+' && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    line_starting_ = p > 0 && src_[p - 1] == '\n';
    return p;
  }

  size_t skip_comment(size_t tag, size_t p) {
    // Jinja quirk kept: an opener that ends the template is silently dropped (its
    // "missing end" error needs at least one character after the opener).
    if (p >= src_.size()) return p;
    for (size_t e = src_.find("#}", p); e != npos; e = src_.find("#}", e + 1)) {
      // The body is matched lazily up to the first "#}"; a "+" or "-" just before it is
      // the closing whitespace control (when it is not also the opening one's "-").
      char sign = 0;
      if (e > p && (src_[e - 1] == '-' || src_[e - 1] == '+')) sign = src_[e - 1];
      return after_end(e + 2, sign);
    }
    fail(tag, "missing end of comment tag '#}'");
  }

  // `{% raw %}`: returns the offset just past its `%}`, or npos when this is another tag.
  size_t raw_begin(size_t p) const {
    p = skip_space(p);
    if (!at(p, "raw")) return npos;
    p = skip_space(p + 3);
    if (at(p, "-%}")) return skip_space(p + 3);
    if (at(p, "%}")) return p + 2;
    return npos;
  }

  size_t lex_raw(size_t tag, size_t body) {
    if (body >= src_.size()) return body;  // same quirk as for comments
    for (size_t e = src_.find("{%", body); e != npos; e = src_.find("{%", e + 1)) {
      size_t p = e + 2;
      const char open_sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : 0;
      if (open_sign) ++p;
      p = skip_space(p);
      if (!at(p, "endraw")) continue;
      p = skip_space(p + 6);
      char close_sign = 0;
      if (at(p, "+%}") || at(p, "-%}")) {
        close_sign = src_[p];
        p += 3;
      } else if (at(p, "%}")) {
        p += 2;
      } else {
        continue;
      }
      line_starting_ = false;  // the raw body is text; lstrip looks at it like any text
      emit_data(body, strip_before(src_.substr(body, e - body), open_sign, true));
      return after_end(p, close_sign);
    }
    fail(tag, "missing {% endraw %}");
  }

  // The tokens inside {{ ... }} or {% ... %}, then the closing delimiter.
  size_t lex_tag(bool variable, size_t tag, size_t p) {
    out_.push_back(Token{variable ? TokenType::VarBegin : TokenType::BlockBegin, static_cast<uint32_t>(tag), {}});
    std::string balance;  // expected closing brackets; the tag cannot end inside brackets
    while (true) {
      p = skip_space(p);
      if (p >= src_.size()) fail(tag, variable ? "missing '}}' to close '{{'" : "missing '%}' to close '{%'");
      if (balance.empty()) {
        if (variable && (at(p, "-}}") || at(p, "}}"))) {
          const bool minus = src_[p] == '-';
          out_.push_back(Token{TokenType::VarEnd, static_cast<uint32_t>(p), {}});
          p += minus ? 3 : 2;
          if (minus) p = skip_space(p);
          line_starting_ = p > 0 && src_[p - 1] == '\n';
          return p;
        }
        if (!variable && (at(p, "-%}") || at(p, "+%}") || at(p, "%}"))) {
          const char sign = src_[p] == '%' ? 0 : src_[p];
          out_.push_back(Token{TokenType::BlockEnd, static_cast<uint32_t>(p), {}});
          return after_end(p + (sign ? 3 : 2), sign);
        }
      }
      if (size_t e = match_float(p); e != npos) {
        push_float(p, e);
        p = e;
      } else if (size_t ei = match_int(p); ei != npos) {
        push_int(p, ei);
        p = ei;
      } else if (is_name_start(src_[p])) {
        size_t e2 = p + 1;
        while (e2 < src_.size() && is_name_char(src_[e2])) ++e2;
        out_.push_back(Token{TokenType::Name, static_cast<uint32_t>(p), std::string(src_.substr(p, e2 - p))});
        p = e2;
      } else if (src_[p] == '\'' || src_[p] == '"') {
        p = lex_string(p);
      } else if (static_cast<unsigned char>(src_[p]) >= 0x80) {
        fail(p, "unsupported: non-ASCII character in an expression (identifiers must be ASCII)");
      } else {
        p = lex_operator(p, balance);
      }
    }
  }

  size_t lex_operator(size_t p, std::string& balance) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    static constexpr std::string_view kOne = "+-/*%~[](){}<>=.:|,;";
    std::string_view op;
    for (std::string_view t : kTwo) {
      if (at(p, t)) op = t;
    }
    if (op.empty() && kOne.find(src_[p]) != npos) op = src_.substr(p, 1);
    if (op.empty()) fail(p, std::string("unexpected character '") + src_[p] + "'");
    if (op == "(" || op == "[" || op == "{") {
      balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
    } else if (op == ")" || op == "]" || op == "}") {
      if (balance.empty()) fail(p, "unexpected '" + std::string(op) + "'");
      if (balance.back() != op[0]) {
        fail(p, "unexpected '" + std::string(op) + "', expected '" + balance.back() + "'");
      }
      balance.pop_back();
    }
    out_.push_back(Token{TokenType::Operator, static_cast<uint32_t>(p), std::string(op)});
    return p + op.size();
  }

  // (\d+_)*\d+ starting at p: its end, or npos.
  size_t match_digits(size_t p) const {
    if (p >= src_.size() || !is_digit(src_[p])) return npos;
    size_t e = p;
    while (true) {
      while (e < src_.size() && is_digit(src_[e])) ++e;
      if (e + 1 < src_.size() && src_[e] == '_' && is_digit(src_[e + 1])) {
        ++e;
        continue;
      }
      return e;
    }
  }

  // Jinja's float: digits, then an exponent (with optional fraction) or a fraction.
  // Not right after a '.', so that `messages.0.role` reads 0 as an attribute.
  size_t match_float(size_t p) const {
    if (p > 0 && src_[p - 1] == '.') return npos;
    const size_t a = match_digits(p);
    if (a == npos) return npos;
    size_t q = a;
    if (q < src_.size() && src_[q] == '.') {
      if (size_t f = match_digits(q + 1); f != npos) q = f;
    }
    if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t x = q + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (size_t e = match_digits(x); e != npos) return e;
    }
    return q > a ? q : npos;
  }

  // Jinja's integer: 0b.., 0o.., 0x.. (digits may be separated by single underscores),
  // a decimal without leading zeros, or zeros.
  size_t match_int(size_t p) const {
    if (!is_digit(src_[p])) return npos;
    if (src_[p] == '0' && p + 1 < src_.size()) {
      const char b = static_cast<char>(src_[p + 1] | 0x20);
      const int base = b == 'b' ? 2 : b == 'o' ? 8 : b == 'x' ? 16 : 0;
      if (base) {
        size_t e = p + 2;
        while (true) {
          const size_t d = e < src_.size() && src_[e] == '_' ? e + 1 : e;
          if (d < src_.size() && digit_value(src_[d]) < base) {
            e = d + 1;
          } else {
            break;
          }
        }
        if (e > p + 2) return e;
      }
    }
    size_t e = p + 1;
    const bool zero = src_[p] == '0';
    while (true) {
      const size_t d = e < src_.size() && src_[e] == '_' ? e + 1 : e;
      if (d < src_.size() && is_digit(src_[d]) && (!zero || src_[d] == '0')) {
        e = d + 1;
      } else {
        return e;
      }
    }
  }

  void push_int(size_t p, size_t e) {
    std::string digits;
    for (char c : src_.substr(p, e - p)) {
      if (c != '_') digits.push_back(c);
    }
    int base = 10;
    size_t skip = 0;
    if (digits.size() > 1 && digits[0] == '0') {
      const char b = static_cast<char>(digits[1] | 0x20);
      base = b == 'b' ? 2 : b == 'o' ? 8 : b == 'x' ? 16 : 10;
      skip = base == 10 ? 0 : 2;
    }
    Token t{TokenType::Int, static_cast<uint32_t>(p), std::string(src_.substr(p, e - p))};
    const auto r = std::from_chars(digits.data() + skip, digits.data() + digits.size(), t.int_value, base);
    if (r.ec != std::errc()) fail(p, "unsupported: integer literal outside the 64-bit range");
    out_.push_back(std::move(t));
  }

  void push_float(size_t p, size_t e) {
    std::string digits;
    for (char c : src_.substr(p, e - p)) {
      if (c != '_') digits.push_back(c);
    }
    Token t{TokenType::Float, static_cast<uint32_t>(p), std::string(src_.substr(p, e - p))};
    t.float_value = text::parse_float(digits);
    out_.push_back(std::move(t));
  }

  // A quoted string. Its value is what Jinja computes: the body decoded with Python's
  // "unicode-escape" codec after non-ASCII characters were backslash-escaped.
  size_t lex_string(size_t p) {
    const char q = src_[p];
    size_t e = p + 1;
    while (e < src_.size() && src_[e] != q) e += src_[e] == '\\' ? 2 : 1;
    if (e >= src_.size()) fail(p, "unterminated string literal");
    Token t{TokenType::String, static_cast<uint32_t>(p), decode_string(p + 1, e)};
    out_.push_back(std::move(t));
    return e + 1;
  }

  std::string decode_string(size_t b, size_t e) const {
    std::string out;
    size_t i = b;
    auto hex = [&](size_t n) -> char32_t {
      char32_t v = 0;
      for (size_t k = 0; k < n; ++k) {
        const int d = i < e ? digit_value(src_[i]) : 99;
        if (d >= 16) fail(i, "malformed \\x, \\u or \\U escape in string literal");
        v = v * 16 + static_cast<char32_t>(d);
        ++i;
      }
      return v;
    };
    auto append_cp = [&](char32_t cp, size_t at_pos) {
      if (cp > 0x10FFFF) fail(at_pos, "escape outside the Unicode range in string literal");
      if (cp >= 0xD800 && cp < 0xE000) fail(at_pos, "unsupported: lone surrogate escape in string literal");
      utf8::append(out, cp);
    };
    while (i < e) {
      if (src_[i] != '\\') {
        out.push_back(src_[i++]);
        continue;
      }
      const size_t esc = i;
      const char n = src_[i + 1];
      i += 2;
      if (static_cast<unsigned char>(n) >= 0x80) {
        // "\é": the backslash-replace step turned é into \xe9, so the backslash pair
        // decodes to one backslash and the escape's letters stay as text.
        const text::Char c = text::char_at(src_, esc + 1);
        char buf[16];
        const char* fmt = c.cp <= 0xFF ? "\\x%02x" : c.cp <= 0xFFFF ? "\\u%04x" : "\\U%08x";
        std::snprintf(buf, sizeof buf, fmt, static_cast<unsigned>(c.cp));
        out += buf;
        i = esc + 1 + c.len;
        continue;
      }
      switch (n) {
        case '\n': break;  // line continuation
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x': append_cp(hex(2), esc); break;
        case 'u': append_cp(hex(4), esc); break;
        case 'U': append_cp(hex(8), esc); break;
        case 'N': fail(esc, "unsupported: \\N{...} escape in string literal");
        default:
          if (n >= '0' && n <= '7') {
            char32_t v = static_cast<char32_t>(n - '0');
            for (int k = 0; k < 2 && i < e && src_[i] >= '0' && src_[i] <= '7'; ++k) v = v * 8 + (src_[i++] - '0');
            append_cp(v, esc);
          } else {
            out.push_back('\\');  // unknown escapes are kept as written
            out.push_back(n);
          }
      }
    }
    return out;
  }
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

LineCol line_col(std::string_view source, size_t pos) {
  pos = std::min(pos, source.size());
  const size_t nl = source.rfind('\n', pos == 0 ? 0 : pos - 1);
  const size_t line_start = nl == npos || (pos == 0) ? 0 : nl + 1;
  int line = 1;
  for (size_t i = 0; i < line_start; ++i) line += source[i] == '\n';
  return {line, static_cast<int>(text::length(source.substr(line_start, pos - line_start))) + 1};
}

}  // namespace tandem::jinja
