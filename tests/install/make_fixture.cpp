// Writes a tiny random-weight GGUF model to argv[1]: what the install test runs the
// installed examples on, so it needs no download.
#include <cstdio>
#include <exception>

#include "tests/support/tiny_model.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.gguf\n", argv[0]);
    return 2;
  }
  try {
    tandem::test::write_tiny_model(argv[1], tandem::test::TinyModelSpec{});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
