// config.json of a Hugging Face model folder → the `<arch>.*` GGUF metadata the model loader
// reads (engine/model/model_config.cpp), for the architectures the engine runs: Qwen2
// (Qwen2ForCausalLM), Llama (LlamaForCausalLM: Llama 2/3 shapes, SmolLM2) and Gemma 3's text
// model (Gemma3ForCausalLM). Whatever the engine would compute differently from the
// checkpoint's own definition (RoPE scaling, soft-capping, biases it has no slot for, another
// layer pattern) is refused with the key and value named, never ignored.
#pragma once
#include <boost/json/object.hpp>
#include <string>

#include "engine/gguf/gguf_writer.hpp"

namespace tandem::hf {

// What the tensors' mapping needs of the config (the rest goes into the metadata only).
struct HfArch {
  std::string gguf_arch;  // "qwen2" | "llama" | "gemma3"
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0;
  int64_t n_vocab = 0;  // vocab_size: the embedding's rows
  bool tied_embeddings = false;
};

// Fills `w` with general.architecture, general.name and the architecture's keys. `file` names
// config.json in errors; `name` becomes general.name. Throws std::runtime_error.
HfArch write_config_metadata(const boost::json::object& cfg, const std::string& file, const std::string& name,
                             gguf::Writer& w);

}  // namespace tandem::hf
