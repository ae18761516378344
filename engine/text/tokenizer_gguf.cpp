// Fills TokenizerData from the `tokenizer.ggml.*` keys of a GGUF file. This is the only
// tokenizer file that knows about the GGUF reader.
#include <stdexcept>

#include "engine/gguf/gguf.hpp"
#include "engine/text/tokenizer.hpp"

namespace tandem {

namespace {

int32_t id_or_none(const gguf::File& f, const char* key) {
  const std::optional<int64_t> v = f.get_int(key);
  // Ids are UINT32 in the file; anything beyond int32 cannot index a vocabulary.
  return v && *v >= 0 && *v <= INT32_MAX ? static_cast<int32_t>(*v) : -1;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& f) {
  TokenizerData d;
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model) throw std::runtime_error(f.path() + ": no tokenizer (tokenizer.ggml.model missing)");
  d.model = *model;
  d.pre = f.get_string("tokenizer.ggml.pre").value_or("default");

  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) throw std::runtime_error(f.path() + ": tokenizer.ggml.tokens missing");
  d.tokens = std::move(*tokens);
  if (auto s = f.get_float_array("tokenizer.ggml.scores")) d.scores = std::move(*s);
  if (auto t = f.get_int_array("tokenizer.ggml.token_type")) {
    d.token_types.reserve(t->size());
    for (int64_t x : *t) d.token_types.push_back(x >= 0 && x <= 6 ? static_cast<int32_t>(x) : 0);
  }
  if (auto m = f.get_string_array("tokenizer.ggml.merges")) d.merges = std::move(*m);

  d.bos_id = id_or_none(f, "tokenizer.ggml.bos_token_id");
  d.eos_id = id_or_none(f, "tokenizer.ggml.eos_token_id");
  d.eot_id = id_or_none(f, "tokenizer.ggml.eot_token_id");
  d.eom_id = id_or_none(f, "tokenizer.ggml.eom_token_id");
  d.unk_id = id_or_none(f, "tokenizer.ggml.unknown_token_id");
  d.pad_id = id_or_none(f, "tokenizer.ggml.padding_token_id");
  // (Older converters named the FIM markers prefix/suffix/middle_token_id.)
  d.fim_pre_id = id_or_none(f, "tokenizer.ggml.fim_pre_token_id");
  if (d.fim_pre_id < 0) d.fim_pre_id = id_or_none(f, "tokenizer.ggml.prefix_token_id");
  d.fim_suf_id = id_or_none(f, "tokenizer.ggml.fim_suf_token_id");
  if (d.fim_suf_id < 0) d.fim_suf_id = id_or_none(f, "tokenizer.ggml.suffix_token_id");
  d.fim_mid_id = id_or_none(f, "tokenizer.ggml.fim_mid_token_id");
  if (d.fim_mid_id < 0) d.fim_mid_id = id_or_none(f, "tokenizer.ggml.middle_token_id");
  d.add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
  d.add_eos = f.get_bool("tokenizer.ggml.add_eos_token");
  d.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix");
  // Set for Hugging Face folders (engine/hf) whose tokenizer.json normalizes.
  if (const auto norm = f.get_string("tandem.tokenizer.normalizer")) {
    if (*norm != "nfc") throw std::runtime_error(f.path() + ": unknown tokenizer normalizer '" + *norm + "'");
    d.nfc = true;
  }
  d.added_tokens_raw = f.get_bool("tandem.tokenizer.added_tokens_raw").value_or(false);

  try {
    return from_data(std::move(d));
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(f.path() + ": " + e.what());
  }
}

}  // namespace tandem
