// Writes tiny random-weight GGUF models, so that tests of the installed tree and of the
// server binary need no download:
//   make_fixture OUT.gguf        one model (what the install test runs the examples on)
//   make_fixture --pair DIR      DIR/target.gguf and DIR/draft.gguf: one vocabulary, the draft
//                                of another shape (fewer layers and KV heads: the two
//                                caches share the KV pool with different block sizes); the
//                                server-on-CUDA test's pair
#include <cstdio>
#include <exception>
#include <string>

#include "tests/support/tiny_model.hpp"

int main(int argc, char** argv) {
  const bool pair = argc == 3 && std::string(argv[1]) == "--pair";
  if (argc != 2 && !pair) {
    std::fprintf(stderr, "usage: %s OUT.gguf | --pair DIR\n", argv[0]);
    return 2;
  }
  try {
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
