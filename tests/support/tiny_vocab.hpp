// Small but genuine tokenizer vocabularies for fixture models, learned by byte-pair
// merging over a built-in English + code text, in the two layouts GGUF files use:
//  - "gpt2": byte-level BPE. 256 byte symbols (GPT-2's bytes_to_unicode alphabet), then
//    one token per learned merge (with `merges` as "left right" strings), then the
//    control tokens <|endoftext|>, <|im_start|>, <|im_end|>.
//  - "llama": SentencePiece-style. <unk>, <s>, </s>, the 256 byte-fallback tokens
//    <0x00>..<0xFF>, learned pieces ("▁" marks a preceding space) scored by merge rank,
//    then the most frequent single characters.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/text/tokenizer.hpp"

namespace tandem::test {

struct TinyVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;  // 1 normal, 2 unknown, 3 control, 6 byte
  std::vector<float> scores;         // llama only
  std::vector<std::string> merges;   // gpt2 only
  int32_t bos_id = -1, eos_id = -1, unk_id = -1;
};

// Exactly n_vocab tokens. Throws std::invalid_argument when n_vocab < 259 or larger
// than the built-in text can fill with genuine merges (about 1200 for gpt2, 1500 for
// llama).
TinyVocab build_gpt2_vocab(int n_vocab);
TinyVocab build_llama_vocab(int n_vocab);

// The vocabulary as Tokenizer::from_data takes it, for tests that build a tokenizer without
// a model file. model: "gpt2" or "llama" (the layout `v` was built in).
TokenizerData tokenizer_data(const TinyVocab& v, const std::string& model, const std::string& pre = "default");

// The text the merges are learned from (also handy as tokenizer test input).
const std::string& tiny_training_text();

// GPT-2's byte -> printable code point mapping, as a UTF-8 string per byte.
const std::vector<std::string>& gpt2_byte_symbols();

}  // namespace tandem::test
