// `pattern`: a subset of regular expressions as the grammar of a string's content.
//
// The subset: literals, ".", classes ([a-z], [^...], \d \w \s and their negations), groups
// ((...), (?:...)), alternation, the quantifiers * + ? {m} {m,} {m,n} (lazy ones too), and
// ^ / $ at the very start / end. Not: backreferences, lookaround, word boundaries, Unicode
// property escapes, named groups, anchors elsewhere.
//
// Validators differ (ECMA-262 says the schema; Python's jsonschema uses `re`, where \d, \w
// and \s are Unicode-wide), so every set offered is inside both readings: \d is [0-9], \w is
// [A-Za-z0-9_], \s is [\t-\r ], and the negated ones (\D, \W, \S, a negated class using
// them) keep to ASCII. The characters are written as themselves, or as JSON requires (\",
// \\, \n...), never as other \u escapes; "." and negated classes leave out control
// characters. An unanchored pattern may be surrounded by any characters (it is a search).
#include <algorithm>
#include <utility>

#include "engine/grammar/gbnf_spell.hpp"
#include "engine/grammar/json_schema.hpp"
#include "engine/grammar/schema_converter.hpp"

namespace tandem::schema {

namespace {

using Ranges = std::vector<std::pair<char32_t, char32_t>>;  // inclusive code point ranges
constexpr char32_t kMaxCp = 0x10FFFF;

Ranges normalized(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1)
      out.back().second = std::max(out.back().second, hi);
    else
      out.push_back({lo, hi});
  }
  return out;
}

Ranges complement(const Ranges& r) {
  Ranges out;
  char32_t next = 0;
  for (const auto& [lo, hi] : normalized(r)) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCp) out.push_back({next, kMaxCp});
  return out;
}

Ranges intersect(const Ranges& a, const Ranges& b) {
  Ranges out;
  for (const auto& [alo, ahi] : normalized(a))
    for (const auto& [blo, bhi] : normalized(b))
      if (std::max(alo, blo) <= std::min(ahi, bhi)) out.push_back({std::max(alo, blo), std::min(ahi, bhi)});
  return normalized(out);
}

const Ranges kAscii = {{0, 0x7F}};
const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}};
// What JSON lets a string hold as itself: no quote, backslash or control character, and
// no surrogate (UTF-8 has none).
const Ranges kRaw = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0xD7FF}, {0xE000, kMaxCp}};

std::string utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

class RegexParser {
 public:
  RegexParser(std::vector<char32_t> re, const std::string& path) : s_(std::move(re)), path_(path) {}

  // The content grammar of the whole pattern.
  Frag parse(const Frag& any_char) {
    size_t begin = 0, end = s_.size();
    const bool start = end > 0 && s_[0] == '^';
    if (start) ++begin;
    const bool stop = end > begin && s_[end - 1] == '$' && !ends_escaped(end - 1, begin);
    if (stop) --end;
    s_.resize(end);
    i_ = begin;
    size_t alternatives = 0;
    Frag body = alternation(&alternatives);
    if (i_ != s_.size()) bad("unbalanced ')'");
    if (alternatives > 1 && (start || stop)) bad("'^' or '$' beside a top-level '|' (group the alternatives)");
    const Frag around = repeat(any_char, "*");
    if (body.empty() && !start && !stop) return around;  // not "char* char*": one way to match
    return seq({start ? epsilon() : around, body, stop ? epsilon() : around});
  }

 private:
  [[noreturn]] void bad(const std::string& why) const { fail_keyword("pattern", path_, why); }
  bool more() const { return i_ < s_.size(); }
  char32_t peek() const { return more() ? s_[i_] : 0; }
  // Whether s_[pos] is escaped: an odd run of backslashes before it.
  bool ends_escaped(size_t pos, size_t begin) const {
    size_t n = 0;
    while (pos > begin && s_[pos - 1] == '\\') --pos, ++n;
    return n % 2 == 1;
  }

  Frag alternation(size_t* count = nullptr) {
    std::vector<Frag> alts{sequence()};
    while (peek() == '|') {
      ++i_;
      alts.push_back(sequence());
    }
    if (count) *count = alts.size();
    return alt(std::move(alts));
  }

  Frag sequence() {
    std::vector<Frag> parts;
    while (more() && peek() != '|' && peek() != ')') parts.push_back(quantified(primary()));
    return seq(std::move(parts));
  }

  Frag primary() {
    const char32_t c = s_[i_++];
    switch (c) {
      case '(': {
        if (peek() == '?') {
          if (i_ + 1 < s_.size() && s_[i_ + 1] == ':')
            i_ += 2;
          else
            bad("lookaround and named groups are not supported");
        }
        if (++depth_ > 32) bad("groups nested deeper than 32");
        Frag inner = alternation();
        --depth_;
        if (peek() != ')') bad("unbalanced '('");
        ++i_;
        return inner;
      }
      case '[': {
        bool negated = false;
        Ranges r = cls(&negated);
        return chars(std::move(r), !negated);
      }
      case '.': return chars(complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}), false);
      case '\\': {
        bool negated = false;
        const Ranges r = escape(false, &negated);
        return chars(r, !negated);
      }
      case '^':
      case '$': bad("'^' and '$' only at the very start and end");
      case '*':
      case '+':
      case '?':
      case '{': bad("nothing to repeat before '" + utf8(c) + "'");
      default: return chars({{c, c}}, true);
    }
  }

  Frag quantified(Frag f) {
    long long min = 0, max = -1;
    switch (peek()) {
      case '*': ++i_; break;
      case '+': ++i_, min = 1; break;
      case '?': ++i_, max = 1; break;
      case '{': {
        ++i_;
        min = max = count();
        if (peek() == ',') {
          ++i_;
          max = peek() == '}' ? -1 : count();
        }
        if (peek() != '}') bad("malformed {m,n}");
        ++i_;
        if (max >= 0 && max < min) bad("{m,n} with n < m");
        break;
      }
      default: return f;
    }
    if (peek() == '?') ++i_;  // lazy: the same strings
    if (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{') bad("a quantifier after a quantifier");
    if (max < 0 && f.nullable) bad("an unbounded repetition of a part that can be empty");
    return repeat(f, min, max);
  }

  long long count() {
    long long n = 0;
    const size_t start = i_;
    while (more() && peek() >= '0' && peek() <= '9') {
      n = n * 10 + (peek() - '0');
      if (n > kSchemaMaxRepeat) bad("a repetition count above " + std::to_string(kSchemaMaxRepeat));
      ++i_;
    }
    if (i_ == start) bad("malformed {m,n}");
    return n;
  }

  // A class after its '['; negated classes using \d \w \s keep to ASCII.
  Ranges cls(bool* negated_out) {
    const bool negated = peek() == '^';
    *negated_out = negated;
    if (negated) ++i_;
    Ranges r;
    bool ascii = false;
    while (true) {
      if (!more()) bad("unterminated class");
      if (peek() == ']') break;
      bool set = false;
      const Ranges lo = member(&set, &ascii);
      if (!set && peek() == '-' && i_ + 1 < s_.size() && s_[i_ + 1] != ']') {
        ++i_;
        bool set_hi = false;
        const Ranges hi = member(&set_hi, &ascii);
        if (set_hi || hi[0].first < lo[0].first) bad("a bad range in a class");
        r.push_back({lo[0].first, hi[0].first});
      } else {
        r.insert(r.end(), lo.begin(), lo.end());
      }
    }
    ++i_;  // ']'
    if (!negated) return normalized(r);
    return ascii ? intersect(complement(r), kAscii) : complement(r);
  }

  // One member of a class: a character or (set = true) an escape for a set.
  Ranges member(bool* set, bool* ascii) {
    const char32_t c = s_[i_++];
    if (c != '\\') return {{c, c}};
    bool negated = false;
    const size_t before = i_;
    Ranges r = escape(true, &negated);
    const char32_t e = s_[before];
    *set = e == 'd' || e == 'D' || e == 'w' || e == 'W' || e == 's' || e == 'S';
    *ascii = *ascii || *set;
    return r;
  }

  // After a backslash.
  Ranges escape(bool in_class, bool* negated) {
    if (!more()) bad("a trailing backslash");
    const char32_t c = s_[i_++];
    switch (c) {
      case 'd': return kDigit;
      case 'w': return kWord;
      case 's': return kSpace;
      case 'D': *negated = true; return intersect(complement(kDigit), kAscii);
      case 'W': *negated = true; return intersect(complement(kWord), kAscii);
      case 'S': *negated = true; return intersect(complement(kSpace), kAscii);
      case 't': return {{'\t', '\t'}};
      case 'n': return {{'\n', '\n'}};
      case 'r': return {{'\r', '\r'}};
      case 'f': return {{'\f', '\f'}};
      case 'v': return {{'\v', '\v'}};
      case '0': return {{0, 0}};
      case 'x':
      case 'u': {
        const char32_t v = hex(c == 'x' ? 2 : 4);
        return {{v, v}};
      }
      case 'b':
        if (in_class) return {{'\b', '\b'}};
        bad("word boundaries (\\b) are not supported");
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
          bad("the escape \\" + utf8(c) + " is not supported");
        return {{c, c}};  // escaped punctuation: itself
    }
  }

  char32_t hex(int digits) {
    char32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      const char32_t c = peek();
      const int d = c >= '0' && c <= '9'   ? static_cast<int>(c - '0')
                    : c >= 'a' && c <= 'f' ? static_cast<int>(c - 'a' + 10)
                    : c >= 'A' && c <= 'F' ? static_cast<int>(c - 'A' + 10)
                                           : -1;
      if (d < 0) bad("a malformed \\x or \\u escape");
      v = v * 16 + static_cast<char32_t>(d);
      ++i_;
    }
    return v;
  }

  // The JSON spellings of a set of characters: a class of those JSON holds as themselves,
  // and the escapes of the others (control characters only if `controls`).
  Frag chars(Ranges set, bool controls) {
    set = normalized(std::move(set));
    std::vector<Frag> alts;
    const Ranges raw = intersect(set, kRaw);
    if (!raw.empty()) {
      std::string c = "[";
      for (const auto& [lo, hi] : raw) {
        c += gbnf_class_char(lo);
        if (hi != lo) {
          c += '-';  // appended apart: GCC 12's -Wrestrict misfires on "-" + std::string
          c += gbnf_class_char(hi);
        }
      }
      c += ']';
      alts.push_back(atom(std::move(c)));
    }
    for (const auto& [lo, hi] : intersect(set, {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}))
      for (char32_t cp = lo; cp <= hi; ++cp)
        if (controls || cp >= 0x20) {
          const std::string json = json_string_spelling(utf8(cp));
          alts.push_back(atom(gbnf_literal(std::string_view(json).substr(1, json.size() - 2))));
        }
    if (alts.empty()) bad("a part that matches no character");
    return alt(std::move(alts));
  }

  std::vector<char32_t> s_;
  const std::string& path_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Frag pattern_content(std::string_view pattern, const Frag& any_char, const std::string& path) {
  return RegexParser(utf8_code_points(pattern), path).parse(any_char);
}

}  // namespace tandem::schema
