// The libFuzzer entry points every harness in tests/fuzz/ defines. Built with the `fuzz`
// preset (clang, -fsanitize=fuzzer) each harness is a fuzzer; built with any compiler
// against replay_main.cpp it is a plain executable that runs the inputs it is given
// (files, or directories of files), which is how ctest replays the corpora.
//
// A harness returns normally for every input, valid or not: inputs the code rejects with
// its documented exception are fine. Anything else (a crash, a sanitizer report, another
// exception escaping, a violated invariant: fuzz_check) is a bug.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <spdlog/spdlog.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv);

// An invariant of the code under test: abort (a finding) when it does not hold.
#define fuzz_check(cond)                                                                       \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "fuzz_check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);      \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

// Chat templates' budgets under the fuzzer (ChatTemplate::Limits): the defaults end a
// runaway template in about a second of a release build but a minute instrumented, where a
// campaign would stop at its first such input. These end it in milliseconds; every way a
// template can reach a limit is still reached.
inline constexpr uint64_t kFuzzTemplateIterations = 100'000;
inline constexpr uint64_t kFuzzTemplateWorkBytes = uint64_t{16} << 20;

// The code's warnings (a GGUF's odd tokenizer keys, say) would print for most inputs and
// cost more than the input itself: only errors are printed, unless FUZZ_VERBOSE is set.
inline void fuzz_quiet_logs() {
  if (!std::getenv("FUZZ_VERBOSE")) spdlog::set_level(spdlog::level::err);
}
