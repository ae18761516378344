// Opening a model by path, whatever its format: a GGUF file, or a Hugging Face model folder
// (config.json, *.safetensors, tokenizer.json ...) presented as the same gguf::File, so that
// the loader, the tokenizer and the chat template read both alike.
#pragma once
#include <memory>
#include <string>

#include "engine/gguf/gguf.hpp"

namespace tandem {

// Whether `path` is a directory (a Hugging Face model folder, or meant to be one).
bool is_model_folder(const std::string& path);

// A GGUF file, or a model folder (hf::open_folder). Throws std::runtime_error (gguf::Error
// for GGUF files) naming the path and the problem. Without `tensors` a folder's weights are
// not opened (for readers of the metadata: the chat template, the special tokens).
std::unique_ptr<gguf::File> open_model_file(const std::string& path, bool tensors = true);

namespace hf {
// The folder as a gguf::File: its metadata built from config.json and the tokenizer files,
// its tensors the checkpoint's (hf_weights.hpp), mapped, not copied, where stored as used.
std::unique_ptr<gguf::File> open_folder(const std::string& dir, bool tensors = true);
}  // namespace hf

}  // namespace tandem
