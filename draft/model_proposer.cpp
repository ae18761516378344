#include "draft/model_proposer.hpp"

#include <algorithm>
#include <cmath>

namespace tandem {
namespace {
constexpr size_t kChunk = 256;  // draft prefill chunk

// The draft's probability of its argmax at temperature 1: the confidence measure for
// draft_p_min when the request is greedy (its final distribution is a point mass).
float max_softmax_prob(std::span<const float> logits) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double z = 0.0;
  for (float x : logits) z += std::exp(static_cast<double>(x - mx));
  return static_cast<float>(1.0 / z);
}
}  // namespace

ModelProposer::ModelProposer(Transformer& draft) : tf_(draft), seq_(draft.cache()) {}

void ModelProposer::reset() {
  seq_.clear();
  cached_.clear();
  logits_.clear();
}

void ModelProposer::feed(std::span<const int32_t> tokens) {
  for (size_t i = 0; i < tokens.size(); i += kChunk) {
    const auto chunk = tokens.subspan(i, std::min(kChunk, tokens.size() - i));
    Batch b;
    b.add(seq_, chunk);
    tf_.forward(b, logits_);
    cached_.insert(cached_.end(), chunk.begin(), chunk.end());
    ++forwards_;
  }
}

Proposal ModelProposer::propose(std::span<const int32_t> ctx, const ProposeOptions& opts, Rng& rng) {
  Proposal p;
  if (ctx.empty() || opts.max_tokens <= 0 || !opts.sampling) return p;
  // Roll back to the common prefix; at least the last context token is re-fed so its
  // logits are fresh.
  size_t common = 0;
  while (common < cached_.size() && common < ctx.size() && cached_[common] == ctx[common]) ++common;
  common = std::min(common, ctx.size() - 1);
  seq_.truncate(static_cast<int32_t>(common));
  cached_.resize(common);
  const SamplingParams& sp = *opts.sampling;
  std::vector<int32_t> history(ctx.begin(), ctx.end());
  try {
    feed(ctx.subspan(common));
    for (int32_t i = 0; i < opts.max_tokens; ++i) {
      const int32_t vocab = static_cast<int32_t>(logits_.size());
      int32_t tok;
      float conf;
      if (sp.greedy()) {
        Distribution d = make_distribution(std::span(logits_.data(), static_cast<size_t>(vocab)), sp, history);
        tok = d.ids[0];
        conf = opts.p_min > 0.0f ? max_softmax_prob(logits_) : 1.0f;
      } else {
        Distribution d = make_distribution(std::span(logits_.data(), static_cast<size_t>(vocab)), sp, history);
        tok = sample(d, rng);
        conf = d.prob(tok);
        p.dists.push_back(std::move(d));
      }
      if (conf < opts.p_min) {
        if (!p.dists.empty()) p.dists.pop_back();
        break;
      }
      p.tokens.push_back(tok);
      history.push_back(tok);
      if (i + 1 < opts.max_tokens) {
        const int32_t one[1] = {tok};
        feed(one);
      }
    }
  } catch (const KVCacheFull&) {
    // The draft's cache is full: propose what we have; the target decides as usual.
    p.dists.resize(std::min(p.dists.size(), p.tokens.size()));
  }
  if (!p.dists.empty() && p.dists.size() != p.tokens.size()) p.dists.resize(p.tokens.size());
  return p;
}

}  // namespace tandem
