#include "engine/model/prefill.hpp"

#include <algorithm>

namespace tandem {

void prefill(Transformer& tf, SequenceKV& seq, std::span<const int32_t> tokens, PrefillLogits want,
             std::vector<float>& logits) {
  logits.clear();
  std::vector<float> chunk_logits;
  for (size_t i = 0; i < tokens.size(); i += kPrefillChunk) {
    const auto chunk = tokens.subspan(i, std::min<size_t>(kPrefillChunk, tokens.size() - i));
    const bool last = i + chunk.size() == tokens.size();
    Batch b;
    if (want == PrefillLogits::All) {
      b.add_all_logits(seq, chunk);
    } else if (want == PrefillLogits::Last && last) {
      b.add(seq, chunk);  // logits of the final token only
    } else {
      b.add(seq, chunk, std::vector<bool>(chunk.size(), false));
    }
    tf.forward(b, chunk_logits);
    logits.insert(logits.end(), chunk_logits.begin(), chunk_logits.end());
  }
}

}  // namespace tandem
