// Tokenizer: vocabulary checks and defaults, special tokens, encode() dispatch, decoding.
#include "engine/text/tokenizer.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>

#include "engine/text/tokenizer_internal.hpp"
#include "engine/text/unicode_nfc.hpp"
#include "engine/text/utf8.hpp"

namespace tandem {

using tok_detail::Vocab;

namespace {

// Token texts that end a turn or a document in the chat formats we know. llama.cpp treats
// these as end-of-generation when the file marks them special, even when the metadata names
// a different EOS (Qwen's EOS is <|im_end|>, but a base model may still emit <|endoftext|>).
constexpr std::string_view kEogTexts[] = {
    "<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<|eot_id|>", "<|eom_id|>",
    "<|end|>",    "<|end_of_text|>", "<EOT>",       "<|return|>", "<|call|>",
};
// Fill-in-the-middle markers by family (prefix, suffix, middle), for vocabularies whose
// metadata does not name them: Qwen2.5-Coder and others, StarCoder, SantaCoder, CodeLlama
// (SentencePiece, with and without the word marker), DeepSeek-Coder.
constexpr std::string_view kFimTexts[][3] = {
    {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"},
    {"<fim_prefix>", "<fim_suffix>", "<fim_middle>"},
    {"<fim-prefix>", "<fim-suffix>", "<fim-middle>"},
    {"<PRE>", "<SUF>", "<MID>"},
    {"▁<PRE>", "▁<SUF>", "▁<MID>"},
    {"<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"},
};
// Candidates for the end-of-turn token when the metadata has no eot_token_id, best first.
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<EOT>", "<|endoftext|>",
};

bool is_special_type(TokenType t) {
  return t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown;
}

int32_t checked_id(int32_t id, size_t n, const char* what) {
  if (id < 0) return -1;
  if (static_cast<size_t>(id) >= n) {
    spdlog::warn("tokenizer: {} id {} is outside the vocabulary ({} tokens); ignoring it", what,
                 id, n);
    return -1;
  }
  return id;
}

// The byte a SentencePiece byte token "<0xAB>" stands for, or -1.
int byte_token_value(std::string_view t) {
  auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::unique_ptr<Vocab> build_vocab(TokenizerData& d) {
  auto v = std::make_unique<Vocab>();
  if (d.model != "gpt2" && d.model != "llama")
    throw std::runtime_error("tokenizer: unsupported tokenizer model '" + d.model +
                             "' (tokenizer.ggml.model); supported: gpt2, llama");
  if (d.tokens.empty()) throw std::runtime_error("tokenizer: empty vocabulary (tokenizer.ggml.tokens)");
  const size_t n = d.tokens.size();
  if (n > static_cast<size_t>(INT32_MAX)) throw std::runtime_error("tokenizer: vocabulary too large");
  if (!d.scores.empty() && d.scores.size() != n)
    throw std::runtime_error("tokenizer: tokenizer.ggml.scores has " + std::to_string(d.scores.size()) +
                             " entries for " + std::to_string(n) + " tokens");
  if (!d.token_types.empty() && d.token_types.size() != n)
    throw std::runtime_error("tokenizer: tokenizer.ggml.token_type has " +
                             std::to_string(d.token_types.size()) + " entries for " +
                             std::to_string(n) + " tokens");
  if (d.model == "llama" && d.scores.empty())
    throw std::runtime_error("tokenizer: model 'llama' needs tokenizer.ggml.scores");
  if (d.model == "gpt2" && d.merges.empty())
    throw std::runtime_error("tokenizer: model 'gpt2' needs tokenizer.ggml.merges");

  v->model = d.model;
  v->pre = d.pre.empty() ? "default" : d.pre;
  v->tokens = std::move(d.tokens);
  v->scores = std::move(d.scores);
  v->types.resize(n, TokenType::Normal);
  for (size_t i = 0; i < d.token_types.size(); ++i) {
    const int32_t t = d.token_types[i];
    v->types[i] = t >= 0 && t <= 6 ? static_cast<TokenType>(t) : TokenType::Undefined;
  }
  if (d.token_types.empty() && d.model == "llama")  // untyped SentencePiece vocab
    for (size_t i = 0; i < n; ++i)
      if (byte_token_value(v->tokens[i]) >= 0) v->types[i] = TokenType::Byte;

  v->ids.build(v->tokens);

  v->bos = checked_id(d.bos_id, n, "BOS");
  v->eos = checked_id(d.eos_id, n, "EOS");
  v->eot = checked_id(d.eot_id, n, "EOT");
  v->eom = checked_id(d.eom_id, n, "EOM");
  v->unk = checked_id(d.unk_id, n, "UNK");
  v->pad = checked_id(d.pad_id, n, "PAD");
  const bool spm = d.model == "llama";
  v->add_bos = d.add_bos.value_or(spm);
  v->add_eos = d.add_eos.value_or(false);
  v->add_space_prefix = spm && d.add_space_prefix.value_or(true);
  v->nfc = d.nfc;
  v->added_tokens_raw = d.added_tokens_raw;

  auto special_text = [&](std::string_view text) -> int32_t {
    const int32_t id = v->find(text);
    return id >= 0 && is_special_type(v->type(id)) ? id : -1;
  };
  if (v->eot < 0)
    for (std::string_view t : kEotTexts)
      if (int32_t id = special_text(t); id >= 0) {
        v->eot = id;
        break;
      }
  for (int32_t id : {v->eos, v->eot, v->eom})
    if (id >= 0) v->eog.push_back(id);
  for (std::string_view t : kEogTexts)
    if (int32_t id = special_text(t); id >= 0) v->eog.push_back(id);
  std::sort(v->eog.begin(), v->eog.end());
  v->eog.erase(std::unique(v->eog.begin(), v->eog.end()), v->eog.end());

  const FimTokens named{checked_id(d.fim_pre_id, n, "FIM prefix"), checked_id(d.fim_suf_id, n, "FIM suffix"),
                        checked_id(d.fim_mid_id, n, "FIM middle")};
  if (named.complete()) {
    v->fim = named;
  } else {
    for (const auto& family : kFimTexts) {
      const FimTokens f{special_text(family[0]), special_text(family[1]), special_text(family[2])};
      if (f.complete()) {
        v->fim = f;
        break;
      }
    }
  }

  // Special texts are matched in the normalized text; SentencePiece pieces spell spaces
  // "▁" there (llama.cpp's converter stores user-defined ones with real spaces).
  for (size_t i = 0; i < n; ++i) {
    const TokenType t = v->types[i];
    const bool user = t == TokenType::UserDefined;
    if (!user && t != TokenType::Control && t != TokenType::Unknown) continue;
    const std::string& text = v->tokens[i];
    v->specials.add(spm && !v->added_tokens_raw ? tok_detail::spm_escape(text) : text, static_cast<int32_t>(i), !user);
  }
  return v;
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_data(TokenizerData d) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->vocab_ = build_vocab(d);  // takes everything but the merges, which only BPE needs
  const std::vector<std::string> merges = std::move(d.merges);
  if (t->vocab_->model == "gpt2") {
    if (t->vocab_->pre == "default")
      spdlog::warn("tokenizer: tokenizer.ggml.pre is 'default'; assuming the GPT-2 pre-tokenizer");
    t->encoder_ = tok_detail::make_bpe_encoder(*t->vocab_, merges);
  } else {
    t->encoder_ = tok_detail::make_spm_encoder(*t->vocab_);
  }
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  const Vocab& v = *vocab_;
  std::string cleaned;
  if (!utf8::is_valid(text)) {  // regexes and SentencePiece need well-formed UTF-8
    cleaned = utf8::sanitize(text);
    text = cleaned;
  }
  std::vector<int32_t> out;
  if (add_special && v.add_bos && v.bos >= 0) out.push_back(v.bos);
  // Special tokens are found in the normalized text (SentencePiece's and llama.cpp's order), or
  // in the raw text with each stretch between them normalized on its own (Hugging Face's
  // added tokens: added_tokens_raw).
  const std::string norm = v.added_tokens_raw ? std::string() : encoder_->normalize(text);
  const std::string_view searched = v.added_tokens_raw ? text : std::string_view(norm);
  out.reserve(searched.size() / 3 + 4);
  std::vector<tok_detail::SpecialMatcher::Piece> pieces;
  if (v.specials.empty()) {
    pieces.push_back({-1, searched});
  } else {
    v.specials.split(searched, parse_special, pieces);
  }
  std::string nfc_text;
  for (const auto& p : pieces) {
    if (p.id >= 0) {
      out.push_back(p.id);
      continue;
    }
    std::string_view piece = p.text;
    if (v.nfc) piece = nfc_text = utf8::nfc(piece);
    if (!v.added_tokens_raw) {
      encoder_->encode(piece, out);
    } else if (!piece.empty()) {
      encoder_->encode(encoder_->normalize(piece), out);
    }
  }

  if (add_special && v.add_eos && v.eos >= 0) out.push_back(v.eos);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id) const {
  const Vocab& v = *vocab_;
  if (id < 0 || id >= n_vocab()) return {};
  const std::string& text = v.tokens[static_cast<size_t>(id)];
  switch (v.type(id)) {
    case TokenType::Control:
    case TokenType::Unknown:
      return text;
    case TokenType::UserDefined:
      // Stored raw (HF added tokens); SentencePiece ones may spell spaces "▁".
      return v.model == "llama" ? tok_detail::spm_unescape(text) : text;
    case TokenType::Byte: {
      const int b = byte_token_value(text);
      return b >= 0 ? std::string(1, static_cast<char>(b)) : text;
    }
    default:
      return encoder_->piece(id);
  }
}

bool Tokenizer::normalizes_nfc() const { return vocab_->nfc; }
bool Tokenizer::strips_leading_space() const { return vocab_->add_space_prefix; }

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    const TokenType t = token_type(id);
    const bool special = t == TokenType::Control || t == TokenType::Unknown;
    if (skip_special && special) continue;
    std::string piece = token_to_piece(id);
    // Undo SentencePiece's dummy prefix: the first word's "▁" is not part of the text.
    if (first && !special && strips_leading_space() && !piece.empty() && piece[0] == ' ')
      piece.erase(0, 1);
    first = false;
    out += piece;
  }
  return out;
}

int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(vocab_->tokens.size()); }
int32_t Tokenizer::bos() const { return vocab_->bos; }
int32_t Tokenizer::eos() const { return vocab_->eos; }
int32_t Tokenizer::eot() const { return vocab_->eot; }
bool Tokenizer::add_bos() const { return vocab_->add_bos; }
bool Tokenizer::add_eos() const { return vocab_->add_eos; }
std::string Tokenizer::model() const { return vocab_->model; }
std::string Tokenizer::pre() const { return vocab_->pre; }

bool Tokenizer::is_eog(int32_t id) const {
  return std::binary_search(vocab_->eog.begin(), vocab_->eog.end(), id);
}

TokenType Tokenizer::token_type(int32_t id) const {
  return id >= 0 && id < n_vocab() ? vocab_->type(id) : TokenType::Undefined;
}

std::optional<FimTokens> Tokenizer::fim() const {
  if (!vocab_->fim.complete()) return std::nullopt;
  return vocab_->fim;
}

bool Tokenizer::is_control(int32_t id) const { return token_type(id) == TokenType::Control; }

const std::string& Tokenizer::token_text(int32_t id) const {
  static const std::string empty;
  return id >= 0 && id < n_vocab() ? vocab_->tokens[static_cast<size_t>(id)] : empty;
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  const int32_t id = vocab_->find(text);
  return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
}

}  // namespace tandem
