// Pieces shared by the tokenizer's source files; not part of the public API.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/text/tokenizer.hpp"

namespace tandem::tok_detail {

// Token text -> id: an open-addressing table of ids whose keys are the vocabulary strings
// themselves. Flat slots keep the probe to ~one cache miss, which matters because BPE
// merging looks up every candidate pair (a node-based map was half of SentencePiece's time).
class TokenIndex {
 public:
  // Indexes `tokens` (which must outlive the index); on duplicates the first id wins.
  void build(const std::vector<std::string>& tokens);
  int32_t find(std::string_view text) const;  // -1 when absent

 private:
  struct Slot {
    uint32_t tag;  // high hash bits, to skip most string compares
    int32_t id;    // -1: empty
  };
  const std::vector<std::string>* tokens_ = nullptr;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// Finds special-token texts in raw text, leftmost-longest (as HF tokenizers' added-token
// matcher does), using a byte trie. Tokens registered as `control` only match on request.
class SpecialMatcher {
 public:
  struct Piece {
    int32_t id;             // >= 0: a matched token; -1: raw text
    std::string_view text;  // the matched or raw text (a view into the input)
  };
  void add(std::string_view text, int32_t id, bool control);
  bool empty() const { return nodes_.size() <= 1; }
  // Splits `text` into raw fragments and matched tokens, in order.
  void split(std::string_view text, bool parse_special, std::vector<Piece>& out) const;

 private:
  struct Node {
    int32_t id = -1;
    bool control = false;
  };
  int32_t child(int32_t node, uint8_t b) const;
  std::vector<Node> nodes_{Node{}};
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child node
  std::array<bool, 256> first_byte_{};           // cheap rejection before the trie walk
};

// The vocabulary and metadata, normalised (defaults applied, ids checked).
struct Vocab {
  std::string model, pre;
  std::vector<std::string> tokens;
  std::vector<float> scores;  // empty when not given
  std::vector<TokenType> types;
  TokenIndex ids;  // first id of each stored text
  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  bool nfc = false;  // raw text goes through Unicode NFC before the algorithm
  bool added_tokens_raw = false;  // specials matched in the raw text (TokenizerData)
  std::vector<int32_t> eog;  // sorted
  FimTokens fim;             // all -1 when the vocabulary has no complete set
  SpecialMatcher specials;

  TokenType type(int32_t id) const { return types[static_cast<size_t>(id)]; }
  int32_t find(std::string_view text) const { return ids.find(text); }
};

// The algorithm-specific half of encode()/decode().
class Encoder {
 public:
  virtual ~Encoder() = default;
  // The text as the algorithm sees it; special tokens are matched in this form (so a
  // SentencePiece user-defined piece "▁▁" matches two spaces, as in SentencePiece).
  virtual std::string normalize(std::string_view text) const = 0;
  // Appends the ids of `fragment`, normalized text that holds no special token.
  virtual void encode(std::string_view fragment, std::vector<int32_t>& out) const = 0;
  // Output bytes of a Normal (or SentencePiece user-defined) token.
  virtual std::string piece(int32_t id) const = 0;
};

std::unique_ptr<Encoder> make_bpe_encoder(const Vocab& v,  // tokenizer_bpe.cpp
                                          const std::vector<std::string>& merges);
std::unique_ptr<Encoder> make_spm_encoder(const Vocab& v);  // tokenizer_spm.cpp
// SentencePiece's whitespace escaping: every ' ' becomes U+2581 "▁" (tokenizer_spm.cpp).
std::string spm_escape(std::string_view text);
std::string spm_unescape(std::string_view text);

// Regex pre-tokenizer of byte-level BPE, chosen by the GGUF `tokenizer.ggml.pre` name
// (tokenizer_pretok.cpp). Each stage splits every piece of the previous stage ("isolated":
// matches and the gaps between them all become pieces), like HF tokenizers' Split.
class Pretokenizer {
 public:
  explicit Pretokenizer(std::string_view pre);  // throws std::runtime_error for unknown names
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // `text` must be well-formed UTF-8; pieces are views into it, in order, covering it.
  void split(std::string_view text, std::vector<std::string_view>& out) const;
  // Llama 3 style: a piece that is itself a vocabulary entry is taken whole.
  bool ignore_merges() const { return ignore_merges_; }
  static std::vector<std::string> known_names();
  // Whether two names split text alike ("default" and "gpt2" do); unknown names never do.
  static bool same_rules(std::string_view a, std::string_view b);

 private:
  struct Regex;
  std::vector<std::unique_ptr<Regex>> stages_;
  bool ignore_merges_ = false;
};

// GPT-2's byte <-> printable-character alphabet (tokenizer_bpe.cpp).
char32_t byte_to_unicode(uint8_t b);
int byte_from_unicode(char32_t cp);  // -1 when cp is not in the alphabet

}  // namespace tandem::tok_detail
