#include "policies/calibration.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <stdexcept>

namespace tandem {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Below about a tenth of a millisecond a pass's time is mostly timer and scheduling noise
// (tiny test models, sanitizer builds: 0.1-0.2 ms passes seen 30% apart from one moment to
// the next), so that much difference never counts as a change of speed.
constexpr double kTimingSlackMs = 0.1;

// Medians of a few one-token passes now, against the cached T(1) of target and draft.
bool still_fresh(PassTimer& timer, const CostModel& m, bool with_draft, const CalibrationOptions& opts) {
  if (opts.stale_tolerance <= 0.0) return true;
  const int32_t one[] = {1};
  auto check = [&](bool draft, const std::vector<PassCurve>& curves) {
    const PassCurve* c = nullptr;
    for (const PassCurve& pc : curves)
      if (pc.batch == 1) c = &pc;
    if (!c || c->n.empty()) return false;
    timer.time_passes(draft, 1, one, opts.context, 1);  // warm-up
    const double cached = c->at(1.0);
    auto within = [&](int32_t reps) {
      const double now = median(timer.time_passes(draft, 1, one, opts.context, reps)[0]);
      return cached > 0 && now > 0 && std::abs(now - cached) <= opts.stale_tolerance * cached + kTimingSlackMs;
    };
    // A median of 3 first; outside the tolerance, a median of 9 more decides, so that one
    // noisy moment (passes of well under a millisecond, a sanitizer build) does not throw a
    // good model away. A real change of speed fails both.
    return within(3) || within(9);
  };
  return check(false, m.target_curves()) && (!with_draft || check(true, m.draft_curves()));
}

}  // namespace

std::vector<int32_t> batch_token_points(int32_t max_tokens) {
  std::vector<int32_t> out;
  for (int32_t n = 64; n < max_tokens; n *= 2) out.push_back(n);
  if (max_tokens > 32) out.push_back(max_tokens);
  return out;
}

std::shared_ptr<CostModel> calibrate_cost_model(PassTimer& timer, const CalibrationOptions& opts, bool* from_cache) {
  if (opts.k_max < 1) throw std::invalid_argument("calibration needs k_max >= 1");
  if (opts.reps < 1 || opts.warmup < 0) throw std::invalid_argument("calibration needs reps >= 1, warmup >= 0");
  std::vector<int32_t> batches = opts.batches;
  batches.push_back(1);
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  if (batches.front() < 1) throw std::invalid_argument("calibration batch sizes must be >= 1");

  const std::string key = timer.key();
  const bool with_draft = timer.has_draft();
  if (from_cache) *from_cache = false;
  if (!opts.force && !opts.cache_path.empty()) {
    if (auto m = load_cached_cost_model(opts.cache_path, key)) {
      const int32_t widest = std::max(opts.k_max + 1, opts.cover_n);
      bool covers = m->max_measured_n() >= widest && m->has_draft() == with_draft;
      for (int32_t b : batches) {
        bool has = false;
        for (const PassCurve& c : m->target_curves()) has = has || c.batch == b;
        covers = covers && has;
      }
      if (covers && still_fresh(timer, *m, with_draft, opts)) {
        if (from_cache) *from_cache = true;
        return m;
      }
    }
  }

  // n = 1..k_max+1 (verification of k drafts), plus the larger passes at batch 1.
  std::vector<int32_t> small;
  for (int32_t n = 1; n <= opts.k_max + 1; ++n) small.push_back(n);
  std::vector<int32_t> wide = small;
  for (int32_t n : opts.extra_n)
    if (n > opts.k_max + 1) wide.push_back(n);
  std::sort(wide.begin(), wide.end());
  wide.erase(std::unique(wide.begin(), wide.end()), wide.end());

  struct Job {
    bool draft;
    int32_t batch;
    const std::vector<int32_t>* n;
  };
  std::vector<Job> jobs;
  for (int32_t b : batches)
    for (int model = 0; model < (with_draft ? 2 : 1); ++model) jobs.push_back({model == 1, b, b == 1 ? &wide : &small});
  // One repetition of every job per round, target and draft alternating, so a change in
  // machine load hits both models (and so c) alike; one call per job and round also lets
  // progress be reported. The first `warmup` rounds are discarded.
  const int32_t rounds = opts.warmup + opts.reps;
  const double total = static_cast<double>(jobs.size()) * rounds;
  double done = 0;
  std::vector<std::vector<std::vector<double>>> samples(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) samples[j].resize(jobs[j].n->size());
  for (int32_t round = 0; round < rounds; ++round) {
    for (size_t j = 0; j < jobs.size(); ++j) {
      const auto ms = timer.time_passes(jobs[j].draft, jobs[j].batch, *jobs[j].n, opts.context, 1);
      if (round >= opts.warmup)
        for (size_t i = 0; i < ms.size(); ++i) samples[j][i].insert(samples[j][i].end(), ms[i].begin(), ms[i].end());
      if (opts.progress) opts.progress(++done / total);
    }
  }
  std::vector<PassCurve> target, draft;
  for (size_t j = 0; j < jobs.size(); ++j) {
    PassCurve c;
    c.batch = jobs[j].batch;
    c.n = *jobs[j].n;
    for (auto& s : samples[j]) c.ms.push_back(std::max(1e-6, median(s)));
    (jobs[j].draft ? draft : target).push_back(std::move(c));
  }
  auto m = std::make_shared<CostModel>(key, std::move(target), std::move(draft));
  m->context = opts.context;
  m->reps = opts.reps;
  m->warmup = opts.warmup;
  m->created = utc_now();
  if (!opts.cache_path.empty())
    save_cached_cost_model(opts.cache_path, *m, [&timer](const std::string& k) { return timer.key_is_live(k); });
  return m;
}

}  // namespace tandem
