#include "apps/common_options.hpp"

#include <CLI/CLI.hpp>

#include <cctype>
#include <cstdio>
#include <stdexcept>

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
  size_t end = 0;
  double v = 0;
  try {
    v = std::stod(s, &end);
  } catch (const std::exception&) {
    throw std::invalid_argument(flag + ": not a size: " + s);
  }
  std::string unit = s.substr(end);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mul = 1;
  if (unit.empty() || unit == "b") mul = 1;
  else if (unit == "k" || unit == "kib") mul = 1024.0;
  else if (unit == "m" || unit == "mib") mul = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib") mul = 1024.0 * 1024 * 1024;
  else if (unit == "kb") mul = 1e3;
  else if (unit == "mb") mul = 1e6;
  else if (unit == "gb") mul = 1e9;
  else throw std::invalid_argument(flag + ": unknown unit '" + unit + "' (use bytes, KiB, MiB, GiB, KB, MB, GB)");
  if (!(v > 0)) throw std::invalid_argument(flag + " must be positive");
  return static_cast<size_t>(v * mul);
}

void print_backend_note(const ModelInfo& info) {
  if (!info.backend_note.empty()) std::fprintf(stderr, "note: %s\n", info.backend_note.c_str());
}

}  // namespace tandem::cli
