// Byte-level BPE ("gpt2" vocabularies): regex pre-tokenization, bytes spelled in GPT-2's
// printable byte alphabet, merges applied lowest rank first (leftmost on ties), as HF
// tokenizers' BPE model does.
#include <algorithm>
#include <stdexcept>

#include "engine/text/tokenizer_internal.hpp"
#include "engine/text/utf8.hpp"

namespace tandem::tok_detail {

// GPT-2 maps the 188 printable bytes to themselves and the rest (controls, space, 0x7F-0xA0,
// soft hyphen) to U+0100.. in byte order, so every byte has a visible one-char spelling.
namespace {
constexpr bool printable(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}
struct ByteAlphabet {
  std::array<char32_t, 256> to_cp{};
  std::array<int16_t, 512> from_cp{};  // all spellings are < U+0144
  ByteAlphabet() {
    from_cp.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      to_cp[b] = printable(b) ? static_cast<char32_t>(b) : next++;
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}
}  // namespace

char32_t byte_to_unicode(uint8_t b) { return alphabet().to_cp[b]; }

int byte_from_unicode(char32_t cp) { return cp < 512 ? alphabet().from_cp[cp] : -1; }

namespace {

struct Merge {
  int32_t rank;
  int32_t result;
};

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

class BpeEncoder final : public Encoder {
 public:
  BpeEncoder(const Vocab& v, const std::vector<std::string>& merges) : v_(v), pretok_(v.pre) {
    for (int b = 0; b < 256; ++b) {
      utf8::append(byte_spelling_[b], byte_to_unicode(static_cast<uint8_t>(b)));
      byte_id_[b] = v.find(byte_spelling_[b]);
    }
    merges_.reserve(merges.size() * 2);
    std::string joined;
    int32_t rank = 0;
    for (const std::string& m : merges) {
      // Byte-level spellings contain no space, so the first space separates the halves
      // (searching from 1 keeps a malformed "  x" from producing an empty left half).
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos)
        throw std::runtime_error("tokenizer: malformed merge '" + m + "'");
      const std::string_view left(m.data(), sp), right(m.data() + sp + 1, m.size() - sp - 1);
      joined.assign(left).append(right);
      const int32_t l = v.find(left), r = v.find(right), res = v.find(joined);
      // A merge whose parts or result are not in the vocabulary can never apply. On a
      // repeated pair the first (best) rank wins.
      if (l >= 0 && r >= 0 && res >= 0) merges_.try_emplace(pair_key(l, r), Merge{rank, res});
      ++rank;
    }
  }

  std::string normalize(std::string_view text) const override { return std::string(text); }

  void encode(std::string_view fragment, std::vector<int32_t>& out) const override {
    std::vector<std::string_view> words;
    pretok_.split(fragment, words);
    Scratch s;
    for (std::string_view w : words) encode_word(w, s, out);
  }

  std::string piece(int32_t id) const override {
    const std::string& text = v_.tokens[static_cast<size_t>(id)];
    std::string out;
    out.reserve(text.size());
    for (size_t pos = 0; pos < text.size();) {
      const utf8::Decoded d = utf8::decode_one(text, pos);
      const int b = d.status == utf8::Decoded::Status::Ok ? byte_from_unicode(d.cp) : -1;
      if (b >= 0) {
        out.push_back(static_cast<char>(b));
      } else {
        out.append(text, pos, d.len);  // not a byte spelling: keep the stored bytes
      }
      pos += d.len;
    }
    return out;
  }

 private:
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // neighbours in the linked list, -1 at the ends
  };
  struct Candidate {
    int32_t rank, pos;  // pos: index of the left symbol
    int32_t left, right, result;
    bool operator<(const Candidate& o) const {  // std heap functions pop the largest
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  struct Scratch {  // reused across the words of one encode() call
    std::vector<Symbol> syms;
    std::vector<Candidate> heap;
    std::string spelled;
  };

  void push_candidate(Scratch& s, int32_t pos) const {
    const int32_t next = s.syms[static_cast<size_t>(pos)].next;
    if (next < 0) return;
    const int32_t l = s.syms[static_cast<size_t>(pos)].id, r = s.syms[static_cast<size_t>(next)].id;
    if (l < 0 || r < 0) return;
    auto it = merges_.find(pair_key(l, r));
    if (it == merges_.end()) return;
    s.heap.push_back({it->second.rank, pos, l, r, it->second.result});
    std::push_heap(s.heap.begin(), s.heap.end());
  }

  void encode_word(std::string_view word, Scratch& s, std::vector<int32_t>& out) const {
    if (pretok_.ignore_merges()) {
      s.spelled.clear();
      for (unsigned char b : word) s.spelled += byte_spelling_[b];
      if (int32_t id = v_.find(s.spelled); id >= 0) {
        out.push_back(id);
        return;
      }
    }
    const auto n = static_cast<int32_t>(word.size());
    s.syms.resize(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i)
      s.syms[static_cast<size_t>(i)] = {byte_id_[static_cast<unsigned char>(word[static_cast<size_t>(i)])],
                                        i - 1, i + 1 < n ? i + 1 : -1};
    s.heap.clear();
    for (int32_t i = 0; i + 1 < n; ++i) push_candidate(s, i);

    while (!s.heap.empty()) {
      std::pop_heap(s.heap.begin(), s.heap.end());
      const Candidate c = s.heap.back();
      s.heap.pop_back();
      Symbol& left = s.syms[static_cast<size_t>(c.pos)];
      // Stale entries: the left symbol was merged away or changed, or its neighbour did.
      if (left.id != c.left || left.next < 0) continue;
      Symbol& right = s.syms[static_cast<size_t>(left.next)];
      if (right.id != c.right) continue;
      left.id = c.result;
      right.id = -2;  // dead
      left.next = right.next;
      if (right.next >= 0) s.syms[static_cast<size_t>(right.next)].prev = c.pos;
      if (left.prev >= 0) push_candidate(s, left.prev);
      push_candidate(s, c.pos);
    }
    for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = s.syms[static_cast<size_t>(i)].next) {
      const int32_t id = s.syms[static_cast<size_t>(i)].id;
      if (id >= 0) {
        out.push_back(id);
      } else if (v_.unk >= 0) {
        out.push_back(v_.unk);  // a byte without a spelling in this vocabulary
      }
    }
  }

  const Vocab& v_;
  Pretokenizer pretok_;
  std::array<std::string, 256> byte_spelling_;
  std::array<int32_t, 256> byte_id_{};
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace

std::unique_ptr<Encoder> make_bpe_encoder(const Vocab& v, const std::vector<std::string>& merges) {
  return std::make_unique<BpeEncoder>(v, merges);
}

}  // namespace tandem::tok_detail
