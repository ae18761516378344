// What a KV cache needs to know of its model.
#pragma once
#include <cstdint>

namespace tandem {

// How many layers, and the width of one token's keys (= of its values) in a layer.
// ModelConfig converts to it (engine/model/).
struct KVShape {
  int32_t n_layer = 0;
  int64_t kv_width = 0;  // n_head_kv * head_dim
};

}  // namespace tandem
