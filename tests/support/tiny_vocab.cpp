#include "tests/support/tiny_vocab.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>

namespace tandem::test {
namespace {

// Written for these fixtures: everyday English, numbers, punctuation and some C++ and
// Python, so the learned merges look like those of a real tokenizer.
const char* const kText = R"TXT(The quick brown fox jumps over the lazy dog. The dog was not amused, and the fox ran
back into the forest before the farmer came out of the house to see what the noise was about.
In the morning the town is quiet. People walk to the station, buy a coffee and read the news
while they wait for the train. By nine o'clock the streets are full, and by noon everyone is
looking for something to eat. It's a small town, but it has a market every Saturday where the
farmers sell apples, bread, cheese, eggs and honey from the hills around the valley.
She said that she would call him later, but he didn't think she meant it. "We'll see," he
replied, and went back to his work. There were 12 letters on the table, 3 of them unopened.
A language model reads a sequence of tokens and predicts the next one. During speculative
decoding a small draft model proposes several tokens at once, and the large target model checks
all of them in a single forward pass. When the draft is right, the answer comes out faster; when
it is wrong, the target model corrects it, so the output is exactly the same as before.
The weather today will be sunny with a few clouds in the afternoon. Tomorrow it may rain, and the
temperature will drop to 14 degrees at night. On Sunday the wind will turn to the north.
To make a simple soup, cut two onions and three carrots, cook them in a little oil for five
minutes, then add water, salt and pepper and let it simmer for half an hour. Serve it hot.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 2024 3.14 42 and 65536 are all numbers.

int main(int argc, char** argv) {
  std::vector<int> values = {1, 2, 3, 4};
  int total = 0;
  for (int i = 0; i < static_cast<int>(values.size()); ++i) {
    total += values[i];
  }
  std::printf("total = %d\n", total);
  return total > 0 ? 0 : 1;
}

def count_words(text):
    counts = {}
    for word in text.split():
        word = word.lower().strip(".,!?")
        if word:
            counts[word] = counts.get(word, 0) + 1
    return sorted(counts.items(), key=lambda item: -item[1])

class Buffer:
    def __init__(self, size):
        self.size = size
        self.data = bytearray(size)

    def read(self, offset, length):
        return self.data[offset:offset + length]

for (const auto& token : tokens) {
  if (token.empty()) continue;
  output.push_back(token);
}
if result is None:
    raise ValueError("the value is not valid")
return self.model.generate(prompt, max_tokens=128, temperature=0.7)
Every night the old man walked along the river with his dog. He liked the sound of the water and
the light of the moon on the small waves. Sometimes he stopped to talk with the fisherman who sat
on the bridge, and they spoke about the weather, the price of fish and the children of the town.
Questions and answers: What time is it? About half past seven. Where are you going? To the library,
because I need two books about history and one about the mountains of Switzerland. Why? Because
my sister is travelling there in July and wants to know which villages are worth visiting.
The committee approved the new budget on Wednesday after a long discussion about schools, roads,
hospitals and public transport. Several members complained that the proposal was too expensive.
# Configuration
batch_size = 32
learning_rate = 0.001
import numpy as np
x = np.zeros((4, 8), dtype=np.float32)
y = x.reshape(-1) * 2.0 + 1.5
assert y.shape == (32,)
while (queue.size() > 0 && !stopped) {
  auto item = queue.pop();
  process(item, /*verbose=*/false);
}
template <typename T>
T clamp(T value, T low, T high) { return value < low ? low : (value > high ? high : value); }
)TXT";

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

const std::string kSpace = "\xe2\x96\x81";  // "▁", SentencePiece's space marker

struct Word {
  std::vector<std::string> syms;
  int64_t freq;
};

using Pair = std::pair<std::string, std::string>;

// Byte-pair merging: repeatedly joins the most frequent adjacent pair (ties broken by
// the pair's text, so results are deterministic). A pair whose join is already a token
// is skipped (a token appears once in a vocabulary); with only_known, pairs involving a
// symbol outside `vocab` are skipped too (SentencePiece pieces are built from pieces).
std::vector<Pair> learn_merges(std::vector<Word>& words, size_t n, std::set<std::string>& vocab, bool only_known) {
  std::vector<Pair> merges;
  while (merges.size() < n) {
    std::map<Pair, int64_t> counts;
    for (const Word& w : words)
      for (size_t i = 0; i + 1 < w.syms.size(); ++i) counts[{w.syms[i], w.syms[i + 1]}] += w.freq;
    const Pair* best = nullptr;
    int64_t best_count = 0;
    for (const auto& [p, c] : counts) {
      if (c <= best_count || vocab.count(p.first + p.second)) continue;
      if (only_known && (!vocab.count(p.first) || !vocab.count(p.second))) continue;
      best = &p;
      best_count = c;
    }
    if (!best) break;
    const Pair m = *best;
    const std::string joined = m.first + m.second;
    for (Word& w : words) {
      std::vector<std::string> out;
      out.reserve(w.syms.size());
      for (size_t i = 0; i < w.syms.size(); ++i) {
        if (i + 1 < w.syms.size() && w.syms[i] == m.first && w.syms[i + 1] == m.second) {
          out.push_back(joined);
          ++i;
        } else {
          out.push_back(w.syms[i]);
        }
      }
      w.syms = std::move(out);
    }
    vocab.insert(joined);
    merges.push_back(m);
  }
  return merges;
}

enum class CharClass { Letter, Digit, Space, Other };
CharClass classify(unsigned char c) {
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return CharClass::Letter;
  if (c >= 0x80) return CharClass::Letter;  // UTF-8 bytes: treated as letters
  if (c >= '0' && c <= '9') return CharClass::Digit;
  if (c == ' ' || c == '\n' || c == '\t' || c == '\r') return CharClass::Space;
  return CharClass::Other;
}

// Splits text roughly the way GPT-2's pre-tokenizer does: contractions, then runs of
// letters, digits or other symbols each with at most one leading space, then spaces.
std::vector<std::string> gpt2_pieces(const std::string& t) {
  std::vector<std::string> out;
  size_t i = 0;
  const size_t n = t.size();
  while (i < n) {
    if (t[i] == '\'') {
      bool matched = false;
      for (const char* c : {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"}) {
        const std::string_view cv(c);
        if (t.compare(i, cv.size(), cv) == 0) {
          out.emplace_back(cv);
          i += cv.size();
          matched = true;
          break;
        }
      }
      if (matched) continue;
    }
    size_t j = i;
    if (t[i] == ' ' && i + 1 < n && classify(static_cast<unsigned char>(t[i + 1])) != CharClass::Space) j = i + 1;
    const CharClass cls = classify(static_cast<unsigned char>(t[j]));
    size_t k = j + 1;
    while (k < n && classify(static_cast<unsigned char>(t[k])) == cls && !(cls == CharClass::Other && t[k] == '\''))
      ++k;
    // A run of spaces leaves its last space to the word that follows it.
    if (cls == CharClass::Space && k < n && k - j > 1 && t[k - 1] == ' ') --k;
    out.push_back(t.substr(i, k - i));
    i = k;
  }
  return out;
}

std::vector<Word> count_words(const std::vector<std::vector<std::string>>& pieces) {
  std::map<std::vector<std::string>, int64_t> freq;
  for (const auto& p : pieces) ++freq[p];
  std::vector<Word> words;
  for (const auto& [syms, f] : freq) words.push_back({syms, f});
  return words;
}

void check_unique(const TinyVocab& v) {
  std::set<std::string> seen;
  for (const auto& t : v.tokens)
    if (!seen.insert(t).second) throw std::logic_error("tiny vocab: duplicate token '" + t + "'");
}

void check_size(int n_vocab) {
  if (n_vocab < 259)
    throw std::invalid_argument("tiny vocab: n_vocab " + std::to_string(n_vocab) +
                                " is below 259 (256 byte tokens + 3 special tokens)");
}

}  // namespace

const std::string& tiny_training_text() {
  static const std::string text = kText;
  return text;
}

const std::vector<std::string>& gpt2_byte_symbols() {
  static const std::vector<std::string> symbols = [] {
    // Printable Latin-1 bytes stand for themselves; the others (controls, space, DEL,
    // NBSP, soft hyphen) are moved to code points 256, 257, ... in byte order.
    std::vector<std::string> s(256);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      s[b] = utf8(printable ? b : next++);
    }
    return s;
  }();
  return symbols;
}

TinyVocab build_gpt2_vocab(int n_vocab) {
  check_size(n_vocab);
  const auto& sym = gpt2_byte_symbols();
  std::vector<std::vector<std::string>> pieces;
  for (const std::string& p : gpt2_pieces(tiny_training_text())) {
    std::vector<std::string> syms;
    for (unsigned char c : p) syms.push_back(sym[c]);
    pieces.push_back(std::move(syms));
  }
  std::vector<Word> words = count_words(pieces);
  std::set<std::string> vocab(sym.begin(), sym.end());
  const size_t n_merges = static_cast<size_t>(n_vocab) - 256 - 3;
  const std::vector<Pair> merges = learn_merges(words, n_merges, vocab, false);
  if (merges.size() < n_merges)
    throw std::invalid_argument("tiny vocab: n_vocab " + std::to_string(n_vocab) + " needs " +
                                std::to_string(n_merges) + " merges, the built-in text gives only " +
                                std::to_string(merges.size()));
  TinyVocab v;
  for (const auto& s : sym) {
    v.tokens.push_back(s);
    v.token_types.push_back(1);
  }
  for (const auto& m : merges) {
    v.tokens.push_back(m.first + m.second);
    v.token_types.push_back(1);
    v.merges.push_back(m.first + " " + m.second);
  }
  for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    v.tokens.push_back(special);
    v.token_types.push_back(3);
  }
  v.bos_id = v.eos_id = n_vocab - 3;  // <|endoftext|>, as in GPT-2
  check_unique(v);
  return v;
}

TinyVocab build_llama_vocab(int n_vocab) {
  check_size(n_vocab);
  // SentencePiece view of the text: words split at whitespace, each carrying "▁" for the
  // space before it, symbols are code points (the text is ASCII, so single bytes).
  std::vector<std::vector<std::string>> pieces;
  std::map<std::string, int64_t> char_freq;
  const std::string& t = tiny_training_text();
  size_t i = 0;
  while (i < t.size()) {
    while (i < t.size() && classify(static_cast<unsigned char>(t[i])) == CharClass::Space) ++i;
    size_t j = i;
    while (j < t.size() && classify(static_cast<unsigned char>(t[j])) != CharClass::Space) ++j;
    if (j == i) break;
    std::vector<std::string> syms{kSpace};
    for (size_t k = i; k < j; ++k) syms.emplace_back(1, t[k]);
    for (const auto& s : syms) ++char_freq[s];
    pieces.push_back(std::move(syms));
    i = j;
  }
  // Budget: about half for the most frequent characters, the rest for learned pieces;
  // if the text runs out of pieces, more characters fill the gap.
  const size_t budget = static_cast<size_t>(n_vocab) - 259;
  std::vector<std::pair<std::string, int64_t>> all_chars(char_freq.begin(), char_freq.end());
  std::stable_sort(all_chars.begin(), all_chars.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  size_t n_chars = std::min(all_chars.size(), budget / 2);
  std::set<std::string> vocab;
  for (size_t c = 0; c < n_chars; ++c) vocab.insert(all_chars[c].first);
  std::vector<Word> words = count_words(pieces);
  const std::vector<Pair> merges = learn_merges(words, budget - n_chars, vocab, true);
  n_chars = budget - merges.size();
  if (n_chars > all_chars.size())
    throw std::invalid_argument("tiny vocab: n_vocab " + std::to_string(n_vocab) +
                                " is more than the built-in text can fill (" +
                                std::to_string(259 + merges.size() + all_chars.size()) + ")");
  const std::vector<std::pair<std::string, int64_t>> chars(all_chars.begin(), all_chars.begin() + n_chars);
  TinyVocab v;
  auto add = [&](std::string tok, int32_t type, float score) {
    v.tokens.push_back(std::move(tok));
    v.token_types.push_back(type);
    v.scores.push_back(score);
  };
  add("<unk>", 2, 0.f);
  add("<s>", 3, 0.f);
  add("</s>", 3, 0.f);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    add(name, 6, 0.f);
  }
  // Earlier merges win: scores fall with rank, and single characters come last.
  float score = 0.f;
  for (const auto& m : merges) add(m.first + m.second, 1, score--);
  for (const auto& c : chars) add(c.first, 1, score--);
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  check_unique(v);
  return v;
}

TokenizerData tokenizer_data(const TinyVocab& v, const std::string& model, const std::string& pre) {
  TokenizerData d;
  d.model = model;
  d.pre = pre;
  d.tokens = v.tokens;
  d.token_types = v.token_types;
  d.scores = v.scores;
  d.merges = v.merges;
  d.bos_id = v.bos_id;
  d.eos_id = v.eos_id;
  d.unk_id = v.unk_id;
  return d;
}

}  // namespace tandem::test
