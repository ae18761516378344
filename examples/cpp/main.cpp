// tandem C++ API example: load a model (and optionally a draft model), stream a greedy
// generation with speculative decoding (the draft model, else n-gram lookup), print the
// metrics.
//
//   tandem_example_cpp MODEL.gguf [PROMPT] [N_TOKENS] [DRAFT.gguf]
//
// Build against an installed tandem, with CMake (see CMakeLists.txt here):
//   cmake -S . -B build -DCMAKE_PREFIX_PATH=/path/to/prefix && cmake --build build
// or with pkg-config:
//   c++ -std=c++20 main.cpp $(pkg-config --cflags --libs tandem) -o tandem_example_cpp
//
// stdout gets the text and the deterministic counts; timings go to stderr.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <tandem/engine.hpp>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [PROMPT] [N_TOKENS] [DRAFT.gguf]\n", argv[0]);
    return 2;
  }
  const std::string prompt = argc > 2 ? argv[2] : "Hello";
  try {
    tandem::LoadOptions load;
    load.model_path = argv[1];
    if (argc > 4) load.draft_model_path = argv[4];
    auto engine = tandem::Engine::load(load);  // throws std::runtime_error naming the problem
    const tandem::ModelInfo info = engine->info();
    std::fprintf(stderr, "tandem %s: model %s (%s, %d layers, vocab %d), %s\n", tandem::version_string(),
                 info.name.c_str(), info.architecture.c_str(), info.n_layer, info.n_vocab, info.backend.c_str());

    tandem::GenerateOptions opts;
    opts.max_tokens = argc > 3 ? std::atoi(argv[3]) : 16;
    opts.sampling.temperature = 0;  // greedy: reproducible
    opts.ignore_eos = true;
    opts.speculative.mode = load.draft_model_path.empty() ? tandem::DraftMode::Ngram : tandem::DraftMode::Model;
    opts.speculative.draft_max = 4;

    std::fputs(prompt.c_str(), stdout);
    const tandem::GenerateResult r = engine->generate(prompt, opts, [](std::string_view piece, int32_t) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;  // false (or engine->cancel() from another thread) would cancel
    });
    const tandem::SpeculativeMetrics& m = r.speculative;
    std::printf("\nfinish: %s, %zu tokens\n", tandem::to_string(r.finish), r.tokens.size());
    std::printf("speculative: %s k=%d, %lld drafts, %lld drafted, %lld accepted (acceptance %.3f)\n",
                opts.speculative.mode == tandem::DraftMode::Model ? "model" : "ngram", opts.speculative.draft_max,
                static_cast<long long>(m.drafts), static_cast<long long>(m.drafted_tokens),
                static_cast<long long>(m.accepted_tokens), m.acceptance_rate());
    std::fprintf(stderr, "prefill %.1f tok/s, decode %.1f tok/s\n", r.timings.prefill_tokens_per_s(),
                 r.timings.decode_tokens_per_s());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
