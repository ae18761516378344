// Can this draft serve this target? Speculation is only lossless when both models speak
// the same token ids: same tokenizer type and pre-tokenizer, the same text for every id
// they share, the same special tokens. Vocabularies may differ only by a few trailing
// entries (padding or extra control tokens), as llama.cpp also allows.
#pragma once
#include <string>

namespace tandem {

class Tokenizer;

// Largest allowed difference in vocabulary size (trailing ids only one model has).
constexpr int kMaxVocabSizeDifference = 128;

// Empty when compatible; otherwise a message naming the first difference.
std::string vocab_incompatibility(const Tokenizer& target, const Tokenizer& draft);

}  // namespace tandem
