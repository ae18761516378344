// Numeric ranges (minimum, maximum, exclusiveMinimum, exclusiveMaximum). For "integer",
// exact: the decimal spellings of [lo, hi] as a grammar, digit position by digit position.
// For "number", a subset: numbers without exponent whose integer part lies in the range,
// with any fraction where the whole unit interval [I, I+1) fits, and at a bound that is not
// an integer only the integer inside (so minimum 0.5 offers 1, 1.5..., not 0.7).
#include <algorithm>
#include <cmath>
#include <limits>
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
  if (!v.is_double() || !std::isfinite(v.get_double())) fail("'" + std::string(keyword) + "' must be a number", path);
  const double d = up ? std::ceil(v.get_double()) : std::floor(v.get_double());
  if (d > static_cast<double>(kLimit)) return kLimit + 1;
  if (d < -static_cast<double>(kLimit)) return -kLimit - 1;
  return static_cast<int64_t>(d);
}

// A bound of a number range as a double (exactness is not needed: the pieces below are
// decided by integer parts, and only the converter's 16 digits are ever spelled).
double real_bound(const json::value& v, std::string_view keyword, const std::string& path) {
  if (v.is_int64()) return static_cast<double>(v.get_int64());
  if (v.is_uint64()) return static_cast<double>(v.get_uint64());
  if (!v.is_double() || !std::isfinite(v.get_double())) fail("'" + std::string(keyword) + "' must be a number", path);
  return v.get_double();
}

Frag fraction() { return atom(R"(( "." [0-9]{1,18} ))"); }

// The spellings (no sign, no exponent) of numbers y, 0 <= a <= y <= b (b may be infinite;
// either end exclusive), as far as the integer parts decide it; nullopt if none.
MaybeFrag unsigned_number(double a, bool a_excl, double b, bool b_excl) {
  constexpr double kTop = static_cast<double>(kLimit);
  if (a > kTop) return std::nullopt;
  if (b > kTop + 1) b = std::numeric_limits<double>::infinity();
  const bool a_int = a == std::floor(a);
  // The smallest integer part whose whole unit interval is in range, and the largest.
  const auto first = static_cast<int64_t>(a_int ? (a_excl ? a + 1 : a) : std::ceil(a));
  const int64_t last = std::isinf(b) ? kLimit : static_cast<int64_t>(std::floor(b)) - 1;
  std::vector<Frag> alts;
  if (first <= last) alts.push_back(seq({unsigned_range(first, last), opt(fraction())}));
  if (!std::isinf(b)) {
    // The integer part floor(b): that value itself (written with zeros after the point or not).
    const auto top = static_cast<int64_t>(std::floor(b));
    if (top >= first && !(b_excl && b == std::floor(b)))
      alts.push_back(seq({atom(gbnf_literal(std::to_string(top))), opt(atom(R"(( "." "0"{1,18} ))"))}));
  }
  // An exclusive integer lower bound: a itself with a fraction that is not zero.
  if (a_int && a_excl && (std::isinf(b) || a + 1 <= b))
    alts.push_back(seq(
        {atom(gbnf_literal(std::to_string(static_cast<int64_t>(a)))), atom(R"(( "." "0"{0,17} [1-9] [0-9]{0,17} ))")}));
  if (alts.empty()) return std::nullopt;
  return alt(std::move(alts));
}

}  // namespace

MaybeFrag Converter::number_range(const json::object& o, const std::string& path) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double lo = -kInf, hi = kInf;
  bool lo_excl = false, hi_excl = false;
  auto flag = [&](std::string_view k) {
    const json::value* v = o.if_contains(k);
    return v && v->is_bool() && v->get_bool();
  };
  // The tighter of minimum and a numeric exclusiveMinimum (and the same above).
  if (const json::value* v = o.if_contains("minimum"))
    lo = real_bound(*v, "minimum", path), lo_excl = flag("exclusiveMinimum");
  if (const json::value* v = o.if_contains("exclusiveMinimum"); v && !v->is_bool()) {
    const double x = real_bound(*v, "exclusiveMinimum", path);
    if (x >= lo) lo = x, lo_excl = true;
  }
  if (const json::value* v = o.if_contains("maximum"))
    hi = real_bound(*v, "maximum", path), hi_excl = flag("exclusiveMaximum");
  if (const json::value* v = o.if_contains("exclusiveMaximum"); v && !v->is_bool()) {
    const double x = real_bound(*v, "exclusiveMaximum", path);
    if (x <= hi) hi = x, hi_excl = true;
  }
  std::vector<Frag> alts;
  // x >= 0: [max(lo, 0), hi].
  if (hi > 0 || (hi == 0 && !hi_excl)) {
    if (MaybeFrag f = unsigned_number(lo < 0 ? 0 : lo, lo < 0 ? false : lo_excl, hi, hi_excl)) alts.push_back(*f);
  }
  // x < 0: -x in [max(-hi, 0), -lo], never 0 itself.
  if (lo < 0) {
    const double a = hi < 0 ? -hi : 0;
    if (MaybeFrag f = unsigned_number(a, hi < 0 ? hi_excl : true, -lo, lo_excl))
      alts.push_back(seq({atom(gbnf_literal("-")), *f}));
  }
  if (alts.empty()) return std::nullopt;
  return alt(std::move(alts));
}

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
