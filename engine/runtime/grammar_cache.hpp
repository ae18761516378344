// The grammars of constrained requests (GenerateOptions::grammar), compiled once per text
// against the engine's vocabulary and kept for the requests that follow: a server sees the
// same JSON schema again and again, and each TokenGrammar holds the token masks it has
// already computed (engine/grammar/token_grammar.hpp).
#pragma once
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "engine/grammar/token_grammar.hpp"
#include "engine/text/tokenizer.hpp"

namespace tandem {

class GrammarCache {
 public:
  explicit GrammarCache(const Tokenizer& tok, size_t capacity = 32) : tok_(tok), capacity_(capacity) {}
  // The compiled grammar for a GBNF text (null for an empty text). Throws
  // std::invalid_argument (GrammarError) for a bad grammar. Thread-safe.
  std::shared_ptr<const TokenGrammar> get(const std::string& gbnf);

 private:
  std::shared_ptr<const TokenVocab> vocab();  // built on first use (a pass over the vocabulary)

  const Tokenizer& tok_;
  size_t capacity_;
  std::mutex mu_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::list<std::pair<std::string, std::shared_ptr<const TokenGrammar>>> lru_;  // most recent first
};

// The tokenizer's vocabulary as a grammar sees it: each token's bytes; control and unknown
// tokens are not text, and end-of-generation tokens end the output.
std::shared_ptr<const TokenVocab> grammar_vocab(const Tokenizer& tok);

}  // namespace tandem
