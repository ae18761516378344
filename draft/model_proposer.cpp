#include "draft/model_proposer.hpp"

#include <algorithm>
#include <cmath>

namespace tandem {
namespace {
constexpr size_t kChunk = 256;  // draft catch-up chunk per sequence per pass

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
};
}  // namespace

ModelProposer::ModelProposer(Transformer& draft) : tf_(draft), seq_(draft.cache()) {}

void ModelProposer::reset() {
  seq_.clear();
  cached_.clear();
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
  if (context.size() < 2) return;
  // Everything but the last token: propose() re-feeds that one to get fresh logits.
  const size_t common = keep_common_prefix(context);
  const auto todo = context.subspan(common, context.size() - 1 - common);
  std::vector<float> logits;
  try {
    for (size_t off = 0; off < todo.size(); off += kChunk) {
      const auto chunk = todo.subspan(off, std::min(kChunk, todo.size() - off));
      Batch b;
      b.add(seq_, as_draft_tokens(chunk, tf_.model().config().n_vocab), std::vector<bool>(chunk.size(), false));
      tf_.forward(b, logits);
      cached_.insert(cached_.end(), chunk.begin(), chunk.end());
    }
  } catch (const KVCacheFull&) {
    // The draft's cache is full: propose() catches up what it can later (and drafts nothing
    // if it cannot); the target decides as usual.
    cached_.resize(static_cast<size_t>(seq_.length()));
  }
}

Proposal ModelProposer::propose(std::span<const int32_t> ctx, const ProposeOptions& opts, Rng& rng) {
  Job j{this, ctx, opts, &rng, {}};
  propose_batch(tf_, std::span<Job>(&j, 1));
  return std::move(j.out);
}

void ModelProposer::propose_batch(Transformer& draft, std::span<Job> jobs) {
  std::vector<Lane> lanes;
  for (Job& j : jobs) {
    j.out = Proposal{};
    if (j.context.empty() || j.opts.max_tokens <= 0 || !j.opts.sampling) continue;
    const size_t common = j.proposer->keep_common_prefix(j.context);
    lanes.push_back({&j, j.context.subspan(common), std::vector<int32_t>(j.context.begin(), j.context.end()), {}});
  }
  if (lanes.empty()) return;

  std::vector<float> logits;
  Batch b;
  // Runs the batch and points each listed lane at its row of logits.
  auto run = [&](const std::vector<Lane*>& with_logits) {
    draft.forward(b, logits);
    const size_t vocab = static_cast<size_t>(draft.model().config().n_vocab);
    for (size_t i = 0; i < with_logits.size(); ++i)
      with_logits[i]->logits.assign(logits.begin() + static_cast<ptrdiff_t>(i * vocab),
                                    logits.begin() + static_cast<ptrdiff_t>((i + 1) * vocab));
    b.clear();
  };

  try {
    // Catch-up: feed every lane's new context tokens (chunked), logits for the last one.
    for (bool more = true; more;) {
      more = false;
      std::vector<Lane*> out;
      for (Lane& l : lanes) {
        if (l.todo.empty()) continue;
        const auto chunk = l.todo.first(std::min(kChunk, l.todo.size()));
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
      run(out);
    }
    // Draft positions in lockstep: sample from each lane's logits, then one pass for all.
    for (int32_t i = 0;; ++i) {
      std::vector<Lane*> out;
      for (Lane& l : lanes) {
        if (!l.active) continue;
        const Job& j = *l.job;
        const SamplingParams& sp = *j.opts.sampling;
        // Only ids both models share: the draft's padding rows are no tokens of the target.
        const size_t shared = j.opts.vocab > 0 ? std::min(l.logits.size(), static_cast<size_t>(j.opts.vocab))
                                               : l.logits.size();
        const auto logits = std::span<const float>(l.logits).first(shared);
        Distribution d = make_distribution(logits, sp, l.history);
        // Whether to draft this position is decided from q alone, before its token is drawn:
        // a stop that looked at the drawn token would skew which tokens get verified.
        const float conf = j.opts.p_min <= 0.0f ? 1.0f : sp.greedy() ? max_softmax_prob(logits) : d.probs[0];
        if (conf < j.opts.p_min) {
          l.active = false;
          continue;
        }
        const int64_t position = static_cast<int64_t>(j.context.size()) + i;
        const int32_t tok = sp.greedy()       ? d.ids[0]
                            : j.opts.coupled ? gumbel_argmax(d, *j.opts.coupled, position)
                                             : sample(d, *j.rng);
        l.job->out.tokens.push_back(tok);
        // A coupled draft is verified by equality, so q is not needed.
        if (!sp.greedy() && !j.opts.coupled) l.job->out.dists.push_back(std::move(d));
        l.history.push_back(tok);
        if (i + 1 >= j.opts.max_tokens) {
          l.active = false;
          continue;
        }
        const int32_t one[1] = {tok};
        b.add(l.job->proposer->seq_, one);
        l.job->proposer->cached_.push_back(tok);
        ++l.job->proposer->forwards_;
        out.push_back(&l);
      }
      if (out.empty()) break;
      run(out);
    }
  } catch (const KVCacheFull&) {
    // The draft's cache is full: every lane keeps what it drafted so far (nothing of the
    // failed pass was written); the target decides as usual.
    b.clear();
    for (Lane& l : lanes) {
      auto& cached = l.job->proposer->cached_;
      cached.resize(static_cast<size_t>(l.job->proposer->seq_.length()));
    }
  }
}

}  // namespace tandem
