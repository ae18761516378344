// Chat messages → prompt text, with the model's own chat template (GGUF key
// `tokenizer.chat_template`), or ChatML when the file has none. Used by `tandem serve`
// (/v1/chat/completions), `tandem chat` and the C API (tandem_chat_render/_tokenize, which
// the Python package's Engine.chat calls): one implementation, so all three build the same
// prompt. It lives here, in the API layer, because it needs both the chat templates and
// the Engine (its tokenizer).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/chat/chat_template.hpp"

namespace tandem {
class Engine;
}

namespace tandem {

class ChatPrompt {
 public:
  // Reads the template and the BOS/EOS token texts the template may print. Throws
  // std::runtime_error when the model's template cannot be parsed.
  static ChatPrompt from_model(const std::string& gguf_path, const Engine& engine);

  // The prompt for the assistant's next turn (add_generation_prompt = true). Throws
  // ChatTemplateError when the template rejects the conversation (e.g. roles that do not
  // alternate, a `raise_exception` in the template).
  std::string render(const std::vector<ChatMessage>& messages) const;
  // The same with the template's variables given as a JSON object, for conversations that
  // carry more than role and content (messages with tool_calls, `tools`): the caller sets
  // messages, tools, add_generation_prompt, bos_token and eos_token (bos_token()...).
  std::string render_json(std::string_view variables_json) const { return tmpl_.render_json(variables_json); }
  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }
  // Whether the template renders the `tools` variable itself (Qwen2.5's, Llama 3.1's...);
  // for one that does not, the caller describes the tools in a system message instead.
  bool renders_tools() const { return tmpl_.source().find("tools") != std::string::npos; }

  // Token ids of a rendered prompt. Control-token texts become control tokens; BOS is
  // prepended only when the model wants one and the template did not write it already.
  std::vector<int32_t> tokenize(const Engine& engine, const std::string& rendered) const;

  bool from_gguf() const { return from_gguf_; }  // false: the ChatML fallback

  // The largest prompt text the template may render (`serve --max-template-output`);
  // beyond it render() throws ChatTemplateError naming the limit.
  void set_max_output_bytes(size_t bytes) { tmpl_.set_max_output_bytes(bytes); }
  void set_template_limits(const ChatTemplate::Limits& l) { tmpl_.set_limits(l); }

 private:
  ChatPrompt(ChatTemplate t, std::string bos, std::string eos, int32_t add_bos_id, bool from_gguf)
      : tmpl_(std::move(t)), bos_(std::move(bos)), eos_(std::move(eos)), add_bos_id_(add_bos_id), from_gguf_(from_gguf) {}
  ChatTemplate tmpl_;
  std::string bos_, eos_;
  int32_t add_bos_id_ = -1;  // the token the tokenizer prepends with add_special, -1 if none
  bool from_gguf_ = false;
};

}  // namespace tandem
