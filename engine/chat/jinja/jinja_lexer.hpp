// Splits a chat template into text and tag tokens, with Jinja's whitespace handling as
// Hugging Face configures it: trim_blocks and lstrip_blocks on, keep_trailing_newline off.
//
//   * `{%- ` / `{{- ` / `{#- ` strip all whitespace (newlines too) before the tag;
//     ` -%}` / ` -}}` / ` -#}` strip all whitespace after it.
//   * trim_blocks: the first newline after `%}` or `#}` is dropped (not after `}}`).
//   * lstrip_blocks: spaces and tabs between the start of a line and `{%` or `{#` are
//     dropped (not before `{{`). `{%+` turns lstrip off for one tag, `+%}` turns trimming off.
//   * every \r\n and \r becomes \n, and one trailing newline of the template is dropped.
//   * comments vanish; {% raw %}...{% endraw %} becomes text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::jinja {

enum class TokenType : uint8_t {
  Data,        // template text to output as is
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,        // identifier or keyword
  String,      // text = the decoded value
  Int,
  Float,
  Operator,    // text = the spelling: + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { } ;
  Eof,
};

struct Token {
  TokenType type;
  uint32_t pos;  // byte offset in the normalised source
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
};

// \r\n and \r -> \n; one trailing \n removed (Jinja's keep_trailing_newline=False).
std::string normalize_newlines(std::string_view source);
// Tokenizes a normalised template. Throws jinja::Error (with pos) on malformed input.
std::vector<Token> tokenize(std::string_view source);

// 1-based line and column (in characters) of byte offset `pos` in `source`.
struct LineCol {
  int line, column;
};
LineCol line_col(std::string_view source, size_t pos);

}  // namespace tandem::jinja
