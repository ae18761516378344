// Engine::time_forward_passes: what the cost model (calibration.hpp) and `tandem tune`
// measure a model's forward passes with.
#include <algorithm>
#include <optional>
#include <stdexcept>

#include "engine/base/clock.hpp"
#include "engine/model/prefill.hpp"
#include "engine/runtime/engine_impl.hpp"

namespace tandem {
namespace {

// Any valid ids do: the time does not depend on which tokens they are.
std::vector<int32_t> some_ids(int32_t n, int32_t salt, int32_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (7919 * (i + 1) + 104729 * salt) % vocab;
  return t;
}

// One pass of n new tokens for every sequence: the target with logits at every position (as
// verification needs), the draft with the last one's (as drafting needs). Returns the
// forward's time alone.
double pass(Transformer& tf, std::vector<std::unique_ptr<SequenceKV>>& seqs, int32_t n, int32_t salt, int32_t vocab,
          bool draft, std::vector<float>& logits) {
  std::vector<std::vector<int32_t>> toks;
  for (size_t b = 0; b < seqs.size(); ++b) toks.push_back(some_ids(n, salt + static_cast<int32_t>(b), vocab));
  Batch batch;
  for (size_t b = 0; b < seqs.size(); ++b) {
    if (draft) batch.add(*seqs[b], toks[b]);
    else batch.add_all_logits(*seqs[b], toks[b]);
  }
  const auto t0 = Clock::now();
  tf.forward(batch, logits);
  return ms_since(t0);
}

}  // namespace

std::vector<std::vector<double>> Engine::time_forward_passes(bool draft, int32_t batch,
                                                             std::span<const int32_t> n_values, int32_t context,
                                                             int32_t reps) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  Impl& m = *impl_;
  if (draft && !m.draft) throw std::invalid_argument("time_forward_passes: no draft model loaded");
  if (batch < 1 || context < 0 || reps < 0) throw std::invalid_argument("time_forward_passes: bad batch/context/reps");
  int32_t n_max = 0;
  for (int32_t n : n_values) {
    if (n < 1) throw std::invalid_argument("time_forward_passes: n must be >= 1");
    n_max = std::max(n_max, n);
  }
  const int32_t room = draft ? m.context + 16 : m.context;  // the caches' sizes (see make_caches)
  if (static_cast<int64_t>(batch) * (context + n_max) > room)
    throw std::invalid_argument("time_forward_passes: " + std::to_string(batch) + " sequences of " +
                                std::to_string(context + n_max) + " tokens do not fit the cache of " +
                                std::to_string(room) + " tokens");
  KVCache& cache = draft ? *m.draft_cache : *m.cache;
  std::optional<Transformer> draft_tf;  // the proposer's own is private; weights are shared
  if (draft) draft_tf.emplace(*m.draft, cache);
  Transformer& tf = draft ? *draft_tf : *m.transformer;
  const int32_t vocab = m.tokenizer->n_vocab();

  std::vector<std::unique_ptr<SequenceKV>> seqs;
  std::vector<float> logits;
  for (int32_t b = 0; b < batch; ++b) {
    seqs.push_back(std::make_unique<SequenceKV>(cache));
    prefill(tf, *seqs.back(), some_ids(context, b, vocab), PrefillLogits::None, logits);
  }
  // One untimed pass at the widest n first: sizes the transformer's scratch (as a running
  // decoder's already is) and warms the caches.
  pass(tf, seqs, n_max, 2000, vocab, draft, logits);
  for (auto& sq : seqs) sq->truncate(context);
  // Decode passes (n = 1) on a CUDA backend are replayed from a graph captured on their
  // second use (engine/model/transformer_graphs): two more untimed ones, so that no timed
  // repetition pays the capture.
  if (std::find(n_values.begin(), n_values.end(), 1) != n_values.end())
    for (int i = 0; i < 2; ++i) {
      pass(tf, seqs, 1, 3000 + i, vocab, draft, logits);
      for (auto& sq : seqs) sq->truncate(context);
    }
  // Repetitions interleaved across n_values, so machine noise hits all alike.
  std::vector<std::vector<double>> ms(n_values.size());
  for (int32_t rep = 0; rep < reps; ++rep) {
    for (size_t i = 0; i < n_values.size(); ++i) {
      ms[i].push_back(pass(tf, seqs, n_values[i], 1000, vocab, draft, logits));
      for (auto& sq : seqs) sq->truncate(context);
    }
  }
  return ms;
}

}  // namespace tandem
