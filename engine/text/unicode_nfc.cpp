#include "engine/text/unicode_nfc.hpp"

#include <algorithm>
#include <vector>

#include "engine/text/unicode_nfc_tables.hpp"
#include "engine/text/utf8.hpp"

namespace tandem::utf8 {
namespace {

using namespace nfc_data;

// Hangul syllables compose and decompose by arithmetic (Unicode §3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t ccc(char32_t cp) {
  if (cp < 0x300) return 0;
  const CombiningRange* end = kCombining + kCombiningCount;
  const CombiningRange* it =
      std::upper_bound(kCombining, end, cp, [](char32_t c, const CombiningRange& r) { return c < r.first; });
  if (it == kCombining) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* end = kDecompositions + kDecompositionCount;
  const Decomposition* it =
      std::lower_bound(kDecompositions, end, cp, [](const Decomposition& d, char32_t c) { return d.cp < c; });
  if (it != end && it->cp == cp) {
    out.insert(out.end(), kDecompositionPool + it->offset, kDecompositionPool + it->offset + it->length);
  } else {
    out.push_back(cp);
  }
}

// The primary composite of (a, b), or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const Composition* end = kCompositions + kCompositionCount;
  const Composition* it = std::lower_bound(kCompositions, end, std::pair<char32_t, char32_t>(a, b),
                                           [](const Composition& c, const std::pair<char32_t, char32_t>& k) {
                                             return c.first < k.first || (c.first == k.first && c.second < k.second);
                                           });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace

std::string nfc(std::string_view s) {
  if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) return std::string(s);
  // 1. Full canonical decomposition.
  std::vector<char32_t> cps;
  cps.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const Decoded d = decode_one(s, i);
    decompose(d.cp, cps);
    i += d.len;
  }
  // 2. Canonical ordering: each run of non-starters sorted by class, stably.
  for (size_t i = 0; i < cps.size();) {
    if (ccc(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j),
                     [](char32_t a, char32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }
  // 3. Canonical composition: a character joins the last starter unless blocked, i.e. unless
  // a character between them has class zero or a class not lower than its own.
  std::vector<char32_t> out;
  out.reserve(cps.size());
  size_t starter = SIZE_MAX;
  int last_class = 256;  // of the last character kept; 0 right after the starter itself
  for (const char32_t c : cps) {
    const int cc = ccc(c);
    if (starter != SIZE_MAX && (last_class < cc || last_class == 0))
      if (const char32_t comp = compose(out[starter], c)) {
        out[starter] = comp;
        continue;
      }
    if (cc == 0) starter = out.size();
    last_class = cc;
    out.push_back(c);
  }
  std::string r;
  r.reserve(s.size());
  for (const char32_t c : out) append(r, c);
  return r;
}

}  // namespace tandem::utf8
