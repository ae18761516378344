// A grammar over a model's tokens: which tokens may come next in a state (a bit mask over the
// vocabulary, applied to the target's and the draft's logits before sampling), and the state
// after a token. This is what constrained decoding and its speculative checks consume.
//
// A mask is found by walking the vocabulary in byte order: tokens sharing a prefix share the
// automaton's work on it, and a prefix the grammar rejects skips every token below it. Masks
// are cached by state, so the states a document passes through again and again (inside a
// string, between fields) cost one walk each; the cache lives as long as the TokenGrammar,
// which the engine keeps per grammar text, so later requests with the same schema reuse it.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/grammar/grammar.hpp"

namespace tandem {

// The bytes each token adds to the text, ready for mask walks. Tokens that are not text
// (control and unknown tokens, ids past the vocabulary) are never allowed; end-of-generation
// tokens are allowed exactly where the grammar may end.
class TokenVocab {
 public:
  // bytes[i]: token i's text bytes; text[i]: whether token i is text a grammar may produce;
  // eog: the end-of-generation ids.
  TokenVocab(std::vector<std::string> bytes, std::vector<bool> text, std::vector<int32_t> eog);
  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  bool is_text(int32_t id) const { return text_[static_cast<size_t>(id)]; }
  bool is_eog(int32_t id) const;
  const std::vector<int32_t>& eog() const { return eog_; }
  // Text tokens sorted by their bytes, and each one's common prefix length with the one
  // before it (the order of a trie walk, without building the trie).
  const std::vector<int32_t>& order() const { return order_; }
  const std::vector<uint32_t>& lcp() const { return lcp_; }
  // order()[first_byte_begin(c) .. first_byte_begin(c + 1)) are the tokens starting with byte c.
  uint32_t first_byte_begin(int c) const { return first_byte_begin_[static_cast<size_t>(c)]; }

 private:
  std::vector<std::string> bytes_;
  std::vector<bool> text_;
  std::vector<int32_t> eog_, order_;
  std::vector<uint32_t> lcp_;
  std::vector<uint32_t> first_byte_begin_;  // 257 entries
};

using TokenMask = std::vector<uint64_t>;  // bit i set: token i allowed

class TokenGrammar {
 public:
  TokenGrammar(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocab> v);

  GrammarState initial() const { return g_->initial(); }
  // The tokens allowed next (cached; thread-safe).
  std::shared_ptr<const TokenMask> mask(const GrammarState& s) const;
  bool allows(const GrammarState& s, int32_t token) const;
  // The state after an allowed token (end-of-generation tokens leave it as it is).
  GrammarState after(const GrammarState& s, int32_t token) const;
  // Nothing may follow: the output is a whole sentence and can only end here.
  static bool complete(const GrammarState& s) { return Grammar::complete(s); }
  const Grammar& grammar() const { return *g_; }
  const TokenVocab& vocab() const { return *v_; }

  struct Stats {
    int64_t masks_computed = 0, cache_hits = 0;
    double compute_ms = 0.0;
  };
  Stats stats() const;

 private:
  TokenMask compute(const GrammarState& s) const;
  static std::string key_of(const GrammarState& s);
  // The byte-level automaton, memoised: states numbered as met, and each one's successor per
  // byte found once (-1: not yet). Walking the vocabulary then mostly looks transitions up
  // (inside a JSON string every character leads back to the same state). Under dfa_mu_.
  uint32_t dfa_state(const GrammarState& s) const;
  int32_t dfa_step(uint32_t from, uint8_t byte) const;  // kDead when the byte is refused
  static constexpr int32_t kDead = -1;

  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const TokenVocab> v_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const TokenMask>> cache_;
  mutable Stats stats_;
  mutable std::mutex dfa_mu_;
  mutable std::unordered_map<std::string, uint32_t> dfa_ids_;
  mutable std::vector<GrammarState> dfa_states_;
  mutable std::vector<std::vector<int32_t>> dfa_next_;  // [state][byte]; -2: not computed
};

// Whether bit `id` of a mask is set (ids past it are not).
inline bool mask_allows(std::span<const uint64_t> m, int32_t id) {
  const auto i = static_cast<size_t>(id);
  return id >= 0 && i / 64 < m.size() && ((m[i / 64] >> (i % 64)) & 1u) != 0;
}

}  // namespace tandem
