// Spelling text for GBNF and JSON: quoted literals, characters inside a class, the JSON
// spelling of a string. The output is ASCII whatever the input (code points above 0x7e are
// \u / \U escapes), so grammars print and log cleanly.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

// The code points of valid UTF-8 (the JSON parser has already rejected invalid input; an
// invalid byte here is taken as U+FFFD so that nothing reads out of bounds).
std::vector<char32_t> utf8_code_points(std::string_view utf8);

// A GBNF string literal matching exactly the UTF-8 text `utf8`: "\"a\\\\b\"" for "a\\b".
std::string gbnf_literal(std::string_view utf8);

// A GBNF literal of one code point.
std::string gbnf_literal(char32_t cp);

// One code point as written inside a GBNF character class ("a", "\\]", "\\x0a", "\\u00e9").
std::string gbnf_class_char(char32_t cp);

// The JSON spelling of a string, quotes included: ", \ and control characters escaped
// (\n, \t... or \u00XX), everything else as it is. The one spelling the grammar offers for
// keys, enum and const strings.
std::string json_string_spelling(std::string_view utf8);

}  // namespace tandem
