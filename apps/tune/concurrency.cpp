#include "apps/tune/concurrency.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>

#include "engine/runtime/scheduler.hpp"

namespace tandem::cli {
namespace {

struct Served {
  double tok_s = 0.0;
  int64_t tokens = 0;
  SpeculativeMetrics metrics;
};

// Every request at once into a scheduler that runs `streams` of them at a time; throughput
// from the first submission to the last completion.
Served serve(Engine& engine, const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& g,
             int32_t streams, int32_t n_requests) {
  SchedulerOptions so;
  so.max_seqs = streams;
  so.max_queue = std::max(n_requests, 1);
  Scheduler s(engine, so);
  std::mutex mu;
  std::condition_variable cv;
  int32_t done = 0;
  Served out;
  std::string error;
  const auto t0 = std::chrono::steady_clock::now();
  for (int32_t i = 0; i < n_requests; ++i) {
    ServeRequest r;
    r.prompt = prompts[static_cast<size_t>(i) % prompts.size()];
    r.opts = g;
    r.opts.sampling.seed = g.sampling.seed.value_or(1) + static_cast<uint64_t>(i);
    r.on_text = [](const StreamEvent&) { return true; };
    r.on_done = [&](const GenerateResult& res, const std::string& err) {
      std::lock_guard<std::mutex> lk(mu);
      out.tokens += static_cast<int64_t>(res.tokens.size());
      out.metrics.merge(res.speculative);
      if (!err.empty() && error.empty()) error = err;
      ++done;
      cv.notify_all();
    };
    const SubmitResult sr = s.submit(std::move(r));
    if (sr.status != SubmitStatus::Ok) throw std::runtime_error("tune --concurrency: " + sr.message);
  }
  {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return done == n_requests; });
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.shutdown(true);
  if (!error.empty()) throw std::runtime_error("tune --concurrency: a request failed: " + error);
  out.tok_s = secs > 0 ? static_cast<double>(out.tokens) / secs : 0.0;
  return out;
}

}  // namespace

std::vector<ConcurrencyResult> measure_concurrency(Engine& engine, const std::vector<std::string>& prompts,
                                                   const std::vector<std::pair<float, SpeculativeOptions>>& configs,
                                                   const ConcurrencyOptions& opts) {
  if (prompts.empty()) throw std::invalid_argument("tune --concurrency: no prompts");
  std::vector<std::vector<int32_t>> ids;
  for (const std::string& p : prompts) ids.push_back(engine.tokenize(p));
  std::vector<ConcurrencyResult> out;
  for (const auto& [temp, spec] : configs) {
    GenerateOptions g;
    g.max_tokens = opts.n_tokens;
    g.ignore_eos = true;  // every request generates exactly n tokens, with and without drafts
    g.sampling.temperature = temp;
    g.sampling.seed = opts.seed;
    g.speculative = spec;
    GenerateOptions plain = g;
    plain.speculative.mode = DraftMode::None;
    for (int32_t c : opts.streams) {
      if (c < 1) throw std::invalid_argument("tune --concurrency: stream counts must be >= 1");
      const int32_t n = std::max(2, opts.waves * c);
      const Served before = serve(engine, ids, plain, c, n);
      const Served on = serve(engine, ids, g, c, n);
      const Served after = serve(engine, ids, plain, c, n);
      ConcurrencyResult r;
      r.temp = temp;
      r.policy = spec.policy;
      r.k = spec.draft_max;
      r.streams = c;
      r.tokens = on.tokens;
      r.plain_tok_s = 0.5 * (before.tok_s + after.tok_s);
      r.spec_tok_s = on.tok_s;
      r.metrics = on.metrics;
      r.metrics.steps.clear();
      out.push_back(std::move(r));
    }
  }
  return out;
}

}  // namespace tandem::cli
