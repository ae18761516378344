// UTF-8 decoding/encoding helpers shared by the tokenizer and streaming output.
//
// Ill-formed input is handled the way the Unicode standard recommends ("substitution of
// maximal subparts", Unicode 15 §3.9 / Table 3-7): each maximal prefix of a well-formed
// sequence, or each single byte that cannot start one, becomes one U+FFFD. This is also
// what Python's bytes.decode("utf-8", "replace") does, so tests can compare against it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tandem::utf8 {

inline constexpr char32_t kReplacement = 0xFFFD;

struct Decoded {
  enum class Status : uint8_t {
    Ok,         // a well-formed sequence of `len` bytes encoding `cp`
    Invalid,    // `len` bytes (>= 1) form a maximal ill-formed subpart; cp = U+FFFD
    Truncated,  // the remaining `len` bytes are a valid prefix cut off by the end of input
  };
  char32_t cp;
  uint32_t len;
  Status status;
};

// Decodes the sequence starting at s[pos]; pos must be < s.size().
Decoded decode_one(std::string_view s, size_t pos);

// Appends the UTF-8 encoding of `cp` (which must be a scalar value <= U+10FFFF).
void append(std::string& out, char32_t cp);

// True when the whole string is well-formed UTF-8.
bool is_valid(std::string_view s);

// Copy of `s` with every ill-formed subpart (including a truncated tail) replaced by U+FFFD.
std::string sanitize(std::string_view s);

}  // namespace tandem::utf8
