#include "engine/grammar/token_grammar.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

namespace tandem {
namespace {
// Masks kept per grammar: beyond this the cache starts over (a long free-form generation
// with ever new states would otherwise grow it without bound).
constexpr size_t kCacheBytes = size_t{64} << 20;
}  // namespace

TokenVocab::TokenVocab(std::vector<std::string> bytes, std::vector<bool> text, std::vector<int32_t> eog)
    : bytes_(std::move(bytes)), text_(std::move(text)), eog_(std::move(eog)) {
  text_.resize(bytes_.size(), false);
  std::sort(eog_.begin(), eog_.end());
  for (size_t i = 0; i < bytes_.size(); ++i)
    if (text_[i] && !bytes_[i].empty() && !is_eog(static_cast<int32_t>(i))) order_.push_back(static_cast<int32_t>(i));
  std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) {
    const auto& x = bytes_[static_cast<size_t>(a)];
    const auto& y = bytes_[static_cast<size_t>(b)];
    return x != y ? x < y : a < b;
  });
  lcp_.assign(order_.size(), 0);
  for (size_t i = 1; i < order_.size(); ++i) {
    const auto& x = bytes_[static_cast<size_t>(order_[i - 1])];
    const auto& y = bytes_[static_cast<size_t>(order_[i])];
    const size_t n = std::min(x.size(), y.size());
    size_t l = 0;
    while (l < n && x[l] == y[l]) ++l;
    lcp_[i] = static_cast<uint32_t>(l);
  }
  first_byte_begin_.assign(257, 0);
  size_t i = 0;
  for (int c = 0; c < 256; ++c) {
    first_byte_begin_[static_cast<size_t>(c)] = static_cast<uint32_t>(i);
    while (i < order_.size() && static_cast<uint8_t>(bytes_[static_cast<size_t>(order_[i])][0]) == c) ++i;
  }
  first_byte_begin_[256] = static_cast<uint32_t>(order_.size());
}

bool TokenVocab::is_eog(int32_t id) const { return std::binary_search(eog_.begin(), eog_.end(), id); }

TokenGrammar::TokenGrammar(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocab> v)
    : g_(std::move(g)), v_(std::move(v)) {}

std::string TokenGrammar::key_of(const GrammarState& s) {
  std::string k(s.stacks.size() * 4 + 6, '\0');
  std::memcpy(k.data(), s.stacks.data(), s.stacks.size() * 4);
  std::memcpy(k.data() + s.stacks.size() * 4, &s.utf8_acc, 4);
  k[k.size() - 2] = static_cast<char>(s.utf8_left);
  k.back() = static_cast<char>(s.utf8_len);
  return k;
}

uint32_t TokenGrammar::dfa_state(const GrammarState& s) const {
  auto [it, fresh] = dfa_ids_.try_emplace(key_of(s), static_cast<uint32_t>(dfa_states_.size()));
  if (fresh) {
    dfa_states_.push_back(s);
    dfa_next_.emplace_back(256, -2);
  }
  return it->second;
}

int32_t TokenGrammar::dfa_step(uint32_t from, uint8_t byte) const {
  int32_t& next = dfa_next_[from][byte];
  if (next != -2) return next;
  GrammarState t = dfa_states_[from];
  const char c = static_cast<char>(byte);
  g_->advance_in_place(t, std::string_view(&c, 1));
  const int32_t id = t.dead() ? kDead : static_cast<int32_t>(dfa_state(t));
  dfa_next_[from][byte] = id;  // (dfa_state may have grown dfa_next_: no reference kept)
  return id;
}

TokenMask TokenGrammar::compute(const GrammarState& s) const {
  const TokenVocab& v = *v_;
  TokenMask m((static_cast<size_t>(v.size()) + 63) / 64, 0);
  auto set = [&](int32_t id) { m[static_cast<size_t>(id) / 64] |= uint64_t{1} << (static_cast<size_t>(id) % 64); };
  if (Grammar::accepting(s))
    for (int32_t id : v.eog()) set(id);
  if (s.dead()) return m;
  // st[d]: the state after the first d bytes of the current token. Entries up to `valid`
  // belong to the previous token's prefix; the next token reuses min(lcp, valid) of them.
  // Tokens come in groups by first byte: a byte the grammar refuses skips its whole group
  // (most of the vocabulary, between the fields of a JSON document).
  std::lock_guard<std::mutex> lk(dfa_mu_);
  if (dfa_states_.size() > 100000) {  // a runaway automaton: start over rather than grow
    dfa_ids_.clear();
    dfa_states_.clear();
    dfa_next_.clear();
  }
  std::vector<int32_t> st(2, static_cast<int32_t>(dfa_state(s)));
  const auto& order = v.order();
  const auto& lcp = v.lcp();
  for (int c = 0; c < 256; ++c) {
    const uint32_t begin = v.first_byte_begin(c), end = v.first_byte_begin(c + 1);
    if (begin == end) continue;
    st[1] = dfa_step(static_cast<uint32_t>(st[0]), static_cast<uint8_t>(c));
    if (st[1] == kDead) continue;
    size_t valid = 1;
    for (uint32_t i = begin; i < end; ++i) {
      const std::string& b = v.bytes(order[i]);
      size_t d = i == begin ? 1 : std::max<size_t>(1, std::min<size_t>(lcp[i], valid));
      while (d < b.size() && st[d] != kDead) {
        if (st.size() < d + 2) st.resize(d + 2);
        st[d + 1] = dfa_step(static_cast<uint32_t>(st[d]), static_cast<uint8_t>(b[d]));
        ++d;
      }
      valid = d;
      if (d == b.size() && st[d] != kDead) set(order[i]);
    }
  }
  return m;
}

std::shared_ptr<const TokenMask> TokenGrammar::mask(const GrammarState& s) const {
  const std::string key = key_of(s);
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ++stats_.cache_hits;
      return it->second;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto m = std::make_shared<const TokenMask>(compute(s));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lk(mu_);
  ++stats_.masks_computed;
  stats_.compute_ms += ms;
  if ((cache_.size() + 1) * m->size() * sizeof(uint64_t) > kCacheBytes) cache_.clear();
  cache_.emplace(key, m);
  return m;
}

bool TokenGrammar::allows(const GrammarState& s, int32_t token) const { return mask_allows(*mask(s), token); }

GrammarState TokenGrammar::after(const GrammarState& s, int32_t token) const {
  if (token < 0 || token >= v_->size()) throw std::invalid_argument("grammar: token outside the vocabulary");
  if (v_->is_eog(token)) return s;
  GrammarState r = s;
  if (!v_->is_text(token)) {
    r.stacks.clear();
    return r;
  }
  g_->advance_in_place(r, v_->bytes(token));
  return r;
}

TokenGrammar::Stats TokenGrammar::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

}  // namespace tandem
