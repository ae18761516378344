// Parses a chat template (Jinja syntax) into the tree of jinja_ast.hpp.
//
// The grammar and operator precedence are Jinja's (loosest first): `x if c else y`,
// or, and, not, comparisons and in / not in, + -, ~, * / // %, **, unary - +, then
// postfix .attr [index] [a:b:c] (call) and the filter/test chain | f and `is t`.
// (So `-2 ** 2` is 4 and `'a' ~ 1 + 2` is ('a' ~ 1) + 2, as in Jinja.)
//
// Everything outside the supported subset is rejected here, with its position: unknown
// or unsupported statements, filters, tests, methods and globals, *args/**kwargs, and
// constructs nested deeper than the interpreter's stack allows.
#pragma once

#include <memory>
#include <string_view>

#include "engine/chat/jinja/jinja_ast.hpp"

namespace tandem::jinja {

// `source` is the raw template; it is normalised (newlines) first. Throws jinja::Error.
std::unique_ptr<ast::Template> parse(std::string_view source);

}  // namespace tandem::jinja
