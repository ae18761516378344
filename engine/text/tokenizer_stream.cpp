// StreamDecoder: turns tokens into displayable text one at a time. A token may end in the
// middle of a UTF-8 character (byte-fallback tokens, byte-level BPE pieces), so bytes of an
// incomplete character wait for the next token; ill-formed bytes become U+FFFD.
#include "engine/text/tokenizer.hpp"
#include "engine/text/utf8.hpp"

namespace tandem {

StreamDecoder::StreamDecoder(const Tokenizer& t, bool skip_special)
    : tok_(t), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
  const TokenType t = tok_.token_type(id);
  const bool special = t == TokenType::Control || t == TokenType::Unknown;
  if (skip_special_ && special) return {};
  std::string piece = tok_.token_to_piece(id);
  // Same rule as Tokenizer::decode: drop the SentencePiece dummy-prefix space once.
  if (at_start_ && !special && tok_.strips_leading_space() && !piece.empty() && piece[0] == ' ')
    piece.erase(0, 1);
  at_start_ = false;
  pending_ += piece;

  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    const utf8::Decoded d = utf8::decode_one(pending_, pos);
    if (d.status == utf8::Decoded::Status::Truncated) break;  // wait for the rest
    if (d.status == utf8::Decoded::Status::Ok) {
      out.append(pending_, pos, d.len);
    } else {
      utf8::append(out, utf8::kReplacement);
    }
    pos += d.len;
  }
  pending_.erase(0, pos);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8::sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace tandem
