// Unicode data for the Python string methods that chat templates call (upper, lower,
// title, capitalize, repr). The tables are generated from Python's own `str` methods
// (tests/python/chat_template_ref.py unicode-tables) so that the results agree with the
// reference renderer code point for code point.
#pragma once

#include <cstdint>
#include <span>

namespace tandem::jinja::tables {

// Code points first, first+stride, ..., last map to code point + delta.
struct CaseRun {
  uint32_t first, last;
  int32_t delta;
  uint32_t stride;
};
// A code point whose mapping is several code points (e.g. U+00DF -> "SS").
struct CaseSpecial {
  uint32_t cp;
  const char* utf8;
};
struct CaseTable {
  std::span<const CaseRun> runs;         // sorted, non-overlapping
  std::span<const CaseSpecial> special;  // sorted by cp
};
struct CodeRange {
  uint32_t first, last;  // inclusive
};

extern const CaseTable kUpper;
extern const CaseTable kLower;
extern const CaseTable kTitle;  // only where title case differs from upper case
extern const std::span<const CodeRange> kCasedRanges;
extern const std::span<const CodeRange> kNonPrintableRanges;

}  // namespace tandem::jinja::tables
