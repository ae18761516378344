// Matching special-token texts (control and user-defined tokens) in raw text.
#include "engine/text/tokenizer_internal.hpp"

namespace tandem::tok_detail {

int32_t SpecialMatcher::child(int32_t node, uint8_t b) const {
  auto it = edges_.find((static_cast<uint64_t>(node) << 8) | b);
  return it == edges_.end() ? -1 : it->second;
}

void SpecialMatcher::add(std::string_view text, int32_t id, bool control) {
  if (text.empty()) return;
  int32_t node = 0;
  for (unsigned char b : text) {
    int32_t next = child(node, b);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.push_back(Node{});
      edges_.emplace((static_cast<uint64_t>(node) << 8) | b, next);
    }
    node = next;
  }
  // Duplicate texts: the first id wins, like the text -> id map; but a user-defined
  // duplicate must stay matchable even when a control token has the same text.
  Node& n = nodes_[static_cast<size_t>(node)];
  if (n.id < 0 || (n.control && !control)) n = Node{id, control};
  first_byte_[static_cast<unsigned char>(text[0])] = true;
}

void SpecialMatcher::split(std::string_view text, bool parse_special,
                           std::vector<Piece>& out) const {
  size_t raw_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    const auto b0 = static_cast<unsigned char>(text[i]);
    int32_t best_id = -1;
    size_t best_len = 0;
    if (first_byte_[b0]) {
      int32_t node = 0;
      for (size_t j = i; j < text.size(); ++j) {
        node = child(node, static_cast<unsigned char>(text[j]));
        if (node < 0) break;
        const Node& n = nodes_[static_cast<size_t>(node)];
        if (n.id >= 0 && (parse_special || !n.control)) {
          best_id = n.id;
          best_len = j + 1 - i;
        }
      }
    }
    if (best_id < 0) {
      ++i;
      continue;
    }
    if (i > raw_start) out.push_back({-1, text.substr(raw_start, i - raw_start)});
    out.push_back({best_id, text.substr(i, best_len)});
    i += best_len;
    raw_start = i;
  }
  if (raw_start < text.size()) out.push_back({-1, text.substr(raw_start)});
}

}  // namespace tandem::tok_detail
