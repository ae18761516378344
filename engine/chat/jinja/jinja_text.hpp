// Python `str` semantics over UTF-8 bytes, for the chat-template interpreter.
//
// Templates index, slice, measure, strip, split and change the case of strings the way
// Python does: by code point, with Python's notion of whitespace (str.isspace) and
// Python's full case mappings (ß -> SS). Strings stay UTF-8 here; an ill-formed byte
// sequence (which a Python str cannot hold) counts as one character and is copied
// through unchanged, so no input byte is ever lost or rewritten.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::jinja::text {

// One character of a UTF-8 string: a code point, or one ill-formed piece (cp U+FFFD).
struct Char {
  char32_t cp;
  size_t pos, len;  // bytes
};
// The character starting at byte `pos` (< s.size()).
Char char_at(std::string_view s, size_t pos);
// Byte offset of every character, followed by s.size().
std::vector<size_t> char_offsets(std::string_view s);
size_t length(std::string_view s);  // in characters

bool is_space(char32_t cp);      // str.isspace()
bool is_cased(char32_t cp);      // islower() or isupper() or istitle()
bool is_printable(char32_t cp);  // str.isprintable()

// Python's slice rules (negative indices count from the end, out-of-range bounds clamp,
// step may be negative; step 0 is the caller's error): the selected indices.
std::vector<size_t> slice_indices(size_t len, std::optional<int64_t> start, std::optional<int64_t> stop,
                                  int64_t step);
std::string slice(std::string_view s, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step);

// str.strip / lstrip / rstrip; `chars` = nullopt strips whitespace.
std::string strip(std::string_view s, std::optional<std::string_view> chars, bool left, bool right);
// str.split / rsplit; `sep` = nullopt splits on runs of whitespace. maxsplit < 0: no limit.
// An empty separator is the caller's error.
std::vector<std::string> split(std::string_view s, std::optional<std::string_view> sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, std::optional<std::string_view> sep, int64_t maxsplit);
// str.splitlines() (without keepends): splits at \n, \r, \r\n, \v, \f, \x1c-\x1e,
// U+0085, U+2028, U+2029; no empty piece after a final line break.
std::vector<std::string> splitlines(std::string_view s);
// str.replace; count < 0: all. An empty `old` inserts `repl` around every character.
std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
int64_t find(std::string_view s, std::string_view sub);   // character index, -1 if absent
int64_t count(std::string_view s, std::string_view sub);  // non-overlapping occurrences

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);       // str.title()
std::string capitalize(std::string_view s);  // str.capitalize() (first char title-cased)
// Jinja's `title` filter: words split at runs of whitespace and -({[< , each word's first
// character upper-cased and the rest lower-cased.
std::string jinja_title(std::string_view s);
bool is_lower(std::string_view s);  // str.islower()
bool is_upper(std::string_view s);  // str.isupper()

// Python float() of a decimal literal (digits, optional fraction and exponent, no
// underscores): locale-independent; overflow gives +-inf and underflow +-0, as in Python.
double parse_float(std::string_view literal);
// Python repr() of a float: the shortest digits that round-trip, fixed notation for
// exponents -4..15, else "1e+16" style; "inf", "nan".
std::string float_repr(double v);
// Python repr() of a str: quotes chosen as Python chooses them, escapes for
// non-printable characters.
std::string str_repr(std::string_view s);

}  // namespace tandem::jinja::text
