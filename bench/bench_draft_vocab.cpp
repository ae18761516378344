// The reduced draft vocabulary (FR-Spec) per size, and the draft's weight type
// (--draft-type) per type, measured side by side in one run: for each prompt, plain
// decoding and draft-model speculation with every (type, size) in turn (interleaved, so
// machine noise hits all alike; one engine per type, the draft re-quantized as it loads).
// Per pair: acceptance, mean accepted length E, the draft's forward time and c (one draft
// forward over one plain target pass), decode tokens/s and the speedup over the plain runs.
//
//   bench_draft_vocab -m TARGET.gguf -md DRAFT.gguf [--sizes 0,8192,16384,32768]
//                     [--types keep,q4_0] [--counts COUNTS.txt] [-n 96] [-k 4] [--temp 0]
//                     [--reps 1] [-t N]
//
// Prompts: bench/prompts.jsonl's code prompts in ChatML (the Qwen2.5 and SmolLM2 markup).
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tandem/engine.hpp"

namespace {

std::vector<std::string> code_prompts() {
  std::ifstream f(TANDEM_BENCH_DIR "/prompts.jsonl");
  std::vector<std::string> out;
  std::string line;
  const std::string key = "\"prompt\": \"";
  while (std::getline(f, line)) {
    if (line.find("\"category\": \"code\"") == std::string::npos) continue;
    const size_t a = line.find(key);
    if (a == std::string::npos) continue;
    const size_t b = line.rfind("\"}");
    std::string p = line.substr(a + key.size(), b - a - key.size());
    out.push_back("<|im_start|>user\n" + p + "<|im_end|>\n<|im_start|>assistant\n");
  }
  return out;
}

struct Totals {
  double ms = 0;
  int64_t tokens = 0;
  tandem::SpeculativeMetrics m;
};

}  // namespace

int main(int argc, char** argv) {
  std::string target, draft, counts, sizes_arg = "0,8192,16384,32768", types_arg = "keep";
  int n = 96, k = 4, reps = 1, threads = 0;
  float temp = 0.0f;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (!std::strcmp(argv[i], "-m")) target = next();
    else if (!std::strcmp(argv[i], "-md")) draft = next();
    else if (!std::strcmp(argv[i], "--sizes")) sizes_arg = next();
    else if (!std::strcmp(argv[i], "--counts")) counts = next();
    else if (!std::strcmp(argv[i], "--types")) types_arg = next();
    else if (!std::strcmp(argv[i], "-n")) n = std::stoi(next());
    else if (!std::strcmp(argv[i], "-k")) k = std::stoi(next());
    else if (!std::strcmp(argv[i], "--temp")) temp = std::stof(next());
    else if (!std::strcmp(argv[i], "--reps")) reps = std::stoi(next());
    else if (!std::strcmp(argv[i], "-t")) threads = std::stoi(next());
    else {
      std::fprintf(stderr,
                   "usage: %s -m TARGET -md DRAFT [--sizes 0,8192,...] [--types keep,q4_0] [--counts FILE] [-n N] [-k K] [--temp T] "
                   "[--reps R] [-t THREADS]\n",
                   argv[0]);
      return 2;
    }
  }
  if (target.empty() || draft.empty()) {
    std::fprintf(stderr, "need -m TARGET.gguf -md DRAFT.gguf\n");
    return 2;
  }
  std::vector<int32_t> sizes;
  std::stringstream ss(sizes_arg);
  for (std::string s; std::getline(ss, s, ',');) sizes.push_back(std::stoi(s));
  std::vector<std::string> types;
  std::stringstream ts(types_arg);
  for (std::string s; std::getline(ts, s, ',');) types.push_back(s);
  tandem::LoadOptions lo;
  lo.model_path = target;
  lo.draft_model_path = draft;
  lo.draft_vocab_counts = counts;
  lo.threads = threads;
  lo.context = 1024;
  std::vector<std::unique_ptr<tandem::Engine>> engines;
  for (const std::string& t : types) {
    lo.draft_type = t;
    engines.push_back(tandem::Engine::load(lo));
  }
  tandem::Engine* engine = engines.front().get();
  const auto info = engine->info();
  const auto prompts = code_prompts();
  std::printf("target %s\ndraft  %s\nbackend %s, n=%d, k=%d, temp=%.2f, reps=%d, %zu code prompts, ranking: %s\n",
              target.c_str(), draft.c_str(), info.backend.c_str(), n, k, temp, reps, prompts.size(),
              counts.empty() ? "token ids" : counts.c_str());

  Totals plain;
  std::vector<Totals> spec(sizes.size() * types.size());
  tandem::GenerateOptions g;
  g.max_tokens = n;
  g.ignore_eos = true;
  g.sampling.temperature = temp;
  g.speculative.draft_max = k;
  g.speculative.policy = "fixed";
  for (int r = 0; r < reps; ++r)
    for (const std::string& p : prompts) {
      g.sampling.seed = 11 + r;
      g.speculative.mode = tandem::DraftMode::None;
      auto res = engine->generate(p, g);
      plain.ms += res.timings.decode_ms;
      plain.tokens += res.timings.n_generated - 1;
      plain.m.merge(res.speculative);
      g.speculative.mode = tandem::DraftMode::Model;
      for (size_t ti = 0; ti < types.size(); ++ti)
        for (size_t i = 0; i < sizes.size(); ++i) {
          engines[ti]->set_draft_vocab(sizes[i]);
          res = engines[ti]->generate(p, g);
          Totals& t = spec[ti * sizes.size() + i];
          t.ms += res.timings.decode_ms;
          t.tokens += res.timings.n_generated - 1;
          t.m.merge(res.speculative);
        }
    }
  const double plain_tps = plain.tokens * 1000.0 / plain.ms;
  const double plain_pass = plain.m.target_passes ? plain.m.target_ms / plain.m.target_passes : 0.0;
  std::printf("\nplain: %.2f tok/s, target pass %.1f ms\n\n", plain_tps, plain_pass);
  std::printf("| draft weights | MB | draft vocab | acceptance | E | draft forward ms | c | tok/s | speedup |\n"
              "|---|---|---|---|---|---|---|---|---|\n");
  for (size_t ti = 0; ti < types.size(); ++ti) {
    const auto& models = engines[ti]->info();
    for (size_t i = 0; i < sizes.size(); ++i) {
      const Totals& t = spec[ti * sizes.size() + i];
      const double fwd = t.m.draft_forwards ? t.m.draft_ms / t.m.draft_forwards : 0.0;
      const double tps = t.tokens * 1000.0 / t.ms;
      std::printf("| %s | %.0f | %s | %.3f | %.2f | %.2f | %.3f | %.2f | %.3f |\n", models.draft_type.c_str(),
                  static_cast<double>(models.draft_weight_bytes) / 1e6,
                  sizes[i] ? std::to_string(sizes[i]).c_str() : "whole", t.m.acceptance_rate(),
                  t.m.mean_accepted_length(), fwd, plain_pass > 0 ? fwd / plain_pass : 0.0, tps, tps / plain_tps);
    }
  }
  return 0;
}
