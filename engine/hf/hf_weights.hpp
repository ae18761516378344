// The tensors of a Hugging Face checkpoint under the GGUF names and shapes the model loader
// binds (llama.cpp's conventions, so that one loader serves both formats):
//   * matrices (F32, F16, BF16) are used as stored, straight from the shard's mapping: a
//     PyTorch [out, in] row-major weight is GGUF's [in, out] with the same bytes;
//   * Llama's q and k rows are permuted from the checkpoint's half-split RoPE pairs to the
//     adjacent pairs the engine's Llama path rotates (what llama.cpp's converter does);
//   * norms and biases become F32, and Gemma's norms, stored as w for x·(1 + w), become 1 + w.
// A tensor the architecture does not have is an error naming it; so is a dtype the engine
// cannot compute with.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/gguf/gguf.hpp"
#include "engine/hf/checkpoint.hpp"
#include "engine/hf/hf_config.hpp"

namespace tandem::hf {

struct MappedWeights {
  std::vector<gguf::File::ExternalTensor> tensors;
  std::shared_ptr<const void> owner;  // the checkpoint's mappings and the converted copies
};

MappedWeights map_weights(std::shared_ptr<const Checkpoint> ckpt, const HfArch& arch, const std::string& dir);

// The GGUF name of a checkpoint tensor; "" for tensors the engine does not need (rotary
// caches some checkpoints store). Throws std::runtime_error for a name the architecture
// does not have.
std::string gguf_tensor_name(const std::string& hf_name, const std::string& gguf_arch);

}  // namespace tandem::hf
