// Speculative vs autoregressive decoding, measured side by side in one run on the same
// engine: tokens/s, speedup, acceptance rate, mean accepted length, cost ratio c and the
// speedup predicted by S = E / (k·c + 1) next to the measured one, where E, the expected
// tokens per step, comes from the acceptance at each draft position (as `tandem tune` does).
//
//   bench_speculative -m TARGET.gguf [-md DRAFT.gguf] [-n 64] [-k 4] [--temp 0] [--reps 1]
//
// Each prompt runs AR, draft-model and n-gram decoding in turn (interleaved, so machine
// noise hits all modes alike); the totals are over all prompts.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tandem/engine.hpp"

namespace {

struct Totals {
  double ms = 0;
  int64_t tokens = 0;
  tandem::SpeculativeMetrics m;
};

const char* kPrompts[] = {
    "<|im_start|>user\nWrite a Python function that checks whether a string is a palindrome.<|im_end|>\n"
    "<|im_start|>assistant\n",
    "<|im_start|>user\nExplain in three sentences why the sky is blue.<|im_end|>\n<|im_start|>assistant\n",
    "def quicksort(arr):\n",
    "<|im_start|>user\nSummarise: The quick brown fox jumps over the lazy dog. The dog did not react. "
    "The fox jumped again and again, and each time the dog stayed still.<|im_end|>\n<|im_start|>assistant\n",
};

// Acceptance at each draft position i: of the steps that tried position i (drafted it with
// positions 0..i-1 accepted; tune's count, apps/tune/runner.cpp), those that accepted it.
// Not accepted/drafted: the tokens drafted after a rejection were never tried, and counting
// them as failures made the old geometric S = (1 − α^(k+1)) / ((1 − α)(k·c + 1)) too low.
std::vector<double> acceptance_per_position(const tandem::SpeculativeMetrics& m) {
  const auto& d = m.drafted_per_position;
  const auto& a = m.accepted_per_position;
  std::vector<double> p;
  for (size_t i = 0; i < d.size() && i < a.size(); ++i) {
    const double trials = static_cast<double>(i == 0 ? d[0] : std::min(a[i - 1], d[i]));
    if (trials <= 0) break;
    p.push_back(static_cast<double>(a[i]) / trials);
  }
  return p;
}

// Tokens a step with k drafts yields: E = 1 + Σ_{i<k} P(drafts 0..i all accepted), each
// probability the product of the per-position acceptances up to i (when every step drafts
// k, exactly accepted_per_position[i] / drafts).
double expected_tokens(const std::vector<double>& per_position, int k) {
  double e = 1.0, all = 1.0;
  for (size_t i = 0; i < per_position.size() && static_cast<int>(i) < k; ++i) {
    all *= per_position[i];
    e += all;
  }
  return e;
}

// Speedup if verifying k+1 tokens cost one target step.
double predicted(const std::vector<double>& per_position, int k, double c) {
  return expected_tokens(per_position, k) / (k * c + 1);
}

const char* mode_name(tandem::DraftMode m) {
  return m == tandem::DraftMode::None ? "autoregressive" : m == tandem::DraftMode::Ngram ? "n-gram" : "draft model";
}

}  // namespace

int main(int argc, char** argv) {
  std::string target, draft;
  int n = 64, k = 4, reps = 1, threads = 0;
  float temp = 0.0f;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (!std::strcmp(argv[i], "-m")) target = next();
    else if (!std::strcmp(argv[i], "-md")) draft = next();
    else if (!std::strcmp(argv[i], "-n")) n = std::stoi(next());
    else if (!std::strcmp(argv[i], "-k")) k = std::stoi(next());
    else if (!std::strcmp(argv[i], "--temp")) temp = std::stof(next());
    else if (!std::strcmp(argv[i], "--reps")) reps = std::stoi(next());
    else if (!std::strcmp(argv[i], "-t")) threads = std::stoi(next());
    else {
      std::fprintf(stderr, "usage: %s -m TARGET [-md DRAFT] [-n N] [-k K] [--temp T] [--reps R] [-t THREADS]\n", argv[0]);
      return 2;
    }
  }
  if (target.empty()) {
    std::fprintf(stderr, "need -m TARGET.gguf\n");
    return 2;
  }
  tandem::LoadOptions lo;
  lo.model_path = target;
  lo.draft_model_path = draft;
  lo.threads = threads;
  lo.context = 1024;
  auto engine = tandem::Engine::load(lo);
  const auto info = engine->info();
  std::printf("target %s\ndraft  %s\nbackend %s, n=%d, k=%d, temp=%.2f, reps=%d\n", target.c_str(),
              draft.empty() ? "(none)" : draft.c_str(), info.backend.c_str(), n, k, temp, reps);

  std::vector<tandem::DraftMode> modes = {tandem::DraftMode::None, tandem::DraftMode::Ngram};
  if (!draft.empty()) modes.push_back(tandem::DraftMode::Model);
  std::vector<Totals> totals(modes.size());
  for (int r = 0; r < reps; ++r)
    for (const char* p : kPrompts)
      for (size_t mi = 0; mi < modes.size(); ++mi) {
        tandem::GenerateOptions g;
        g.max_tokens = n;
        g.ignore_eos = true;
        g.sampling.temperature = temp;
        g.sampling.seed = 7 + r;
        g.speculative.mode = modes[mi];
        g.speculative.draft_max = k;
        const auto res = engine->generate(p, g);
        totals[mi].ms += res.timings.decode_ms;
        totals[mi].tokens += res.timings.n_generated - 1;
        totals[mi].m.merge(res.speculative);
      }

  const double ar_tps = totals[0].tokens * 1000.0 / totals[0].ms;
  std::printf("\n| mode | tokens/s | speedup | acceptance α (accepted/drafted) | mean accepted length | c | predicted S |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (size_t mi = 0; mi < modes.size(); ++mi) {
    const Totals& t = totals[mi];
    const double tps = t.tokens * 1000.0 / t.ms;
    const char* name = mode_name(modes[mi]);
    if (modes[mi] == tandem::DraftMode::None) {
      std::printf("| %s | %.2f | 1.00 | - | - | - | - |\n", name, tps);
      continue;
    }
    const double a = t.m.acceptance_rate(), c = t.m.cost_ratio();
    std::printf("| %s | %.2f | %.2f | %.3f | %.2f | %.3f | %.2f |\n", name, tps, tps / ar_tps, a,
                t.m.mean_accepted_length(), c, predicted(acceptance_per_position(t.m), k, c));
  }
  std::printf("\n");
  for (size_t mi = 0; mi < modes.size(); ++mi) {
    if (modes[mi] == tandem::DraftMode::None) continue;
    const auto per = acceptance_per_position(totals[mi].m);
    std::printf("%s: acceptance per position", mode_name(modes[mi]));
    for (double p : per) std::printf(" %.3f", p);
    std::printf(" -> E = %.2f tokens per step\n", expected_tokens(per, k));
  }
  std::printf("\n(predicted S = E / (k·c + 1) assumes verifying k+1 tokens costs one target step; the measured\n"
              " speedup also pays the real T(k+1)/T(1) of the target and the verifier's sampling.)\n");

  // Where a decoding step's time goes: drafting, the target pass, the verifier, and the rest
  // (sampling of plain steps, KV bookkeeping, detokenizing, streaming).
  std::printf("\n| mode | steps | ms/step | draft | target pass | verify | other | target pass / AR's |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  const double ar_pass = totals[0].m.target_passes ? totals[0].m.target_ms / totals[0].m.target_passes : 0.0;
  for (size_t mi = 0; mi < modes.size(); ++mi) {
    const Totals& t = totals[mi];
    const double steps = static_cast<double>(std::max<int64_t>(1, t.m.target_passes));
    const double draft = t.m.draft_ms / steps, target = t.m.target_ms / steps, verify = t.m.verify_ms / steps;
    const double all = t.ms / steps;
    std::printf("| %s | %lld | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
                mode_name(modes[mi]),
                static_cast<long long>(t.m.target_passes), all, draft, target, verify, all - draft - target - verify,
                ar_pass > 0 ? target / ar_pass : 0.0);
  }
  return 0;
}
