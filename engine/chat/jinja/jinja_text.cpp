#include "engine/chat/jinja/jinja_text.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "engine/chat/jinja/jinja_unicode_tables.hpp"
#include "engine/text/utf8.hpp"

namespace tandem::jinja::text {

namespace {

bool in_ranges(std::span<const tables::CodeRange> rs, char32_t cp) {
  auto it = std::upper_bound(rs.begin(), rs.end(), cp,
                             [](char32_t c, const tables::CodeRange& r) { return c < r.first; });
  return it != rs.begin() && cp <= std::prev(it)->last;
}

// Appends the mapping of `cp` under `t`; false when the table leaves it unchanged.
bool map_case(const tables::CaseTable& t, char32_t cp, std::string& out) {
  auto sp = std::lower_bound(t.special.begin(), t.special.end(), cp,
                             [](const tables::CaseSpecial& s, char32_t c) { return s.cp < c; });
  if (sp != t.special.end() && sp->cp == cp) {
    out += sp->utf8;
    return true;
  }
  auto it = std::upper_bound(t.runs.begin(), t.runs.end(), cp,
                             [](char32_t c, const tables::CaseRun& r) { return c < r.first; });
  if (it == t.runs.begin()) return false;
  const tables::CaseRun& r = *std::prev(it);
  if (cp > r.last || (cp - r.first) % r.stride != 0) return false;
  utf8::append(out, static_cast<char32_t>(static_cast<int64_t>(cp) + r.delta));
  return true;
}

enum class Case { Upper, Lower, Title };

void append_case(std::string_view s, const Char& c, Case k, std::string& out) {
  bool mapped = false;
  if (c.cp != utf8::kReplacement || s.substr(c.pos, c.len) == "\xEF\xBF\xBD") {
    switch (k) {
      case Case::Upper: mapped = map_case(tables::kUpper, c.cp, out); break;
      case Case::Lower: mapped = map_case(tables::kLower, c.cp, out); break;
      case Case::Title:
        mapped = map_case(tables::kTitle, c.cp, out) || map_case(tables::kUpper, c.cp, out);
        break;
    }
  }
  if (!mapped) out.append(s.substr(c.pos, c.len));
}

// Python lower-cases U+03A3 to the final form U+03C2 at the end of a word: after a cased
// character and not before one. (Python also skips "case-ignorable" characters such as
// apostrophes while looking; that refinement is left out.)
bool final_sigma(const std::vector<Char>& cs, size_t i) {
  return i > 0 && is_cased(cs[i - 1].cp) && (i + 1 == cs.size() || !is_cased(cs[i + 1].cp));
}

std::vector<Char> chars(std::string_view s) {
  std::vector<Char> out;
  for (size_t pos = 0; pos < s.size();) {
    out.push_back(char_at(s, pos));
    pos += out.back().len;
  }
  return out;
}

void append_lower(std::string_view s, const std::vector<Char>& cs, size_t i, std::string& out) {
  if (cs[i].cp == 0x3A3 && final_sigma(cs, i)) {
    out += "\xCF\x82";  // U+03C2
  } else {
    append_case(s, cs[i], Case::Lower, out);
  }
}

bool is_ws_byte(unsigned char b) { return b == ' ' || (b >= '\t' && b <= '\r') || (b >= 0x1C && b <= 0x1F); }

}  // namespace

Char char_at(std::string_view s, size_t pos) {
  const auto b = static_cast<unsigned char>(s[pos]);
  if (b < 0x80) return {b, pos, 1};
  const utf8::Decoded d = utf8::decode_one(s, pos);
  return {d.cp, pos, d.len};
}

std::vector<size_t> char_offsets(std::string_view s) {
  std::vector<size_t> out;
  out.reserve(s.size() + 1);
  for (size_t pos = 0; pos < s.size(); pos += char_at(s, pos).len) out.push_back(pos);
  out.push_back(s.size());
  return out;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (size_t pos = 0; pos < s.size(); pos += char_at(s, pos).len) ++n;
  return n;
}

bool is_space(char32_t cp) {
  if (cp < 0x80) return is_ws_byte(static_cast<unsigned char>(cp));
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_cased(char32_t cp) { return in_ranges(tables::kCasedRanges, cp); }
bool is_printable(char32_t cp) { return !in_ranges(tables::kNonPrintableRanges, cp); }

std::vector<size_t> slice_indices(size_t len, std::optional<int64_t> start, std::optional<int64_t> stop,
                                  int64_t step) {
  const auto n = static_cast<int64_t>(len);
  auto adjust = [&](std::optional<int64_t> v, int64_t if_none) {
    if (!v) return if_none;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t lo = adjust(start, step < 0 ? n - 1 : 0);
  const int64_t hi = adjust(stop, step < 0 ? -1 : n);
  std::vector<size_t> out;
  for (int64_t i = lo; step > 0 ? i < hi : i > hi;) {
    out.push_back(static_cast<size_t>(i));
    if (__builtin_add_overflow(i, step, &i)) break;
  }
  return out;
}

std::string slice(std::string_view s, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) {
  const std::vector<size_t> off = char_offsets(s);
  std::string out;
  for (size_t i : slice_indices(off.size() - 1, start, stop, step)) out.append(s.substr(off[i], off[i + 1] - off[i]));
  return out;
}

std::string strip(std::string_view s, std::optional<std::string_view> chars_opt, bool left, bool right) {
  std::vector<std::string_view> set;  // characters to strip, as byte sequences
  if (chars_opt) {
    for (size_t p = 0; p < chars_opt->size();) {
      const Char c = char_at(*chars_opt, p);
      set.push_back(chars_opt->substr(p, c.len));
      p += c.len;
    }
  }
  auto strips = [&](const Char& c) {
    if (!chars_opt) return is_space(c.cp);
    const std::string_view piece = s.substr(c.pos, c.len);
    return std::find(set.begin(), set.end(), piece) != set.end();
  };
  const std::vector<Char> cs = chars(s);
  size_t b = 0, e = cs.size();
  if (left) {
    while (b < e && strips(cs[b])) ++b;
  }
  if (right) {
    while (e > b && strips(cs[e - 1])) --e;
  }
  if (b == e) return {};
  return std::string(s.substr(cs[b].pos, cs[e - 1].pos + cs[e - 1].len - cs[b].pos));
}

std::vector<std::string> split(std::string_view s, std::optional<std::string_view> sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    size_t pos = 0;
    for (; maxsplit > 0; --maxsplit) {
      const size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  // Whitespace mode: runs of whitespace separate, and leading/trailing runs make no
  // empty pieces. After maxsplit pieces the rest (less its leading space) is one piece.
  const std::vector<Char> cs = chars(s);
  size_t i = 0;
  for (; maxsplit > 0; --maxsplit) {
    while (i < cs.size() && is_space(cs[i].cp)) ++i;
    if (i == cs.size()) break;
    const size_t j = i;
    while (i < cs.size() && !is_space(cs[i].cp)) ++i;
    out.emplace_back(s.substr(cs[j].pos, (i == cs.size() ? s.size() : cs[i].pos) - cs[j].pos));
  }
  while (i < cs.size() && is_space(cs[i].cp)) ++i;
  if (i < cs.size()) out.emplace_back(s.substr(cs[i].pos));
  return out;
}

std::vector<std::string> rsplit(std::string_view s, std::optional<std::string_view> sep, int64_t maxsplit) {
  std::vector<std::string> out;  // built back to front, reversed at the end
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    size_t end = s.size();
    for (; maxsplit > 0 && end >= sep->size(); --maxsplit) {
      const size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    const std::vector<Char> cs = chars(s);
    size_t i = cs.size();  // one past the current character
    for (; maxsplit > 0; --maxsplit) {
      while (i > 0 && is_space(cs[i - 1].cp)) --i;
      if (i == 0) break;
      const size_t j = i;
      while (i > 0 && !is_space(cs[i - 1].cp)) --i;
      const size_t end = cs[j - 1].pos + cs[j - 1].len;
      out.emplace_back(s.substr(cs[i].pos, end - cs[i].pos));
    }
    while (i > 0 && is_space(cs[i - 1].cp)) --i;
    if (i > 0) out.emplace_back(s.substr(0, cs[i - 1].pos + cs[i - 1].len));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> splitlines(std::string_view s) {
  auto is_break = [](char32_t cp) {
    return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 ||
           cp == 0x2028 || cp == 0x2029;
  };
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t pos = 0; pos < s.size();) {
    const Char c = char_at(s, pos);
    if (!is_break(c.cp)) {
      pos += c.len;
      continue;
    }
    out.emplace_back(s.substr(start, pos - start));
    pos += c.len;
    if (c.cp == '\r' && pos < s.size() && s[pos] == '\n') ++pos;
    start = pos;
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  if (old.empty()) {
    const std::vector<Char> cs = chars(s);
    for (const Char& c : cs) {
      if (count > 0) {
        out.append(repl);
        --count;
      }
      out.append(s.substr(c.pos, c.len));
    }
    if (count > 0) out.append(repl);
    return out;
  }
  size_t pos = 0;
  for (; count > 0; --count) {
    const size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(repl);
    pos = hit + old.size();
  }
  out.append(s.substr(pos));
  return out;
}

int64_t find(std::string_view s, std::string_view sub) {
  const size_t hit = s.find(sub);
  return hit == std::string_view::npos ? -1 : static_cast<int64_t>(length(s.substr(0, hit)));
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(length(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const Char& c : chars(s)) append_case(s, c, Case::Upper, out);
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const std::vector<Char> cs = chars(s);
  for (size_t i = 0; i < cs.size(); ++i) append_lower(s, cs, i, out);
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  const std::vector<Char> cs = chars(s);
  bool prev_cased = false;
  for (size_t i = 0; i < cs.size(); ++i) {
    if (prev_cased) {
      append_lower(s, cs, i, out);
    } else {
      append_case(s, cs[i], Case::Title, out);
    }
    prev_cased = is_cased(cs[i].cp);
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  const std::vector<Char> cs = chars(s);
  for (size_t i = 0; i < cs.size(); ++i) {
    if (i == 0) {
      append_case(s, cs[i], Case::Title, out);
    } else {
      append_lower(s, cs, i, out);
    }
  }
  return out;
}

std::string jinja_title(std::string_view s) {
  // Jinja splits on the regex ([-\s({\[<]+), keeps the separators, and turns each
  // word into word[0].upper() + word[1:].lower().
  auto is_sep = [](char32_t cp) {
    return is_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
  };
  std::string out;
  const std::vector<Char> cs = chars(s);
  for (size_t i = 0; i < cs.size();) {
    if (is_sep(cs[i].cp)) {
      out.append(s.substr(cs[i].pos, cs[i].len));
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < cs.size() && !is_sep(cs[j].cp)) ++j;
    append_case(s, cs[i], Case::Upper, out);
    const size_t rest = cs[i].pos + cs[i].len;
    const size_t end = cs[j - 1].pos + cs[j - 1].len;
    out += lower(s.substr(rest, end - rest));
    i = j;
  }
  return out;
}

bool is_lower(std::string_view s) {
  bool cased = false;
  for (const Char& c : chars(s)) cased = cased || is_cased(c.cp);
  return cased && lower(s) == s;
}

bool is_upper(std::string_view s) {
  bool cased = false;
  for (const Char& c : chars(s)) cased = cased || is_cased(c.cp);
  return cased && upper(s) == s;
}

double parse_float(std::string_view literal) {
  double d = 0;
  const auto r = std::from_chars(literal.data(), literal.data() + literal.size(), d);
  if (r.ec == std::errc::result_out_of_range) {
    const size_t e = literal.find_first_of("eE");
    const bool tiny = e != std::string_view::npos && e + 1 < literal.size() && literal[e + 1] == '-';
    const bool negative = !literal.empty() && literal[0] == '-';
    d = tiny ? 0.0 : HUGE_VAL;
    if (negative) d = -d;
  }
  return d;
}

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  // Shortest round-trip digits, as d.ddde±x.
  const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  std::string out;
  size_t i = 0;
  if (sci[0] == '-') {
    out.push_back('-');
    i = 1;
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t k = i; k < e; ++k) {
    if (sci[k] != '.') digits.push_back(sci[k]);
  }
  int exp10 = 0;
  std::from_chars(sci.data() + e + (sci[e + 1] == '+' ? 2 : 1), sci.data() + sci.size(), exp10);
  const int decpt = exp10 + 1;  // value = 0.DIGITS x 10^decpt
  const int nd = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out.append("0.").append(static_cast<size_t>(-decpt), '0').append(digits);
    } else if (decpt >= nd) {
      out.append(digits).append(static_cast<size_t>(decpt - nd), '0').append(".0");
    } else {
      out.append(digits, 0, static_cast<size_t>(decpt)).append(".").append(digits, static_cast<size_t>(decpt));
    }
    return out;
  }
  out.push_back(digits[0]);
  if (nd > 1) out.append(".").append(digits, 1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
  return out + ebuf;
}

std::string str_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  char buf[16];
  for (size_t pos = 0; pos < s.size();) {
    const Char c = char_at(s, pos);
    pos += c.len;
    const char32_t cp = c.cp;
    if (cp == static_cast<unsigned char>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
      out += buf;
    } else if (cp < 0x7F || cp == utf8::kReplacement || is_printable(cp)) {
      out.append(s.substr(c.pos, c.len));  // ill-formed bytes (read as U+FFFD) are copied as they are
    } else {
      const char* fmt = cp <= 0xFF ? "\\x%02x" : cp <= 0xFFFF ? "\\u%04x" : "\\U%08x";
      std::snprintf(buf, sizeof buf, fmt, static_cast<unsigned>(cp));
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace tandem::jinja::text
