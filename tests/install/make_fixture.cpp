// Writes tiny random-weight GGUF models, so that tests of the installed tree and of the
// server binary need no download:
//   make_fixture OUT.gguf        one model (what the install test runs the examples on)
//   make_fixture --pair DIR      DIR/target.gguf and DIR/draft.gguf: one vocabulary, the draft
//                                of another shape (fewer layers and KV heads: the two
//                                caches share the KV pool with different block sizes); the
//                                server-on-CUDA test's pair
//   make_fixture --shape NAME OUT.gguf
//                                random weights in the shapes and weight types of a real
//                                model (qwen2.5-coder-1.5b, qwen2.5-coder-0.5b, smollm2-135m,
//                                gemma3-270m, tiny): what the GPU check times where no real GGUF can
//                                travel. The text vocabulary is small; the embedding and
//                                output rows are the real count, so every matmul has its
//                                real shape. Not for text: the weights are noise.
#include <cstdio>
#include <exception>
#include <string>

#include "tests/support/tiny_model.hpp"

namespace {

// The shapes of the fetched GGUFs (docs/models.md) and the types most of their weights have;
// Q4_K_M's mixes (attn_v and ffn_down of other types in half the layers) as the files have
// them, in the odd layers here.
bool real_shape(const std::string& name, tandem::test::TinyModelSpec& s) {
  using tandem::DType;
  s.n_vocab = 1024;
  s.n_ctx = 32768;
  s.tied_embeddings = true;
  if (name == "qwen2.5-coder-1.5b") {
    s.arch = "qwen2", s.n_embd = 1536, s.n_layer = 28, s.n_head = 12, s.n_head_kv = 2, s.n_ff = 8960;
    s.vocab_rows = 151936, s.rope_theta = 1e6f, s.rms_eps = 1e-6f;
    s.weight_type = DType::Q4_K, s.mixed_type = DType::Q6_K, s.embd_type = DType::Q6_K;
  } else if (name == "qwen2.5-coder-0.5b") {  // 896 columns are not whole 256-blocks
    s.arch = "qwen2", s.n_embd = 896, s.n_layer = 24, s.n_head = 14, s.n_head_kv = 2, s.n_ff = 4864;
    s.vocab_rows = 151936, s.rope_theta = 1e6f, s.rms_eps = 1e-6f;
    s.weight_type = DType::Q5_0, s.mixed_type = DType::Q8_0, s.embd_type = DType::Q8_0;
  } else if (name == "gemma3-270m") {  // 640 columns: Q5_0 (the file's output and down projections are Q4_K)
    s.arch = "gemma3", s.n_embd = 640, s.n_layer = 18, s.n_head = 4, s.n_head_kv = 1, s.head_dim = 256, s.n_ff = 2048;
    s.vocab_rows = 262144, s.rope_theta = 1e6f, s.rms_eps = 1e-6f, s.sliding_window = 512;
    s.weight_type = DType::Q5_0, s.mixed_type = DType::Q8_0, s.embd_type = DType::Q8_0;
  } else if (name == "smollm2-135m") {
    s.arch = "llama", s.n_embd = 576, s.n_layer = 30, s.n_head = 9, s.n_head_kv = 3, s.n_ff = 1536;
    s.vocab_rows = 49152, s.rope_theta = 1e5f;
    s.weight_type = DType::Q4_1, s.embd_type = DType::Q8_0;
  } else if (name == "tiny") {
    s = {};
  } else {
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const bool pair = argc == 3 && std::string(argv[1]) == "--pair";
  const bool shape = argc == 4 && std::string(argv[1]) == "--shape";
  if (argc != 2 && !pair && !shape) {
    std::fprintf(stderr, "usage: %s OUT.gguf | --pair DIR | --shape qwen2.5-coder-1.5b|qwen2.5-coder-0.5b|smollm2-135m|gemma3-270m|tiny OUT.gguf\n",
                 argv[0]);
    return 2;
  }
  try {
    if (shape) {
      tandem::test::TinyModelSpec s;
      if (!real_shape(argv[2], s)) {
        std::fprintf(stderr, "unknown shape '%s'\n", argv[2]);
        return 2;
      }
      tandem::test::write_tiny_model(argv[3], s);
      return 0;
    }
    if (!pair) {
      tandem::test::write_tiny_model(argv[1], tandem::test::TinyModelSpec{});
      return 0;
    }
    const std::string dir = argv[2];
    tandem::test::TinyModelSpec t;
    t.arch = "qwen2";
    t.n_layer = 3;
    t.n_ctx = 512;
    t.seed = 21;
    tandem::test::write_tiny_model(dir + "/target.gguf", t);
    tandem::test::TinyModelSpec d = t;
    d.n_layer = 2;
    d.n_head_kv = 1;
    d.seed = 22;
    tandem::test::write_tiny_model(dir + "/draft.gguf", d);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
