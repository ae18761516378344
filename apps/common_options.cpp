#include "apps/common_options.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <stdexcept>

#include "kernels/backend_factory.hpp"
#include "tandem/engine.hpp"

namespace tandem::cli {

void add_sampling_options(CLI::App& sub, SamplingParams& s) {
  sub.add_option("--temp", s.temperature, "Temperature (0 = greedy)")->capture_default_str();
  sub.add_option("--top-k", s.top_k, "Top-k (0 = off)")->capture_default_str();
  sub.add_option("--top-p", s.top_p, "Top-p (1 = off)")->capture_default_str();
  sub.add_option("--min-p", s.min_p, "Min-p (0 = off)")->capture_default_str();
  sub.add_option("--repeat-penalty", s.repetition_penalty, "Repetition penalty (1 = off)")->capture_default_str();
  sub.add_option("--seed", s.seed, "Random seed")->capture_default_str();
}

void add_verify_option(CLI::App& sub, VerifyMode& mode) {
  sub.add_option_function<std::string>(
         "--verify", [&mode](const std::string& v) { mode = parse_verify_mode(v); },
         "Sampled output: rejection (highest acceptance; the text for a seed depends on k and batching) or coupled "
         "(Gumbel-max keyed by seed and position: the same text with or without speculation)")
      ->check(CLI::IsMember({"rejection", "coupled"}))
      ->default_str(to_string(mode));
}

void add_runtime_options(CLI::App& sub, LoadOptions& load) {
  sub.add_option("-t,--threads", load.threads, "CPU threads (0 = all cores)")->capture_default_str();
  sub.add_flag("--pin-threads", load.pin_threads, "Bind each CPU worker thread to one core");
  sub.add_option("-c,--ctx", load.context, "Context length (0 = min(model, 4096))")->capture_default_str();
  sub.add_option("--kv-type", load.kv_type, "KV cache type: f16|f32")->capture_default_str();
  sub.add_option("--device", load.device,
                 "Backend: auto (CUDA when a device is present, else CPU), cpu, cuda, cuda-emulated (tests)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda", "cuda-emulated"}))
      ->capture_default_str();
  sub.add_option_function<std::string>(
      "--gpu-mem", [&load](const std::string& v) { load.gpu_mem_bytes = parse_size("--gpu-mem", v); },
      "CUDA: device memory for both models' weights, KV caches and scratch (e.g. 20GiB; default 90% of free)");
}

size_t parse_size(const std::string& flag, const std::string& s) {
  size_t bytes = 0;
  try {
    bytes = kernels::parse_memory_size(s);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(flag + ": " + e.what());
  }
  if (bytes == 0) throw std::invalid_argument(flag + " must be positive");
  return bytes;
}

void print_backend_note(const ModelInfo& info) {
  if (!info.backend_note.empty()) std::fprintf(stderr, "note: %s\n", info.backend_note.c_str());
}

}  // namespace tandem::cli
