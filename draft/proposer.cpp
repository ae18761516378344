#include "draft/proposer.hpp"

#include <chrono>
#include <exception>

#include "engine/model/prefill.hpp"

namespace tandem {
namespace {

// The jobs' indices grouped by their proposers' batch keys, groups in the order of their
// first job (so a step's passes run in a fixed order).
template <class Job>
std::vector<std::vector<size_t>> batches_of(std::span<Job> jobs) {
  std::vector<const void*> keys;
  std::vector<std::vector<size_t>> groups;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const void* key = jobs[i].proposer->batch_key();
    size_t g = 0;
    while (g < keys.size() && keys[g] != key) ++g;
    if (g == keys.size()) {
      keys.push_back(key);
      groups.emplace_back();
    }
    groups[g].push_back(i);
  }
  return groups;
}

}  // namespace

std::vector<int32_t> Proposal::depths() const {
  std::vector<int32_t> d(tokens.size());
  for (size_t i = 0; i < d.size(); ++i) {
    const int32_t parent = parents.empty() ? static_cast<int32_t>(i) - 1 : parents[i];
    d[i] = parent < 0 ? 1 : d[static_cast<size_t>(parent)] + 1;
  }
  return d;
}

Proposal Proposer::propose(std::span<const int32_t> context, const ProposeOptions& opts, Rng& rng) {
  ProposeJob j{this, context, opts, &rng};
  propose(std::span<ProposeJob>(&j, 1));
  return std::move(j.out);
}

void Proposer::prefill(std::span<const int32_t> context) {
  for (;;) {
    DraftPrefillJob j{this, context, kPrefillChunk};
    prefill(std::span<DraftPrefillJob>(&j, 1));
    if (j.fed == 0) return;
  }
}

void PerSequenceProposer::propose(std::span<ProposeJob> jobs) {
  for (ProposeJob& j : jobs) {
    j.kv_full = false;
    j.out = propose_sequence(j.context, j.opts, *j.rng);
  }
}

void propose_all(std::span<ProposeJob> jobs) {
  for (const std::vector<size_t>& group : batches_of(jobs)) {
    // The batch's jobs side by side (propose takes a contiguous span), then back.
    std::vector<ProposeJob> batch;
    batch.reserve(group.size());
    for (size_t i : group) batch.push_back(std::move(jobs[i]));
    Proposer& p = *batch.front().proposer;
    std::vector<int64_t> f0;
    for (const ProposeJob& j : batch) f0.push_back(j.proposer->forward_passes());
    const auto t0 = std::chrono::steady_clock::now();
    std::string error;
    try {
      p.propose(batch);
    } catch (const std::exception& ex) {
      error = ex.what();
      if (error.empty()) error = "unknown error";
    }
    const double each =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
        static_cast<double>(batch.size());
    for (size_t b = 0; b < batch.size(); ++b) {
      ProposeJob& j = batch[b];
      j.ms = each;
      j.forwards = j.proposer->forward_passes() - f0[b];
      if (!error.empty()) {
        // Its drafting state may be half-updated: it starts over from the context next time.
        j.error = error;
        j.out = Proposal{};
        j.proposer->reset();
      }
      jobs[group[b]] = std::move(j);
    }
  }
}

void prefill_all(std::span<DraftPrefillJob> jobs) {
  for (const std::vector<size_t>& group : batches_of(jobs)) {
    std::vector<DraftPrefillJob> batch;
    batch.reserve(group.size());
    for (size_t i : group) batch.push_back(jobs[i]);
    batch.front().proposer->prefill(std::span<DraftPrefillJob>(batch));
    for (size_t b = 0; b < batch.size(); ++b) jobs[group[b]] = batch[b];
  }
}

}  // namespace tandem
