// tokenizer.json (+ tokenizer_config.json, generation_config.json, chat_template.jinja) of a
// Hugging Face model folder → the `tokenizer.*` GGUF metadata the engine's tokenizer and chat
// template read. Two kinds of `tokenizers` BPE model are honoured:
//   * byte-level BPE (Qwen2, Llama 3, SmolLM2, GPT-2): a ByteLevel pre-tokenizer, alone or
//     after the Split regex or Digits step of a known pre-tokenizer, merges by rank, optional
//     NFC normalizer;
//   * SentencePiece-style BPE (Gemma, Llama 2): spaces replaced by U+2581 (and one prepended
//     when the normalizer says so), byte fallback; merge ranks become piece scores.
// Anything else (WordPiece, Unigram, an unknown regex, added tokens that strip whitespace) is
// refused with what it is, so that a folder never tokenizes differently from its own library.
#pragma once
#include <string>

#include "engine/gguf/gguf_writer.hpp"

namespace tandem::hf {

// Reads the folder's tokenizer files and sets the keys on `w`. Throws std::runtime_error
// naming the file and the problem.
void write_tokenizer_metadata(const std::string& dir, gguf::Writer& w);

}  // namespace tandem::hf
