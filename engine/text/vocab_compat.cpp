#include "engine/text/vocab_compat.hpp"

#include <algorithm>
#include <cstdlib>

#include "engine/text/tokenizer.hpp"
#include "engine/text/tokenizer_internal.hpp"

namespace tandem {
namespace {

std::string shown(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s.substr(0, 40)) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += static_cast<char>(c);
    } else if (c < 0x20) {
      static const char* hex = "0123456789abcdef";
      o += "\\x";
      o += hex[c >> 4];
      o += hex[c & 15];
    } else {
      o += static_cast<char>(c);
    }
  }
  return o + (s.size() > 40 ? "...\"" : "\"");
}

}  // namespace

std::string vocab_incompatibility(const Tokenizer& t, const Tokenizer& d) {
  if (t.model() != d.model())
    return "tokenizer types differ: target '" + t.model() + "', draft '" + d.model() + "'";
  if (t.pre() != d.pre() && !tok_detail::Pretokenizer::same_rules(t.pre(), d.pre()))
    return "pre-tokenizers differ: target '" + t.pre() + "', draft '" + d.pre() + "'";
  // Normalization (NFC, which a Hugging Face tokenizer.json may ask for and a GGUF file does
  // not record) is not compared: the draft reads the target's token ids, never text.
  if (std::abs(t.n_vocab() - d.n_vocab()) > kMaxVocabSizeDifference)
    return "vocabulary sizes differ by more than " + std::to_string(kMaxVocabSizeDifference) + ": target " +
           std::to_string(t.n_vocab()) + ", draft " + std::to_string(d.n_vocab());
  if (t.bos() != d.bos())
    return "BOS tokens differ: target " + std::to_string(t.bos()) + ", draft " + std::to_string(d.bos());
  if (t.eos() != d.eos())
    return "EOS tokens differ: target " + std::to_string(t.eos()) + ", draft " + std::to_string(d.eos());
  if (t.add_bos() != d.add_bos()) return "the models disagree on adding BOS to prompts";
  const int32_t n = std::min(t.n_vocab(), d.n_vocab());
  for (int32_t id = 0; id < n; ++id) {
    if (t.token_text(id) != d.token_text(id))
      return "token " + std::to_string(id) + " differs: target " + shown(t.token_text(id)) + ", draft " +
             shown(d.token_text(id));
    if (t.is_control(id) != d.is_control(id))
      return "token " + std::to_string(id) + " " + shown(t.token_text(id)) + " is a control token in only one model";
  }
  return {};
}

}  // namespace tandem
