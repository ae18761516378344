// Model-level timings: prefill tokens/s, decode tokens/s, and T(n)/T(1) — the cost of one
// target pass over n tokens (speculative verification of n-1 drafts) relative to one token.
//
//   bench_forward -m MODEL.gguf [-t THREADS] [--nmax 16] [--reps 5] [--ctx 256] [--json]
//                 [--type keep|auto|q4_0|q4_1|q5_0|q5_1|q8_0] [--only N]
//
// --type re-quantizes the matrix weights as they load (what --draft-type does to a draft:
// engine/model/requantize.hpp), to time a draft of that type.
// The prompt is `ctx` token ids (i * 7919 + 13) mod min(vocab, 30000), the runs of n
// tokens (ctx + 31 i) mod min(vocab, 30000): bench/compare_llamacpp.py feeds llama.cpp the
// same ids. --json prints one object (prefill_tok_s, t_ms[n-1], ...) instead of the table.
// Last, decode against its roofline: the GB/s of weights one pass reads at T(1), next to the
// machine's streaming read bandwidth (bench/read_bandwidth.hpp), measured right after T(1);
// and the largest pass against its own: multiply-adds per second next to the int8 peak
// (bench/int8_peak.hpp).
//
// --only N times n = N alone (to profile one pass size under perf): no ratios, no roofline.
// --vs-vnni (on a CPU with AMX) then times the prefill and T(1), T(2), T(4), T(8), T(16)
// again on the AMX kernels and on the VNNI ones (what TANDEM_AMX=0 runs), alternating pass by
// pass, and prints the ratios.
//
// Each T(n) is the median of `reps` passes of n new tokens appended at position `ctx`
// (the cache already holds ctx tokens), then rolled back, so every n sees the same state.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/int8_peak.hpp"
#include "bench/read_bandwidth.hpp"
#include "engine/model/requantize.hpp"
#include "engine/model/transformer.hpp"
#include "kernels/cpu/quant.hpp"

using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string path, type = "keep";
  int threads = 0, nmin = 1, nmax = 16, reps = 5, ctx = 256;
  bool json = false, vs_vnni = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string("0"); };
    if (!std::strcmp(argv[i], "-m")) path = next();
    else if (!std::strcmp(argv[i], "-t")) threads = std::stoi(next());
    else if (!std::strcmp(argv[i], "--nmax")) nmax = std::stoi(next());
    else if (!std::strcmp(argv[i], "--only")) nmin = nmax = std::stoi(next());  // one n (for profiling)
    else if (!std::strcmp(argv[i], "--reps")) reps = std::stoi(next());
    else if (!std::strcmp(argv[i], "--ctx")) ctx = std::stoi(next());
    else if (!std::strcmp(argv[i], "--json")) json = true;
    else if (!std::strcmp(argv[i], "--type")) type = next();
    else if (!std::strcmp(argv[i], "--vs-vnni")) vs_vnni = true;
  }
  if (path.empty()) {
    std::fprintf(stderr, "usage: %s -m MODEL.gguf [-t THREADS] [--nmax 16] [--reps 5] [--ctx 256]\n", argv[0]);
    return 2;
  }
  auto be = tandem::kernels::make_cpu_backend(threads);
  const tandem::WeightOptions weights = tandem::parse_weight_options(type);
  auto model = tandem::Model::load(path, *be, weights);
  tandem::KVCacheOptions o;
  o.max_tokens = ctx + nmax + 16;
  tandem::KVCache cache(*be, model->config(), o);
  tandem::Transformer tf(*model, cache);
  tandem::SequenceKV seq(cache);
  const int32_t vocab = model->config().n_vocab;
  std::vector<int32_t> prompt(static_cast<size_t>(ctx));
  for (int i = 0; i < ctx; ++i) prompt[static_cast<size_t>(i)] = (i * 7919 + 13) % std::min(vocab, 30000);
  std::vector<float> logits;
  const auto tp = Clock::now();
  {
    tandem::Batch b;
    b.add(seq, prompt);
    tf.forward(b, logits);
  }
  const double prefill_ms = std::chrono::duration<double, std::milli>(Clock::now() - tp).count();
  if (!json) {
    std::printf("model %s (weights %s, %.1f MB)\nbackend %s\nprefill: %d tokens in %.1f ms = %.1f tokens/s\n\n",
                path.c_str(), type.c_str(), model->weight_bytes() / 1e6, be->name().c_str(), ctx, prefill_ms,
                ctx * 1000.0 / prefill_ms);
    std::printf("| n | T(n) ms | T(n)/T(1) | tokens/s |\n|---|---|---|---|\n");
  }
  std::vector<double> medians;
  double t1 = 0, read_gbs = 0;
  using tandem::kernels::cpu::ThreadPool;
  ThreadPool read_pool(threads > 0 ? threads : ThreadPool::default_threads());
  for (int n = nmin; n <= nmax; ++n) {
    std::vector<double> times;
    std::vector<int32_t> run(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) run[static_cast<size_t>(i)] = (ctx + i * 31) % std::min(vocab, 30000);
    for (int r = 0; r < reps + 1; ++r) {
      tandem::Batch b;
      b.add_all_logits(seq, run);
      const auto t0 = Clock::now();
      tf.forward(b, logits);
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (r > 0) times.push_back(ms);  // the first pass warms caches
      seq.truncate(ctx);
    }
    std::sort(times.begin(), times.end());
    const double med = times[times.size() / 2];
    if (n == 1) {
      t1 = med;
      read_gbs = tandem::bench::read_bandwidth_gbs(read_pool);  // right after T(1), as the machine is now
    }
    medians.push_back(med);
    if (!json && t1 > 0) std::printf("| %d | %.2f | %.2f | %.1f |\n", n, med, med / t1, n * 1000.0 / med);
    if (!json && t1 == 0) std::printf("| %d | %.2f | - | %.1f |\n", n, med, n * 1000.0 / med);
  }
  // Decode against its roofline: the bytes one pass reads (every weight but an untied
  // embedding, of which a pass reads one row per token) over T(1), next to the machine's
  // streaming read bandwidth measured right after T(1), with as many threads.
  const bool tied = model->output.buf == model->tok_embd.buf && model->output.offset == model->tok_embd.offset;
  const size_t pass_bytes = model->weight_bytes() - (tied ? 0 : model->tok_embd.bytes());
  const double decode_gbs = t1 > 0 ? static_cast<double>(pass_bytes) / (t1 / 1000.0) / 1e9 : 0.0;
  if (!json && t1 > 0)
    std::printf("\ndecode (n = 1) reads %.1f MB of weights per pass: %.1f GB/s, %.0f%% of the streaming read "
                "bandwidth (%.1f GB/s, median of 7 reads of 256 MB right after T(1), %d threads)\n",
                pass_bytes / 1e6, decode_gbs, 100.0 * decode_gbs / read_gbs, read_gbs, read_pool.size());
  // Verification against its compute roofline: the multiply-adds of the largest pass (n per
  // matrix weight, the head's included) over its time, next to the int8 multiply-add peak
  // measured right after, with as many threads.
  int64_t macs_per_token = static_cast<int64_t>(model->config().n_vocab) * model->config().n_embd;
  for (const tandem::LayerWeights& L : model->layers)
    for (const tandem::kernels::Tensor* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
      macs_per_token += w->ne[0] * w->ne[1];
  const int n_last = nmax;
  const double gmacs = static_cast<double>(macs_per_token) * n_last / (medians.back() / 1000.0) / 1e9;
  const double peak = tandem::bench::int8_peak_gmacs(read_pool);
  if (!json)
    std::printf("T(%d) does %.2f G multiply-adds: %.0f G/s, %.0f%% of the int8 multiply-add peak (%.0f G/s, %s, "
                "median of 5, %d threads)\n",
                n_last, static_cast<double>(macs_per_token) * n_last / 1e9, gmacs, 100.0 * gmacs / peak, peak,
                tandem::bench::int8_peak_instruction(), read_pool.size());
  if (vs_vnni && !json) {
    namespace cpu = tandem::kernels::cpu;
    const cpu::AmxPath amx = cpu::amx_path();
    if (amx != cpu::AmxPath::Hardware) {
      std::printf("\n--vs-vnni: no AMX tiles in use here (%s): nothing to compare\n", cpu::amx_name(amx).c_str());
    } else {
      // One pass of `tokens` at the end of the cache as it is (prefill: from empty), in ms.
      auto pass = [&](const std::vector<int32_t>& tokens, int at) {
        seq.truncate(at);
        tandem::Batch b;
        if (at == 0) b.add(seq, tokens);
        else b.add_all_logits(seq, tokens);
        const auto t0 = Clock::now();
        tf.forward(b, logits);
        return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      };
      auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      std::printf("\nAMX tiles against the VNNI kernels (TANDEM_AMX=0), alternating, medians of %d:\n"
                  "| pass | AMX ms | VNNI ms | VNNI / AMX |\n|---|---|---|---|\n", reps);
      auto compare = [&](const char* what, const std::vector<int32_t>& tokens, int at) {
        std::vector<double> a, v;
        for (int r = 0; r < reps + 1; ++r) {
          cpu::force_amx(cpu::AmxPath::Hardware);
          const double ta = pass(tokens, at);
          cpu::force_amx(cpu::AmxPath::Off);
          const double tv = pass(tokens, at);
          if (r > 0) a.push_back(ta), v.push_back(tv);
        }
        cpu::force_amx(amx);
        std::printf("| %s | %.2f | %.2f | %.2f |\n", what, median(a), median(v), median(v) / median(a));
      };
      compare(("prefill " + std::to_string(ctx)).c_str(), prompt, 0);
      pass(prompt, 0);  // the context back for the T(n) passes
      for (int n : {1, 2, 4, 8, 16}) {
        std::vector<int32_t> run(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) run[static_cast<size_t>(i)] = (ctx + i * 31) % std::min(vocab, 30000);
        compare(("T(" + std::to_string(n) + ")").c_str(), run, ctx);
      }
      seq.truncate(ctx);
    }
  }
  if (json) {
    std::printf("{\"model\": \"%s\", \"weights\": \"%s\", \"weight_bytes\": %zu, \"backend\": \"%s\", \"ctx\": %d, "
                "\"pass_bytes\": %zu, \"decode_gbs\": %.3f, \"read_gbs\": %.3f, "
                "\"prefill_ms\": %.3f, \"prefill_tok_s\": %.3f, \"macs_per_token\": %lld, \"int8_peak_gmacs\": %.1f, "
                "\"n_first\": %d, \"t_ms\": [",
                path.c_str(), type.c_str(), model->weight_bytes(), be->name().c_str(), ctx, pass_bytes, decode_gbs,
                read_gbs, prefill_ms, ctx * 1000.0 / prefill_ms, static_cast<long long>(macs_per_token), peak, nmin);
    for (size_t i = 0; i < medians.size(); ++i) std::printf("%s%.4f", i ? ", " : "", medians[i]);
    std::printf("]}\n");
  }
  return 0;
}
