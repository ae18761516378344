#include "engine/hf/model_file.hpp"

#include <sys/stat.h>

#include <stdexcept>

#include "engine/gguf/gguf_writer.hpp"
#include "engine/hf/checkpoint.hpp"
#include "engine/hf/hf_config.hpp"
#include "engine/hf/hf_json.hpp"
#include "engine/hf/hf_tokenizer.hpp"
#include "engine/hf/hf_weights.hpp"

namespace tandem {

bool is_model_folder(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::unique_ptr<gguf::File> open_model_file(const std::string& path, bool tensors) {
  if (is_model_folder(path)) return hf::open_folder(path, tensors);
  return gguf::File::open(path);
}

namespace hf {

std::unique_ptr<gguf::File> open_folder(const std::string& dir_in, bool tensors) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::string cfg_path = dir + "/config.json";
  if (!file_exists(cfg_path))
    throw std::runtime_error(dir + ": not a model folder (no config.json; a GGUF model is a file)");
  const size_t slash = dir.find_last_of('/');
  const std::string name = slash == std::string::npos ? dir : dir.substr(slash + 1);

  gguf::Writer w;
  const HfArch arch = write_config_metadata(read_json_object(cfg_path), cfg_path, name, w);
  write_tokenizer_metadata(dir, w);
  if (!tensors) return gguf::File::assemble(dir, w.to_bytes(), {}, nullptr);
  std::shared_ptr<const Checkpoint> ckpt = Checkpoint::open(dir);
  MappedWeights m = map_weights(ckpt, arch, dir);
  bool has_head = false;
  for (const gguf::File::ExternalTensor& t : m.tensors) {
    has_head |= t.name == "output.weight";
    if (t.name == "token_embd.weight" && t.dims.size() == 2 && t.dims[1] != arch.n_vocab)
      throw std::runtime_error(dir + ": model.embed_tokens.weight has " + std::to_string(t.dims[1]) +
                               " rows, config.json's vocab_size is " + std::to_string(arch.n_vocab));
  }
  if (!has_head && !arch.tied_embeddings)
    throw std::runtime_error(dir + ": no lm_head.weight, and config.json says the embeddings are not tied");
  return gguf::File::assemble(dir, w.to_bytes(), std::move(m.tensors), std::move(m.owner));
}

}  // namespace hf
}  // namespace tandem
