#include "engine/api/chat_prompt.hpp"

#include <stdexcept>

#include "engine/gguf/gguf.hpp"
#include "engine/hf/model_file.hpp"
#include "tandem/engine.hpp"

namespace tandem {
namespace {

// The text of a special token named by a GGUF id key, "" when absent or out of range.
std::string special_text(const gguf::File& f, const char* key, const Engine& engine) {
  const std::optional<int64_t> id = f.get_int(key);
  if (!id || *id < 0 || *id >= engine.info().n_vocab) return {};
  const int32_t tok = static_cast<int32_t>(*id);
  return engine.detokenize(std::span<const int32_t>(&tok, 1));
}

}  // namespace

ChatPrompt ChatPrompt::from_model(const std::string& gguf_path, const Engine& engine) {
  const std::unique_ptr<gguf::File> f = open_model_file(gguf_path, /*tensors=*/false);
  std::string bos = special_text(*f, "tokenizer.ggml.bos_token_id", engine);
  std::string eos = special_text(*f, "tokenizer.ggml.eos_token_id", engine);
  // What the tokenizer puts in front of a text when asked to add special tokens (BOS), as
  // opposed to what it may append (EOS).
  const std::vector<int32_t> with = engine.tokenize("a", /*add_special=*/true, /*parse_special=*/false);
  const std::vector<int32_t> without = engine.tokenize("a", /*add_special=*/false, /*parse_special=*/false);
  const int32_t add_bos_id =
      with.size() > without.size() && (without.empty() || with.front() != without.front()) ? with.front() : -1;
  const std::optional<std::string> source = f->get_string("tokenizer.chat_template");
  if (!source || source->empty()) return ChatPrompt(chatml_template(), std::move(bos), std::move(eos), add_bos_id, false);
  try {
    return ChatPrompt(ChatTemplate::parse(*source), std::move(bos), std::move(eos), add_bos_id, true);
  } catch (const ChatTemplateError& e) {
    throw std::runtime_error(gguf_path + ": tokenizer.chat_template cannot be parsed: " + e.what());
  }
}

std::string ChatPrompt::render(const std::vector<ChatMessage>& messages) const {
  return tmpl_.render(messages, /*add_generation_prompt=*/true, bos_, eos_);
}

std::vector<int32_t> ChatPrompt::tokenize(const Engine& engine, const std::string& rendered) const {
  // Templates such as Llama 3's and Gemma's write BOS themselves; adding it again would
  // give the model a doubled BOS it never saw in training.
  std::vector<int32_t> ids = engine.tokenize(rendered, /*add_special=*/false, /*parse_special=*/true);
  if (add_bos_id_ >= 0 && (ids.empty() || ids.front() != add_bos_id_)) ids.insert(ids.begin(), add_bos_id_);
  return ids;
}

}  // namespace tandem
