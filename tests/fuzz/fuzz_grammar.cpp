// GBNF grammars (engine/grammar/): arbitrary grammar texts, then arbitrary text run through
// the automaton and token masks over a small vocabulary. A grammar is refused with a
// GrammarError or parses; the automaton then never crashes or loops, fails only with its
// documented runtime_error (too ambiguous, too deep), and its masks agree with stepping each
// token's bytes one by one.
//
// Input: the grammar text, then a NUL byte, then the text to feed.
#include <cstring>
#include <string>
#include <vector>

#include "engine/grammar/grammar.hpp"
#include "engine/grammar/token_grammar.hpp"
#include "tests/fuzz/fuzz_target.hpp"

using namespace tandem;

namespace {
std::shared_ptr<const TokenVocab> vocab() {
  static const auto v = [] {
    std::vector<std::string> b;
    for (int c = 0; c < 256; ++c) b.emplace_back(1, static_cast<char>(c));
    for (const char* p : {"{\"", "\"}", "ab", "abc", "12", "true", " \"", "\xCE\xB1", "\xCE", "\n  "}) b.emplace_back(p);
    std::vector<bool> text(b.size(), true);
    b.emplace_back("<eos>");
    text.push_back(false);
    return std::make_shared<const TokenVocab>(b, text, std::vector<int32_t>{static_cast<int32_t>(b.size() - 1)});
  }();
  return v;
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz_quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* p = reinterpret_cast<const char*>(data);
  const void* nul = std::memchr(p, 0, size);
  const size_t glen = nul ? static_cast<size_t>(static_cast<const char*>(nul) - p) : size;
  const std::string_view gbnf(p, glen);
  const std::string_view text = nul ? std::string_view(p + glen + 1, size - glen - 1) : std::string_view();
  std::shared_ptr<const Grammar> g;
  try {
    g = Grammar::parse(gbnf);
  } catch (const GrammarError& e) {
    fuzz_check(std::strlen(e.what()) > 0);
    return 0;
  }
  try {
    TokenGrammar tg(g, vocab());
    GrammarState s = tg.initial();
    for (size_t i = 0; i < text.size() && i < 64 && !s.dead(); ++i) {
      const auto m = tg.mask(s);
      // The mask's verdict on a token is stepping its bytes.
      const auto id = static_cast<int32_t>(static_cast<uint8_t>(text[i]) % static_cast<uint8_t>(vocab()->size() - 1));
      GrammarState t = s;
      g->advance_in_place(t, vocab()->bytes(id));
      fuzz_check(mask_allows(*m, id) == !t.dead());
      s = g->advance(s, static_cast<uint8_t>(text[i]));
    }
    (void)g->accepts(text);
  } catch (const std::runtime_error&) {
    // too ambiguous or nested too deeply: the documented refusal
  }
  return 0;
}
