// TokenIndex: text -> id lookup over the vocabulary strings (see tokenizer_internal.hpp).
#include <algorithm>
#include <bit>
#include <functional>

#include "engine/text/tokenizer_internal.hpp"

namespace tandem::tok_detail {

namespace {
uint64_t hash_text(std::string_view s) { return std::hash<std::string_view>{}(s); }
}  // namespace

void TokenIndex::build(const std::vector<std::string>& tokens) {
  tokens_ = &tokens;
  // Load factor <= 1/2 keeps linear-probe runs short.
  const size_t cap = std::bit_ceil(std::max<size_t>(16, tokens.size() * 2));
  slots_.assign(cap, Slot{0, -1});
  mask_ = cap - 1;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (find(tokens[i]) >= 0) continue;  // duplicate text: keep the first id
    const uint64_t h = hash_text(tokens[i]);
    size_t pos = h & mask_;
    while (slots_[pos].id >= 0) pos = (pos + 1) & mask_;
    slots_[pos] = Slot{static_cast<uint32_t>(h >> 32), static_cast<int32_t>(i)};
  }
}

int32_t TokenIndex::find(std::string_view text) const {
  if (slots_.empty()) return -1;
  const uint64_t h = hash_text(text);
  const auto tag = static_cast<uint32_t>(h >> 32);
  for (size_t pos = h & mask_;; pos = (pos + 1) & mask_) {
    const Slot& s = slots_[pos];
    if (s.id < 0) return -1;
    if (s.tag == tag && (*tokens_)[static_cast<size_t>(s.id)] == text) return s.id;
  }
}

}  // namespace tandem::tok_detail
