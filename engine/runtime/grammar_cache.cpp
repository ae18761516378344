#include "engine/runtime/grammar_cache.hpp"

namespace tandem {

std::shared_ptr<const TokenVocab> grammar_vocab(const Tokenizer& tok) {
  const int32_t n = tok.n_vocab();
  std::vector<std::string> bytes(static_cast<size_t>(n));
  std::vector<bool> text(static_cast<size_t>(n), false);
  std::vector<int32_t> eog;
  for (int32_t id = 0; id < n; ++id) {
    if (tok.is_eog(id)) {
      eog.push_back(id);
      continue;
    }
    const TokenType t = tok.token_type(id);
    if (t == TokenType::Control || t == TokenType::Unknown) continue;
    bytes[static_cast<size_t>(id)] = tok.token_to_piece(id);
    text[static_cast<size_t>(id)] = true;
  }
  return std::make_shared<const TokenVocab>(std::move(bytes), std::move(text), std::move(eog));
}

std::shared_ptr<const TokenVocab> GrammarCache::vocab() {
  if (!vocab_) vocab_ = grammar_vocab(tok_);
  return vocab_;
}

std::shared_ptr<const TokenGrammar> GrammarCache::get(const std::string& gbnf) {
  if (gbnf.empty()) return nullptr;
  std::lock_guard<std::mutex> lk(mu_);
  for (auto it = lru_.begin(); it != lru_.end(); ++it)
    if (it->first == gbnf) {
      lru_.splice(lru_.begin(), lru_, it);
      return lru_.front().second;
    }
  auto g = std::make_shared<const TokenGrammar>(Grammar::parse(gbnf), vocab());
  lru_.emplace_front(gbnf, g);
  if (lru_.size() > capacity_) lru_.pop_back();
  return g;
}

}  // namespace tandem
