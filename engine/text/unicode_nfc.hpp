// Unicode Normalization Form C (UAX #15): canonical decomposition, canonical ordering, then
// canonical composition. What the NFC normalizer of a Hugging Face tokenizer.json (Qwen2's)
// does to text before it is split into pieces. Data: unicode_nfc_tables.cpp.
#pragma once
#include <string>
#include <string_view>

namespace tandem::utf8 {

// `s` must be well-formed UTF-8 (the tokenizer repairs its input first). Text that is
// already NFC comes back unchanged; pure ASCII is returned without being looked at.
std::string nfc(std::string_view s);

}  // namespace tandem::utf8
