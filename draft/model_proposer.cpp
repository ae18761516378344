#include "draft/model_proposer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "engine/model/prefill.hpp"

namespace tandem {
namespace {
// The draft catches up on its context in prompt-sized chunks (per sequence per pass).
constexpr size_t kChunk = kPrefillChunk;

// The draft's probability of its argmax at temperature 1: the confidence measure for
// draft_p_min when the request is greedy (its final distribution is a point mass).
float max_softmax_prob(std::span<const float> logits) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double z = 0.0;
  for (float x : logits) z += std::exp(static_cast<double>(x - mx));
  return static_cast<float>(1.0 / z);
}

// The context as the draft can read it. A target with a larger (padded) vocabulary may emit
// an id the draft has no embedding for; the draft reads token 0 there instead. Its guesses
// after that may be worse, never wrong: the target verifies every drafted token.
std::vector<int32_t> as_draft_tokens(std::span<const int32_t> ids, int32_t draft_vocab) {
  std::vector<int32_t> out(ids.begin(), ids.end());
  for (int32_t& t : out)
    if (t >= draft_vocab) t = 0;
  return out;
}

// Per-job state while a batch drafts.
struct Lane {
  ModelProposer::Job* job;
  std::span<const int32_t> todo;  // catch-up tokens not yet fed
  std::vector<int32_t> history;   // context + drafted so far (for penalties)
  std::vector<float> logits;       // the draft's logits for the next token (a copy: the
                                  // batch's buffer is reused by the next pass)
  bool active = true;
  GrammarState grammar;            // constrained requests: the state after history
  bool device = false;             // samples on the device (DraftProbs): logits stay there
  DraftProbs::Drawn drawn{-1, 0.0f, -1};  // a device lane's draw from its latest logits
};
}  // namespace

ModelProposer::ModelProposer(Transformer& draft, DraftProbs* device_probs)
    : tf_(draft), device_probs_(device_probs), seq_(draft.cache()) {}

void ModelProposer::reset() {
  seq_.clear();
  cached_.clear();
  prefilled_ = false;
}

size_t ModelProposer::prefill_pending(std::span<const int32_t> context) const {
  if (prefilled_ || context.size() < 2) return 0;
  return context.size() - 1 - std::min(cached_.size(), context.size() - 1);
}

size_t ModelProposer::keep_common_prefix(std::span<const int32_t> context) {
  size_t common = 0;
  while (common < cached_.size() && common < context.size() && cached_[common] == context[common]) ++common;
  common = std::min(common, context.size() - 1);
  seq_.truncate(static_cast<int32_t>(common));
  cached_.resize(common);
  return common;
}

void ModelProposer::prefill(std::span<const int32_t> context) {
  // All of it now, chunk by chunk. Out of cache, the draft stays behind: its sequence decodes
  // plainly, and the next call goes on from there.
  for (;;) {
    PrefillJob j{this, context, kChunk};
    prefill_batch(tf_, std::span<PrefillJob>(&j, 1));
    if (j.fed == 0) return;
  }
}

void ModelProposer::prefill_batch(Transformer& draft, std::span<PrefillJob> jobs) {
  struct Fed {
    PrefillJob* job;
    std::span<const int32_t> chunk;
    bool completes;  // the chunk is the rest of its prefill
  };
  Batch b;
  std::vector<Fed> fed;
  for (PrefillJob& j : jobs) {
    j.fed = 0;
    j.kv_full = false;
    ModelProposer& p = *j.proposer;
    if (j.context.size() < 2 || j.max_tokens == 0) continue;
    // Everything but the last token: propose() re-feeds that one to get fresh logits.
    const size_t common = p.keep_common_prefix(j.context);
    const auto todo = j.context.subspan(common, j.context.size() - 1 - common);
    if (todo.empty()) {
      p.prefilled_ = true;
      continue;
    }
    const auto chunk = todo.first(std::min(j.max_tokens, todo.size()));
    // Reserved lane by lane, so that a lane without room leaves the others their pass.
    if (!p.seq_.reserve(p.seq_.length() + static_cast<int32_t>(chunk.size()))) {
      j.kv_full = true;
      continue;
    }
    b.add(p.seq_, as_draft_tokens(chunk, draft.model().config().n_vocab), std::vector<bool>(chunk.size(), false));
    fed.push_back({&j, chunk, chunk.size() == todo.size()});
  }
  if (b.empty()) return;
  std::vector<float> logits;
  draft.forward(b, logits);
  for (const Fed& f : fed) {
    std::vector<int32_t>& cached = f.job->proposer->cached_;
    cached.insert(cached.end(), f.chunk.begin(), f.chunk.end());
    f.job->fed = f.chunk.size();
    if (f.completes) f.job->proposer->prefilled_ = true;
  }
}

Proposal ModelProposer::propose(std::span<const int32_t> ctx, const ProposeOptions& opts, Rng& rng) {
  Job j{this, ctx, opts, &rng, {}};
  propose_batch(tf_, std::span<Job>(&j, 1));
  return std::move(j.out);
}

void ModelProposer::propose_batch(Transformer& draft, std::span<Job> jobs) {
  // Requests verified on the device sample their drafts there too (DraftProbs), so their
  // logits never leave it (a reduced draft vocabulary's are spread over the whole one there).
  const OutputSubset* subset = draft.output_subset();
  DraftProbs* dev = nullptr;
  for (Job& j : jobs)
    if (j.proposer->device_probs_) dev = j.proposer->device_probs_;
  const int64_t width_all = draft.model().config().n_vocab;
  int64_t dev_cols = 0, all_rows = 0;
  std::vector<Lane> lanes;
  for (Job& j : jobs) {
    j.out = Proposal{};
    j.kv_full = false;
    if (j.context.empty() || j.opts.max_tokens <= 0 || !j.opts.sampling) continue;
    const size_t common = j.proposer->keep_common_prefix(j.context);
    lanes.push_back({&j, j.context.subspan(common), std::vector<int32_t>(j.context.begin(), j.context.end()), {}, true, {}});
    if (j.opts.grammar && j.opts.grammar_state) lanes.back().grammar = *j.opts.grammar_state;
    const int64_t cols = j.opts.vocab > 0 ? std::min<int64_t>(width_all, j.opts.vocab) : width_all;
    if (dev && j.opts.on_device && !j.opts.grammar && cols <= kernels::kMaxDeviceSampleVocab &&
        (dev_cols == 0 || cols == dev_cols)) {
      lanes.back().device = true;
      dev_cols = cols;
    }
    all_rows += j.opts.max_tokens + 1;  // logits rows a lane may take: catch-up + one per draft
  }
  if (lanes.empty()) return;
  // Every logits row of a pass with a device lane takes a row of the store (host lanes' are
  // skipped), so the store is sized for every lane.
  if (dev_cols > 0) dev->begin_step(all_rows, dev_cols);

  std::vector<float> logits;
  Batch b;
  // Runs the batch and points each listed lane at its row of logits (device lanes: at its
  // draw from them).
  // With a reduced draft vocabulary (Transformer::output_subset) the other tokens get -inf:
  // q is then a proper distribution over the subset and 0 elsewhere, which rejection sampling
  // and the coupled verifier take exactly as they take any q (the target's p is untouched).
  auto run = [&](const std::vector<Lane*>& with_logits) {
    const bool to_host = std::any_of(with_logits.begin(), with_logits.end(), [](const Lane* l) { return !l->device; });
    draft.forward(b, logits, to_host);
    const size_t vocab = static_cast<size_t>(draft.model().config().n_vocab);
    const size_t width = static_cast<size_t>(draft.n_logits());
    std::vector<DraftProbs::Lane> dl;
    std::vector<Lane*> dl_of;
    for (size_t i = 0; i < with_logits.size(); ++i) {
      Lane& l = *with_logits[i];
      if (!l.device) continue;
      const Job& j = *l.job;
      dl.push_back({static_cast<int32_t>(i), j.opts.sampling, l.history, j.opts.coupled != nullptr, j.opts.sampling->seed,
                    static_cast<int64_t>(j.context.size() + j.out.tokens.size()),
                    static_cast<int32_t>(j.out.tokens.size())});
      dl_of.push_back(&l);
    }
    if (!dl.empty()) {
      const std::vector<DraftProbs::Drawn> drawn =
          subset ? dev->sample(draft.device_logits(), dl, &subset->ids_on_backend, draft.model().config().n_vocab)
                 : dev->sample(draft.device_logits(), dl);
      for (size_t i = 0; i < drawn.size(); ++i) dl_of[i]->drawn = drawn[i];
    }
    for (size_t i = 0; i < with_logits.size(); ++i) {
      if (with_logits[i]->device) continue;
      std::vector<float>& dst = with_logits[i]->logits;
      const float* row = logits.data() + i * width;
      if (!subset) {
        dst.assign(row, row + width);
        continue;
      }
      dst.assign(vocab, -std::numeric_limits<float>::infinity());
      for (size_t j = 0; j < width; ++j) dst[static_cast<size_t>(subset->ids[j])] = row[j];
    }
    b.clear();
  };
  // Room in the draft cache for n more positions of a lane, reserved before the lane joins a
  // pass; without it the lane stops here (keeping what it drafted) and the others go on.
  auto room = [](Lane& l, size_t n) {
    SequenceKV& seq = l.job->proposer->seq_;
    if (seq.reserve(seq.length() + static_cast<int32_t>(n))) return true;
    l.active = false;
    l.job->kv_full = true;
    return false;
  };

  try {
    // Catch-up: feed every lane's new context tokens (chunked), logits for the last one.
    for (bool more = true; more;) {
      more = false;
      std::vector<Lane*> out;
      for (Lane& l : lanes) {
        if (l.todo.empty() || !l.active) continue;
        const auto chunk = l.todo.first(std::min(kChunk, l.todo.size()));
        if (!room(l, chunk.size())) continue;
        l.todo = l.todo.subspan(chunk.size());
        const bool last = l.todo.empty();
        std::vector<bool> want(chunk.size(), false);
        if (last) want.back() = true;
        b.add(l.job->proposer->seq_, as_draft_tokens(chunk, draft.model().config().n_vocab), want);
        l.job->proposer->cached_.insert(l.job->proposer->cached_.end(), chunk.begin(), chunk.end());
        ++l.job->proposer->forwards_;
        if (last) out.push_back(&l);
        more = more || !l.todo.empty();
      }
      if (!b.empty()) run(out);
      for (Lane* l : out) l->job->proposer->prefilled_ = true;  // it has read the whole context
    }
    // Draft positions in lockstep: sample from each lane's logits, then one pass for all.
    for (int32_t i = 0;; ++i) {
      std::vector<Lane*> out;
      for (Lane& l : lanes) {
        if (!l.active) continue;
        const Job& j = *l.job;
        const SamplingParams& sp = *j.opts.sampling;
        const int64_t position = static_cast<int64_t>(j.context.size()) + i;
        int32_t tok = -1;
        bool last = i + 1 >= j.opts.max_tokens;  // or the grammar is complete
        if (l.device) {
          // Drawn on the device from this lane's last pass (DraftProbs::sample); the same
          // decisions as below, from the same q.
          tok = l.drawn.token;
          const float conf = j.opts.p_min <= 0.0f ? 1.0f : l.drawn.conf;
          if (tok < 0 || conf < j.opts.p_min) {
            l.active = false;
            continue;
          }
          l.job->out.tokens.push_back(tok);
          l.job->out.on_device = true;
          if (!sp.greedy() && !j.opts.coupled) l.job->out.q_rows.push_back(l.drawn.q_row);
        } else {
          // Only ids both models share: the draft's padding rows are no tokens of the target.
          const size_t shared = j.opts.vocab > 0 ? std::min(l.logits.size(), static_cast<size_t>(j.opts.vocab))
                                                 : l.logits.size();
          const auto logits = std::span<const float>(l.logits).first(shared);
          // A constrained draft proposes only what the grammar allows; q is over those tokens.
          const TokenGrammar* grammar = j.opts.grammar_state ? j.opts.grammar : nullptr;
          const std::shared_ptr<const TokenMask> mask = grammar ? grammar->mask(l.grammar) : nullptr;
          Distribution d;
          try {
            d = mask ? make_distribution(logits, sp, l.history, *mask) : make_distribution(logits, sp, l.history);
          } catch (const std::runtime_error&) {
            if (!mask) throw;
            l.active = false;  // nothing the grammar allows is in the draft's vocabulary: stop drafting
            continue;
          }
          // Whether to draft this position is decided from q alone, before its token is drawn:
          // a stop that looked at the drawn token would skew which tokens get verified.
          const float conf = j.opts.p_min <= 0.0f ? 1.0f : sp.greedy() ? max_softmax_prob(logits) : d.probs[0];
          if (conf < j.opts.p_min) {
            l.active = false;
            continue;
          }
          tok = sp.greedy()       ? d.ids[0]
                : j.opts.coupled ? gumbel_argmax(d, *j.opts.coupled, position)
                                 : sample(d, *j.rng);
          l.job->out.tokens.push_back(tok);
          // A coupled draft is verified by equality, so q is not needed.
          if (!sp.greedy() && !j.opts.coupled) l.job->out.dists.push_back(std::move(d));
          if (grammar) {
            l.grammar = grammar->after(l.grammar, tok);
            last = last || TokenGrammar::complete(l.grammar) || grammar->vocab().is_eog(tok);
          }
        }
        l.history.push_back(tok);
        if (last) {
          l.active = false;
          continue;
        }
        const int32_t one[1] = {tok};
        if (!room(l, 1)) continue;
        b.add(l.job->proposer->seq_, one);
        l.job->proposer->cached_.push_back(tok);
        ++l.job->proposer->forwards_;
        out.push_back(&l);
      }
      if (out.empty()) break;
      run(out);
    }
  } catch (const KVCacheFull&) {
    // Not expected (every lane reserved its room first); if it happens anyway, every lane
    // keeps what it drafted so far (nothing of the failed pass was written).
    b.clear();
    for (Lane& l : lanes) {
      auto& cached = l.job->proposer->cached_;
      cached.resize(static_cast<size_t>(l.job->proposer->seq_.length()));
    }
  }
}

}  // namespace tandem
