// SentencePiece-style BPE ("llama" vocabularies such as Gemma's): spaces are written as
// U+2581 "▁", characters start as symbols, and the adjacent pair whose concatenation is the
// highest-scoring vocabulary piece merges first (leftmost on ties), as SentencePiece's BPE
// model does. Characters left without a piece fall back to <0xXX> byte tokens.
#include <algorithm>
#include <cstdio>
#include <unordered_map>

#include "engine/text/tokenizer_internal.hpp"
#include "engine/text/utf8.hpp"

namespace tandem::tok_detail {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581

class SpmEncoder final : public Encoder {
 public:
  explicit SpmEncoder(const Vocab& v) : v_(v) {
    byte_id_.fill(-1);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      const int32_t id = v.find(name);
      if (id >= 0 && v.type(id) == TokenType::Byte) byte_id_[b] = id;
      byte_fallback_ = byte_fallback_ || byte_id_[b] >= 0;
    }
  }

  std::string normalize(std::string_view text) const override {
    // SentencePiece adds its dummy prefix to the whole text, before user-defined pieces
    // are matched.
    std::string out = v_.add_space_prefix ? std::string(kSpace) : std::string();
    return out + spm_escape(text);
  }

  void encode(std::string_view text, std::vector<int32_t>& out) const override {
    // One symbol per character (the text is well-formed UTF-8).
    std::vector<Symbol> syms;
    for (size_t pos = 0; pos < text.size();) {
      const uint32_t len = utf8::decode_one(text, pos).len;
      const auto i = static_cast<int32_t>(syms.size());
      syms.push_back({static_cast<uint32_t>(pos), len, i - 1, -1});
      if (i > 0) syms[static_cast<size_t>(i - 1)].next = i;
      pos += len;
    }

    std::vector<Candidate> heap;
    RevMerges rev;
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i)
      push_candidate(text, syms, i, i + 1, heap, rev);

    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end());
      const Candidate c = heap.back();
      heap.pop_back();
      Symbol& left = syms[static_cast<size_t>(c.left)];
      Symbol& right = syms[static_cast<size_t>(c.right)];
      // Stale: one side was merged away, or grew since the candidate was made.
      if (left.len == 0 || right.len == 0 || left.next != c.right ||
          left.len + right.len != c.len)
        continue;
      left.len += right.len;
      right.len = 0;
      left.next = right.next;
      if (right.next >= 0) syms[static_cast<size_t>(right.next)].prev = c.left;
      if (left.prev >= 0) push_candidate(text, syms, left.prev, c.left, heap, rev);
      if (left.next >= 0) push_candidate(text, syms, c.left, left.next, heap, rev);
    }

    for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[static_cast<size_t>(i)].next) {
      const Symbol& s = syms[static_cast<size_t>(i)];
      emit(text.substr(s.start, s.len), rev, out);
    }
  }

  std::string piece(int32_t id) const override {
    return spm_unescape(v_.tokens[static_cast<size_t>(id)]);
  }

 private:
  struct Symbol {
    uint32_t start, len;  // bytes of `text`; len 0 once merged into the left neighbour
    int32_t prev, next;
  };
  struct Candidate {
    float score;
    int32_t left, right;
    uint32_t len;  // bytes of the merged piece, to detect stale entries
    bool operator<(const Candidate& o) const {  // std heap pops the largest
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  // Pieces of type Unused may be formed while merging but are not emitted; remember how
  // each was formed so it can be split back (SentencePiece's "resegment").
  using RevMerges = std::unordered_map<std::string, std::pair<std::string, std::string>>;

  // Pieces that merging may form. User-defined pieces are normally matched before this
  // runs, but SentencePiece also allows them here, so do the same.
  bool mergeable(int32_t id) const {
    const TokenType t = v_.type(id);
    return t == TokenType::Normal || t == TokenType::Unused || t == TokenType::UserDefined ||
           t == TokenType::Undefined;
  }

  void push_candidate(std::string_view text, const std::vector<Symbol>& syms, int32_t l,
                      int32_t r, std::vector<Candidate>& heap, RevMerges& rev) const {
    const Symbol& a = syms[static_cast<size_t>(l)];
    const Symbol& b = syms[static_cast<size_t>(r)];
    const std::string_view merged = text.substr(a.start, a.len + b.len);
    const int32_t id = v_.find(merged);
    if (id < 0 || !mergeable(id)) return;
    heap.push_back({score(id), l, r, a.len + b.len});
    std::push_heap(heap.begin(), heap.end());
    if (v_.type(id) == TokenType::Unused)
      rev.try_emplace(std::string(merged), std::string(merged.substr(0, a.len)),
                      std::string(merged.substr(a.len)));
  }

  float score(int32_t id) const {
    return v_.scores.empty() ? 0.0f : v_.scores[static_cast<size_t>(id)];
  }

  void emit(std::string_view piece, const RevMerges& rev, std::vector<int32_t>& out) const {
    const int32_t id = v_.find(piece);
    if (id >= 0 && v_.type(id) == TokenType::Unused) {
      if (auto it = rev.find(std::string(piece)); it != rev.end()) {
        emit(it->second.first, rev, out);
        emit(it->second.second, rev, out);
        return;
      }
    }
    if (id >= 0 && mergeable(id)) {
      out.push_back(id);
      return;
    }
    // No piece: one <0xXX> token per byte; without byte tokens, one <unk> for the piece.
    if (!byte_fallback_) {
      if (v_.unk >= 0) out.push_back(v_.unk);
      return;
    }
    for (unsigned char b : piece) {
      if (byte_id_[b] >= 0) {
        out.push_back(byte_id_[b]);
      } else if (v_.unk >= 0) {
        out.push_back(v_.unk);
      }
    }
  }

  const Vocab& v_;
  std::array<int32_t, 256> byte_id_{};
  bool byte_fallback_ = false;
};

}  // namespace

std::unique_ptr<Encoder> make_spm_encoder(const Vocab& v) { return std::make_unique<SpmEncoder>(v); }

std::string spm_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (char c : text) {
    if (c == ' ') {
      out += kSpace;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string spm_unescape(std::string_view t) {
  std::string out;
  out.reserve(t.size());
  for (size_t pos = 0; pos < t.size();) {
    if (t.substr(pos, kSpace.size()) == kSpace) {
      out.push_back(' ');
      pos += kSpace.size();
    } else {
      out.push_back(t[pos++]);
    }
  }
  return out;
}

}  // namespace tandem::tok_detail
