// Integer ranges (minimum, maximum, exclusiveMinimum, exclusiveMaximum on "integer"), exact:
// the decimal spellings of [lo, hi] as a grammar, digit position by digit position. A
// range of reals has no such finite description, which is why "number" ranges are refused.
#include <algorithm>
#include <cmath>
#include <string>

#include "engine/grammar/gbnf_spell.hpp"
#include "engine/grammar/schema_converter.hpp"

namespace tandem::schema {

namespace {

// The integer rule's bound: 16 digits.
constexpr int64_t kLimit = 9'999'999'999'999'999;

Frag digits(char from, char to) {
  if (from == to) return atom(gbnf_literal(static_cast<char32_t>(from)));
  return atom(std::string("[") + from + "-" + to + "]");
}

Frag any_digits(size_t n) { return repeat(atom("[0-9]"), static_cast<long long>(n), static_cast<long long>(n)); }

// The strings of x.size() digits from x to y (same length, x <= y), leading zeros allowed.
Frag same_length(std::string_view x, std::string_view y) {
  if (x.empty()) return epsilon();
  if (x == y) return atom(gbnf_literal(x));
  const size_t n = x.size() - 1;
  if (x[0] == y[0]) return seq({digits(x[0], x[0]), same_length(x.substr(1), y.substr(1))});
  const bool low_full = x.substr(1).find_first_not_of('0') == std::string_view::npos;
  const bool high_full = y.substr(1).find_first_not_of('9') == std::string_view::npos;
  // First digits strictly between x[0] and y[0] take any rest; the ends do when their rest
  // is all zeros (low end) or all nines (high end).
  const char lo = low_full ? x[0] : static_cast<char>(x[0] + 1);
  const char hi = high_full ? y[0] : static_cast<char>(y[0] - 1);
  std::vector<Frag> alts;
  if (!low_full) alts.push_back(seq({digits(x[0], x[0]), same_length(x.substr(1), std::string(n, '9'))}));
  if (lo <= hi) alts.push_back(seq({digits(lo, hi), any_digits(n)}));
  if (!high_full) alts.push_back(seq({digits(y[0], y[0]), same_length(std::string(n, '0'), y.substr(1))}));
  return alt(std::move(alts));
}

// The spellings of the integers a..b (0 <= a <= b), no leading zeros.
Frag unsigned_range(int64_t a, int64_t b) {
  std::vector<Frag> alts;
  const std::string sa = std::to_string(a), sb = std::to_string(b);
  for (size_t len = sa.size(); len <= sb.size(); ++len) {
    std::string low(len, '0');
    if (len == sa.size())
      low = sa;
    else if (len > 1)
      low[0] = '1';
    const std::string high = len == sb.size() ? sb : std::string(len, '9');
    alts.push_back(same_length(low, high));
  }
  return alt(std::move(alts));
}

// A bound as an integer within [-kLimit - 1, kLimit + 1]: rounded up (ceil) or down.
int64_t bound(const json::value& v, bool up, std::string_view keyword, const std::string& path) {
  if (v.is_int64()) return std::clamp<int64_t>(v.get_int64(), -kLimit - 1, kLimit + 1);
  if (v.is_uint64()) return v.get_uint64() > uint64_t{kLimit} ? kLimit + 1 : static_cast<int64_t>(v.get_uint64());
  if (!v.is_double() || !std::isfinite(v.get_double()))
    fail("'" + std::string(keyword) + "' must be a number", path);
  const double d = up ? std::ceil(v.get_double()) : std::floor(v.get_double());
  if (d > static_cast<double>(kLimit)) return kLimit + 1;
  if (d < -static_cast<double>(kLimit)) return -kLimit - 1;
  return static_cast<int64_t>(d);
}

}  // namespace

MaybeFrag Converter::integer_range(const json::object& o, const std::string& path) {
  int64_t lo = -kLimit, hi = kLimit;
  // Draft 4 spells exclusivity as a boolean beside minimum/maximum; later drafts as a number.
  auto exclusive_flag = [&](std::string_view k) {
    const json::value* v = o.if_contains(k);
    return v && v->is_bool() && v->get_bool();
  };
  if (const json::value* v = o.if_contains("minimum"))
    lo = std::max(lo, exclusive_flag("exclusiveMinimum") ? bound(*v, false, "minimum", path) + 1
                                                         : bound(*v, true, "minimum", path));
  if (const json::value* v = o.if_contains("maximum"))
    hi = std::min(hi, exclusive_flag("exclusiveMaximum") ? bound(*v, true, "maximum", path) - 1
                                                         : bound(*v, false, "maximum", path));
  if (const json::value* v = o.if_contains("exclusiveMinimum"); v && !v->is_bool())
    lo = std::max(lo, bound(*v, false, "exclusiveMinimum", path) + 1);
  if (const json::value* v = o.if_contains("exclusiveMaximum"); v && !v->is_bool())
    hi = std::min(hi, bound(*v, true, "exclusiveMaximum", path) - 1);
  if (lo > hi) return std::nullopt;
  std::vector<Frag> alts;
  if (lo < 0) {
    // -1 is the smallest magnitude of a negative integer.
    const int64_t near = hi < 0 ? -hi : 1, far = -lo;
    alts.push_back(seq({atom(gbnf_literal("-")), unsigned_range(near, far)}));
  }
  if (hi >= 0) alts.push_back(unsigned_range(std::max<int64_t>(lo, 0), hi));
  return alt(std::move(alts));
}

}  // namespace tandem::schema
