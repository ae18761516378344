// `tandem info`: what a model holds (metadata and tensors), without loading weights: a GGUF
// file, or a Hugging Face folder as the engine reads it (its GGUF names and metadata).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>
#include <memory>

#include "apps/commands.hpp"
#include "engine/gguf/gguf.hpp"
#include "engine/hf/model_file.hpp"
#include "engine/model/model_config.hpp"

namespace tandem::cli {

Command add_info(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto tensors = std::make_shared<bool>(false);
  auto* sub = app.add_subcommand("info", "Show a model's metadata and tensors");
  sub->add_option("model", *path, "Model: a GGUF file or a Hugging Face folder")->required()->check(CLI::ExistingPath);
  sub->add_flag("--tensors", *tensors, "List every tensor");
  return {sub, [path, tensors] {
    auto f = open_model_file(*path);
    if (is_model_folder(*path))
      std::printf("folder: %s\nHugging Face checkpoint, %zu tensors (under their GGUF names)\n", path->c_str(),
                  f->tensors().size());
    else
      std::printf("file: %s\nGGUF version %u, %zu bytes, %zu tensors\n", path->c_str(), f->version(), f->file_size(),
                  f->tensors().size());
    for (const auto& k : f->keys()) std::printf("  %s = %s\n", k.c_str(), f->value_to_string(k).c_str());
    std::map<std::string, std::pair<int, size_t>> mix;
    for (const auto& t : f->tensors()) {
      auto& m = mix[dtype_name(t.type)];
      ++m.first;
      m.second += t.nbytes;
      if (*tensors) std::printf("  tensor %-40s %-6s %zu bytes\n", t.name.c_str(), dtype_name(t.type), t.nbytes);
    }
    std::printf("tensor types:");
    for (const auto& [name, m] : mix) std::printf(" %s x%d (%.1f MiB)", name.c_str(), m.first, m.second / 1048576.0);
    std::printf("\n");
    try {
      const ModelConfig c = read_model_config(*f);
      std::printf("model: %s, %d layers, d=%d, heads %d/%d (head dim %d), ff %d, vocab %d, ctx %d\n",
                  c.arch_name.c_str(), c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.n_ff, c.n_vocab,
                  c.n_ctx_train);
    } catch (const std::exception& e) {
      std::printf("not loadable: %s\n", e.what());
    }
    return 0;
  }};
}

}  // namespace tandem::cli
