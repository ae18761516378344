// Hugging Face model folders for tests: a safetensors writer, and a tiny fixture model
// (tiny_model.hpp) written as a folder holding the same weights, so that a folder's load can
// be compared with the GGUF's bit for bit. The folder is what transformers' save_pretrained
// writes: config.json, *.safetensors (sharded with an index when asked), tokenizer.json,
// tokenizer_config.json (with the chat template) and generation_config.json. Written
// independently of engine/hf: the names, layouts and JSON follow the published formats.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tests/support/tiny_model.hpp"

namespace tandem::test {

struct StTensor {
  std::string name;
  std::string dtype;           // "F32", "BF16", "F16", "I64" ...
  std::vector<int64_t> shape;  // row-major
  std::vector<uint8_t> bytes;
};
// The file as the format defines it (header padded with spaces to 8 bytes, tensors back to
// back in order).
void write_safetensors(const std::string& path, const std::vector<StTensor>& tensors);
std::vector<uint8_t> safetensors_bytes(const std::vector<StTensor>& tensors, const std::string& header_extra = "");

struct TinyHfOptions {
  int shards = 1;  // > 1: model-0000i-of-0000n.safetensors and model.safetensors.index.json
};

// Writes `spec` as a GGUF at `gguf_path` (write_tiny_model) and as a folder at `dir` holding
// the same weights. The spec's weights must be F32, F16 or BF16 (a folder holds floats).
void write_tiny_hf(const std::string& dir, const std::string& gguf_path, const TinyModelSpec& spec,
                   const TinyHfOptions& opts = {});

// The folder of an existing GGUF (any of the three architectures, float weights).
void gguf_to_tiny_hf(const std::string& gguf_path, const std::string& dir, const TinyHfOptions& opts = {});

}  // namespace tandem::test
