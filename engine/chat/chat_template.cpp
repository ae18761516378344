#include "engine/chat/chat_template.hpp"

#include <algorithm>

#include "engine/gguf/gguf.hpp"
#include "engine/chat/jinja/jinja_interp.hpp"
#include "engine/chat/jinja/jinja_json.hpp"
#include "engine/chat/jinja/jinja_lexer.hpp"
#include "engine/chat/jinja/jinja_parser.hpp"

namespace tandem {

namespace {

std::string describe(int line, int column, const std::string& message, bool raised) {
  std::string where = line > 0 ? std::to_string(line) + ":" + std::to_string(column) + ": " : std::string();
  return "chat template " + where + (raised ? "raise_exception: " : "") + message;
}

ChatTemplateError to_error(const jinja::Error& e, std::string_view normalized_source) {
  if (e.pos == jinja::Error::kNoPos) return ChatTemplateError(0, 0, e.what(), e.raised_by_template);
  const jinja::LineCol lc = jinja::line_col(normalized_source, e.pos);
  return ChatTemplateError(lc.line, lc.column, e.what(), e.raised_by_template);
}

// Runs the interpreter; every failure but running out of memory becomes a
// ChatTemplateError, so callers have one exception type to handle.
std::string run(const jinja::ast::Template& tpl, const jinja::Dict& vars, const ChatTemplate::Limits& l) {
  try {
    return jinja::Interpreter(tpl, {l.max_output_bytes, l.max_loop_iterations, l.max_work_bytes}).render(vars);
  } catch (const jinja::Error& e) {
    throw to_error(e, tpl.source);
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    throw ChatTemplateError(0, 0, std::string("internal error: ") + e.what(), false);
  }
}

// Plain ChatML; the whitespace control keeps the template's own newlines out of the output.
constexpr std::string_view kChatML =
    "{%- for message in messages -%}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "{{- '<|im_start|>assistant\\n' -}}\n"
    "{%- endif -%}\n";

}  // namespace

ChatTemplateError::ChatTemplateError(int line, int column, const std::string& message, bool raised_by_template)
    : std::runtime_error(describe(line, column, message, raised_by_template)),
      line_(line),
      column_(column),
      message_(message),
      raised_(raised_by_template) {}

ChatTemplate ChatTemplate::parse(std::string_view source) {
  ChatTemplate t;
  t.source_ = std::string(source);
  try {
    t.tpl_ = jinja::parse(source);
  } catch (const jinja::Error& e) {
    throw to_error(e, jinja::normalize_newlines(source));
  }
  return t;
}

void ChatTemplate::set_limits(const Limits& l) {
  limits_ = l;
  limits_.max_output_bytes = std::min(l.max_output_bytes, jinja::kMaxStringBytes);
}

ChatTemplate::Limits ChatTemplate::default_limits() {
  const jinja::Limits d;
  return {d.max_output, d.max_iterations, d.max_work_bytes};
}

void ChatTemplate::set_max_output_bytes(size_t bytes) {
  Limits l = limits_;
  l.max_output_bytes = bytes;
  set_limits(l);
}

size_t ChatTemplate::default_max_output_bytes() { return default_limits().max_output_bytes; }

std::optional<ChatTemplate> ChatTemplate::from_gguf(const gguf::File& file) {
  const std::optional<std::string> s = file.get_string("tokenizer.chat_template");
  if (!s) return std::nullopt;
  return parse(*s);
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 const std::string& bos_token, const std::string& eos_token) const {
  using jinja::Value;
  std::vector<Value> list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    jinja::Dict d;
    d.set(Value::string("role"), Value::string(m.role));
    d.set(Value::string("content"), Value::string(m.content));
    list.push_back(Value::dict(std::move(d)));
  }
  jinja::Dict vars;
  vars.set(Value::string("messages"), Value::list(std::move(list)));
  vars.set(Value::string("tools"), Value::none());
  vars.set(Value::string("documents"), Value::none());
  vars.set(Value::string("add_generation_prompt"), Value::boolean(add_generation_prompt));
  vars.set(Value::string("bos_token"), Value::string(bos_token));
  vars.set(Value::string("eos_token"), Value::string(eos_token));
  return run(*tpl_, vars, limits_);
}

std::string ChatTemplate::render_json(std::string_view variables_json) const {
  using jinja::Value;
  Value parsed;
  try {
    parsed = jinja::parse_json(variables_json);
  } catch (const jinja::Error& e) {
    throw ChatTemplateError(0, 0, std::string("variables: ") + e.what(), false);
  }
  if (parsed.kind() != Value::Kind::Dict) throw ChatTemplateError(0, 0, "variables: expected a JSON object", false);
  jinja::Dict vars;
  vars.set(Value::string("tools"), Value::none());
  vars.set(Value::string("documents"), Value::none());
  vars.set(Value::string("add_generation_prompt"), Value::boolean(false));
  for (const auto& [k, v] : parsed.dict().entries) vars.set(k, v);
  return run(*tpl_, vars, limits_);
}

ChatTemplate chatml_template() { return ChatTemplate::parse(kChatML); }

}  // namespace tandem
