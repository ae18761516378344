// Text <-> token ids, built from the vocabulary a GGUF file carries.
//
// Two vocabulary kinds are supported, named as GGUF names them in `tokenizer.ggml.model`:
//   "gpt2"  byte-level BPE: split text with the pre-tokenizer regex named by
//           `tokenizer.ggml.pre`, spell each piece's bytes in the GPT-2 byte alphabet, apply
//           the merges by rank (SmolLM2, Qwen2.5, Llama 3 ...).
//   "llama" SentencePiece-style BPE: spaces become U+2581, pieces merge by score, characters
//           without a piece fall back to <0xXX> byte tokens (Gemma 3 ...).
// Special tokens are matched in the raw text before either algorithm runs: user-defined
// tokens (GGUF token type 4) always, control tokens (type 3) only when asked to
// (`parse_special`), so user text cannot smuggle in "<|im_start|>".
//
// The core is built from a plain `TokenizerData`, so it does not depend on the GGUF reader;
// `from_gguf` (tokenizer_gguf.cpp) only fills that struct.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::gguf {
class File;
}

namespace tandem {

// GGUF token types (`tokenizer.ggml.token_type`), as llama.cpp's converter writes them.
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

// Everything needed to build a Tokenizer; mirrors the `tokenizer.ggml.*` GGUF keys.
struct TokenizerData {
  std::string model;                 // "gpt2" or "llama"
  std::string pre = "default";       // pre-tokenizer name (gpt2 only)
  std::vector<std::string> tokens;   // vocabulary strings as stored
  std::vector<float> scores;         // per token; required for "llama", optional otherwise
  std::vector<int32_t> token_types;  // per token (TokenType values); empty = all Normal
  std::vector<std::string> merges;   // "left right", best first; required for "gpt2"
  int32_t bos_id = -1, eos_id = -1, eot_id = -1, eom_id = -1, unk_id = -1, pad_id = -1;
  // Fill-in-the-middle markers (tokenizer.ggml.fim_pre/suf/mid_token_id); when absent, the
  // tokens of the known FIM families are looked up by their texts.
  int32_t fim_pre_id = -1, fim_suf_id = -1, fim_mid_id = -1;
  std::optional<bool> add_bos;           // default: true for "llama", false for "gpt2"
  std::optional<bool> add_eos;           // default: false
  std::optional<bool> add_space_prefix;  // "llama" only; default: true (SentencePiece's)
  // Text between special tokens is put in Unicode NFC first (a Hugging Face tokenizer.json's
  // NFC normalizer, as Qwen2's has; GGUF files do not record it).
  bool nfc = false;
  // Special and user-defined tokens are matched in the raw text, and each stretch between
  // them is normalized on its own: how a Hugging Face tokenizer.json's added tokens
  // (normalized: false) work. Otherwise, as in SentencePiece and llama.cpp, they are matched in
  // the normalized text. Only the "llama" kind normalizes, so only it can tell the difference.
  bool added_tokens_raw = false;
};

namespace tok_detail {
class Encoder;  // per-algorithm part of encode(); see tokenizer_internal.hpp
struct Vocab;
}  // namespace tok_detail

// A code model's fill-in-the-middle markers: a prompt prefix, suffix, middle (PSM order)
// asks for the text between the prefix and the suffix.
struct FimTokens {
  int32_t prefix = -1, suffix = -1, middle = -1;
  bool complete() const { return prefix >= 0 && suffix >= 0 && middle >= 0; }
};

class Tokenizer {
 public:
  // Throws std::runtime_error naming what is unsupported or missing.
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& f);
  static std::unique_ptr<Tokenizer> from_data(TokenizerData d);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // add_special: prepend BOS / append EOS as the metadata says.
  // parse_special: match control-token texts (e.g. "<|im_start|>") as single tokens.
  // Ill-formed UTF-8 in `text` is replaced by U+FFFD first. Thread-safe (const, no caches).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // The raw bytes the token contributes to the output text (byte-level/▁/<0xXX> decoded;
  // control tokens give their text). May be a fragment of a UTF-8 sequence.
  // Ids outside the vocabulary (models often have padded embedding rows) give "".
  std::string token_to_piece(int32_t id) const;
  // Concatenated pieces; skip_special hides control/unknown tokens. Returns raw bytes, which
  // are ill-formed UTF-8 when `ids` cut a character (use StreamDecoder for display).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  int32_t n_vocab() const;
  int32_t bos() const;  // -1 when absent
  int32_t eos() const;
  int32_t eot() const;
  bool is_eog(int32_t id) const;  // end of generation: eos, eot, eom, <|im_end|>, ...
  // The fill-in-the-middle markers, when the vocabulary has all three.
  std::optional<FimTokens> fim() const;
  bool is_control(int32_t id) const;
  TokenType token_type(int32_t id) const;
  const std::string& token_text(int32_t id) const;  // as stored; "" when out of range
  std::optional<int32_t> find_token(std::string_view text) const;  // exact stored text
  bool add_bos() const;
  bool add_eos() const;
  std::string model() const;
  std::string pre() const;
  bool normalizes_nfc() const;  // text goes through Unicode NFC before it is split

 private:
  Tokenizer();
  // Leading-space handling for SentencePiece models that prepend "▁" when encoding.
  bool strips_leading_space() const;
  friend class StreamDecoder;

  std::unique_ptr<tok_detail::Vocab> vocab_;
  std::unique_ptr<tok_detail::Encoder> encoder_;
};

// Streaming-safe decoding: bytes of an incomplete UTF-8 sequence are held back until the
// sequence completes; ill-formed bytes come out as U+FFFD, never raw or dropped.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& t, bool skip_special = true);
  std::string push(int32_t id);  // text that is complete now
  std::string flush();           // whatever is held back (a cut-off tail becomes U+FFFD)

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  bool at_start_ = true;
  std::string pending_;
};

}  // namespace tandem
