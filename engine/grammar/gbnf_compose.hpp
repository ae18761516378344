// Putting GBNF grammars together: a grammar used inside another (a tool call's arguments,
// written by json_schema_to_gbnf, inside the tool-call wrapper) has its rule names prefixed
// so that they cannot clash with the outer grammar's.
#pragma once
#include <string>
#include <string_view>

namespace tandem {

// Every rule name of `gbnf` (definitions and references) with `prefix` in front; literals,
// character classes, repetition counts and comments are left as they are. `prefix` must be
// made of rule-name characters ([a-zA-Z0-9_-]). Its `root` becomes `<prefix>root`.
std::string gbnf_prefix_rules(std::string_view gbnf, std::string_view prefix);

// A GBNF string literal matching exactly `text` (UTF-8), quotes included.
std::string gbnf_quote(std::string_view text);

}  // namespace tandem
