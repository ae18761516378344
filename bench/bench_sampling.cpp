// Cost of drawing one token: logits → final distribution, then a draw by inverse CDF
// (rejection mode) or by Gumbel-max with counter-based noise (coupled mode), for a 151,936
// vocabulary (Qwen2.5) with the sampler's cuts on (tandem's defaults) and off (OpenAI's
// defaults: temperature only, the whole vocabulary in the distribution). Also the extra cost
// of logprobs (GenerateOptions::logprobs) per token: a greedy request's log-softmax over the
// vocabulary, and a sampled one's from the distribution verification already has. And the
// target's confidence (top_probability) that the adaptive policies read at each plain step
// before a sequence's draft first runs.
//
//   build/release/bench/bench_sampling [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <vector>

#include "engine/sampling/gumbel.hpp"
#include "engine/sampling/logprobs.hpp"
#include "engine/sampling/rng.hpp"
#include "engine/sampling/sampler.hpp"

namespace {

constexpr int kVocab = 151936;

std::vector<float> logits() {
  std::vector<float> l(kVocab);
  tandem::Rng r(7);
  // Roughly what a language model gives: a few strong candidates over a broad tail.
  for (float& x : l) x = static_cast<float>(4.0 * (r.uniform() + r.uniform() + r.uniform() - 1.5));
  for (int i = 0; i < 8; ++i) l[static_cast<size_t>(i * 997)] += 12.0f - static_cast<float>(i);
  return l;
}

tandem::SamplingParams params(bool cuts) {
  tandem::SamplingParams s;
  s.temperature = 0.7f;
  if (!cuts) {
    s.top_k = 0;
    s.top_p = 1.0f;
    s.min_p = 0.0f;
  }
  return s;
}

void BM_MakeDistribution(benchmark::State& st) {
  const auto l = logits();
  const auto sp = params(st.range(0) != 0);
  for (auto _ : st) benchmark::DoNotOptimize(tandem::make_distribution(l, sp, {}));
}

void BM_SampleInverseCdf(benchmark::State& st) {
  const auto d = tandem::make_distribution(logits(), params(st.range(0) != 0), {});
  tandem::Rng rng(1);
  for (auto _ : st) benchmark::DoNotOptimize(tandem::sample(d, rng));
  st.counters["support"] = static_cast<double>(d.size());
}

void BM_SampleGumbelMax(benchmark::State& st) {
  const auto d = tandem::make_distribution(logits(), params(st.range(0) != 0), {});
  const tandem::PositionNoise noise(1);
  int64_t pos = 0;
  for (auto _ : st) benchmark::DoNotOptimize(tandem::gumbel_argmax(d, noise, pos++));
  st.counters["support"] = static_cast<double>(d.size());
}

// Arg: the alternatives asked for (top_logprobs).
void BM_LogprobsGreedy(benchmark::State& st) {
  const auto l = logits();
  tandem::SamplingParams sp;
  sp.temperature = 0.0f;
  const auto n_top = static_cast<int32_t>(st.range(0));
  for (auto _ : st) benchmark::DoNotOptimize(tandem::token_logprobs(l, sp, {}, nullptr, 0, n_top));
}

void BM_LogprobsSampled(benchmark::State& st) {
  const auto l = logits();
  const auto sp = params(st.range(1) != 0);
  const auto d = tandem::make_distribution(l, sp, {});
  const auto n_top = static_cast<int32_t>(st.range(0));
  for (auto _ : st) benchmark::DoNotOptimize(tandem::token_logprobs(l, sp, {}, &d, d.ids[0], n_top));
  st.counters["support"] = static_cast<double>(d.size());
}

void BM_TopProbability(benchmark::State& st) {
  const auto l = logits();
  for (auto _ : st) benchmark::DoNotOptimize(tandem::top_probability(l, 1.0f));
}

BENCHMARK(BM_TopProbability)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LogprobsGreedy)->ArgName("top")->Arg(0)->Arg(5)->Arg(20)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LogprobsSampled)->ArgNames({"top", "cuts"})->Args({5, 0})->Args({20, 1})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MakeDistribution)->ArgName("cuts")->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SampleInverseCdf)->ArgName("cuts")->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SampleGumbelMax)->ArgName("cuts")->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
