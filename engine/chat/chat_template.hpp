// Chat templates: turning a conversation into the prompt text a model was trained on.
//
// A GGUF model carries its template as `tokenizer.chat_template`, a Jinja2 template
// written for Hugging Face transformers' apply_chat_template. ChatTemplate interprets
// the subset of Jinja that chat templates use (jinja_*.cpp) and renders it the way
// transformers does: trim_blocks and lstrip_blocks on, Python semantics for values
// (str methods, int/float formatting, dict order), transformers' tojson,
// raise_exception and strftime_now, and the variables messages, add_generation_prompt,
// bos_token, eos_token, tools=None and documents=None.
//
// Anything outside the subset is rejected when the template is parsed, with the line and
// column of the construct, so a template either renders as transformers would or fails
// loudly at load time.
//
// The subset:
//   {{ }}, {% %}, {# #}, whitespace control {%- -%} {{- -}} {#- -#} {%+ +%}, {% raw %}
//   if/elif/else; for (loop.index/index0/revindex/revindex0/first/last/length/
//     previtem/nextitem/cycle, for-else, `for x in xs if cond`, unpacking `for k, v in`),
//     break/continue; set (incl. `ns.attr`, unpacking, {% set x %}...{% endset %});
//     macro (positional/keyword arguments, defaults); {% generation %} (transformers')
//   literals (str with Python escapes, int, float, bool, none, list, tuple, dict);
//     .attr, [item], [a:b:c]; calls; + - * / // % ** ~, comparisons (chained), in,
//     not in, and/or/not, `a if c else b`, `is [not] test`
//   filters: abs capitalize count d default dictsort e escape first float indent int
//     items join last length list lower map max min reject rejectattr replace reverse
//     safe select selectattr sort string sum title tojson trim unique upper
//   tests: defined undefined none boolean true false integer float number string
//     mapping iterable sequence callable eq/equalto ne lt/lessthan le gt/greaterthan ge
//     in sameas odd even divisibleby lower upper
//   str methods: strip lstrip rstrip split rsplit splitlines startswith endswith lower
//     upper title capitalize replace find count join; dict: items keys values get
//   globals: raise_exception namespace range dict strftime_now
// Not supported (parse error): include/extends/import/block/call/filter/with/do,
// recursive loops, *args/**kwargs, caller/varargs/kwargs in macros, other filters,
// tests and methods, lipsum/cycler/joiner. Differences that remain: integers are 64-bit
// (overflow is an error); '%' string formatting is an error; map/select/... return lists
// where Jinja returns generators (same under |list, |join, iteration); slicing a constant
// non-sequence is an error where Jinja's constant folding yields Undefined.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

namespace gguf {
class File;
}
namespace jinja::ast {
struct Template;
}

struct ChatMessage {
  std::string role, content;
};

class ChatTemplateError : public std::runtime_error {
 public:
  // line/column are 1-based (column in characters); 0 when no position applies.
  ChatTemplateError(int line, int column, const std::string& message, bool raised_by_template);
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& message() const { return message_; }  // without the position
  // True for raise_exception(...) called by the template (e.g. "roles must alternate"):
  // message() is then exactly the template's text, meant for the user.
  bool raised_by_template() const { return raised_; }

 private:
  int line_, column_;
  std::string message_;
  bool raised_;
};

class ChatTemplate {
 public:
  // Parses the template once. Throws ChatTemplateError for anything unsupported or
  // malformed, naming the construct and its line:column.
  static ChatTemplate parse(std::string_view source);
  // The model's `tokenizer.chat_template`, or nullopt when it has none (the caller then
  // picks a fallback such as chatml_template()). Throws ChatTemplateError as parse does.
  static std::optional<ChatTemplate> from_gguf(const gguf::File& file);

  // Renders with the variables transformers passes. Throws ChatTemplateError on runtime
  // errors (raise_exception, type errors, using an undefined value beyond printing or
  // testing it, limits exceeded). Thread-safe: each call has its own interpreter state.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const std::string& bos_token, const std::string& eos_token) const;
  // Renders with variables given as a JSON object, for conversations that carry more
  // than role and content (tool calls, tools, extra flags such as enable_thinking).
  // tools and documents default to null and add_generation_prompt to false, as in
  // transformers.
  std::string render_json(std::string_view variables_json) const;

  const std::string& source() const { return source_; }

  // What one render may spend; a render that would spend more fails with a
  // ChatTemplateError naming the limit, so templates cannot hang or exhaust memory. The
  // defaults (64 MiB of output, its cap; 10 million loop iterations; 1 GiB of strings and
  // list slots built) end a runaway template in about a second in a release build; lower
  // them where a second is too long (an instrumented fuzz build is 50 times slower).
  // Nested calls are limited to 1000 whatever the limits.
  struct Limits {
    size_t max_output_bytes;
    uint64_t max_loop_iterations;  // loop iterations and built-in item work
    uint64_t max_work_bytes;
  };
  void set_limits(const Limits& limits);
  const Limits& limits() const { return limits_; }
  static Limits default_limits();
  // The output limit alone (the server's --max-template-output).
  void set_max_output_bytes(size_t bytes);
  size_t max_output_bytes() const { return limits_.max_output_bytes; }
  static size_t default_max_output_bytes();

 private:
  ChatTemplate() = default;  // only parse() makes one
  std::shared_ptr<const jinja::ast::Template> tpl_;
  std::string source_;
  Limits limits_ = default_limits();
};

// The fallback for models without a template: ChatML,
// <|im_start|>{role}\n{content}<|im_end|>\n per message, then <|im_start|>assistant\n
// when add_generation_prompt.
ChatTemplate chatml_template();

}  // namespace tandem
