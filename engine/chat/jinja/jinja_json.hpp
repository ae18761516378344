// JSON in and out of template values.
//
// Output is Hugging Face's `tojson` filter, which is Python's json.dumps: ", " and ": "
// separators (or "," and ": " with an indent), non-ASCII kept as UTF-8 unless
// ensure_ascii, no HTML escaping (Jinja's own tojson escapes <>&'; transformers
// replaces it), floats as Python's repr, NaN/Infinity spelled as Python spells them.
// Input parses variables handed to a template (messages with tool calls, tools, ...).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "engine/chat/jinja/jinja_value.hpp"

namespace tandem::jinja {

struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: one line
  std::optional<std::string> item_separator, key_separator;  // nullopt: json.dumps' defaults
  bool sort_keys = false;
};

// Throws Error for values JSON cannot hold (Undefined, namespaces, functions).
std::string to_json(const Value& v, const JsonOptions& options = {});
// Strict JSON (RFC 8259, through Boost.JSON's parser; unlike Python's json.loads, no NaN or
// Infinity); integers without fraction or exponent become Int, floats are rounded as
// Python's float() rounds them. Throws Error naming the byte offset.
Value parse_json(std::string_view text);

}  // namespace tandem::jinja
