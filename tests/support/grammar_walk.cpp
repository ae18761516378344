#include "tests/support/grammar_walk.hpp"

#include <algorithm>

namespace tandem::test {

std::optional<std::string> random_sentence(const Grammar& g, uint64_t seed, int max_bytes) {
  static const std::string kAlphabet = [] {
    std::string a = "\n\t\r\x01\xc3\xa9";
    for (char c = 0x20; c < 0x7f; ++c) a += c;
    return a;
  }();
  GrammarState s = g.initial();
  std::string text;
  for (int step = 0; step < max_bytes; ++step) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;  // a 64-bit LCG step
    const bool late = step > max_bytes / 2;
    if (Grammar::accepting(s) && (Grammar::complete(s) || (seed >> 62) == 0 || late)) return text;
    std::string order = kAlphabet;
    std::rotate(order.begin(), order.begin() + static_cast<long>((seed >> 33) % order.size()), order.end());
    if (late) order = "\"]}0" + order;
    bool moved = false;
    for (char c : order) {
      GrammarState next = g.advance(s, static_cast<uint8_t>(c));
      if (next.dead()) continue;
      s = std::move(next);
      text += c;
      moved = true;
      break;
    }
    if (!moved) return std::nullopt;  // no byte tried continues (inside a \u escape, say)
  }
  return Grammar::accepting(s) ? std::optional<std::string>(text) : std::nullopt;
}

}  // namespace tandem::test
