// The fixed rules every JSON grammar is built from: whitespace, strings, numbers, any value,
// and the string formats. JSON's own grammar (RFC 8259) with bounds that keep a sampling
// model from writing forever inside one token: whitespace runs, digit counts.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>

namespace tandem {

enum class JsonRule : uint8_t {
  ws,      // 0..20 of " \t\n\r": between any two tokens
  string,  // a whole JSON string, quotes included
  chr,     // one character of a string's content (raw or an escape)
  chr1,    // one code point of a string's content: chr but no \u escape of a surrogate
  number,
  integer,  // -?(0|[1-9][0-9]*), at most 16 digits
  boolean,
  null,
  value,   // any JSON value
  object,  // any JSON object
  array,   // any JSON array
  date,    // RFC 3339 full-date (content only, no quotes)
  year,    // of a date: 1000-9999
  leap_year,
  time,       // RFC 3339 full-time
  date_time,  // RFC 3339 date-time
  uuid,       // RFC 4122 textual form, either case
  count_
};

struct JsonRuleDef {
  std::string_view name;
  std::string_view body;
  std::span<const JsonRule> uses;  // the rules body refers to
};

const JsonRuleDef& json_rule(JsonRule r);

// The longest whitespace run between two tokens (the `ws` rule); the digit bounds.
inline constexpr int kJsonMaxWhitespace = 20;

}  // namespace tandem
