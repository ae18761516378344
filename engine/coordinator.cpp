#include "engine/coordinator.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "engine/stop_strings.hpp"
#include "verify/verifier.hpp"

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

constexpr size_t kPrefillChunk = 256;  // bounds activation memory; wide enough for efficient matmuls

// Decides, token by token, when the output ends — identically for every accepted token,
// whether it came from a draft or not.
class OutputSink {
 public:
  OutputSink(const Tokenizer& tok, const GenerateOptions& opts, const StreamCallback& cb, GenerateResult& res)
      : tok_(tok), opts_(opts), cb_(cb), res_(res), decoder_(tok), stops_(opts.stop) {}

  // Returns false when generation is over (res.finish set).
  bool commit(int32_t token) {
    res_.tokens.push_back(token);
    if (!opts_.ignore_eos && tok_.is_eog(token)) return finish(FinishReason::Stop);
    if (!emit(stops_.push(decoder_.push(token)), token)) return finish(FinishReason::Cancelled);
    if (stops_.stopped()) return finish(FinishReason::Stop);
    if (static_cast<int32_t>(res_.tokens.size()) >= opts_.max_tokens) return finish(FinishReason::Length);
    return true;
  }
  bool length_limit() { return finish(FinishReason::Length); }
  void close() {
    if (res_.finish == FinishReason::Cancelled || stops_.stopped()) return;
    std::string tail = stops_.push(decoder_.flush());
    tail += stops_.flush();
    if (!tail.empty()) emit(tail, res_.tokens.empty() ? -1 : res_.tokens.back());
  }

 private:
  bool emit(const std::string& text, int32_t token) {
    res_.text += text;
    return !cb_ || cb_(text, token);
  }
  bool finish(FinishReason r) {
    res_.finish = r;
    return false;
  }
  const Tokenizer& tok_;
  const GenerateOptions& opts_;
  const StreamCallback& cb_;
  GenerateResult& res_;
  StreamDecoder decoder_;
  StopMatcher stops_;
};

}  // namespace

void SpeculativeMetrics::merge(const SpeculativeMetrics& o) {
  drafts += o.drafts;
  drafted_tokens += o.drafted_tokens;
  accepted_tokens += o.accepted_tokens;
  auto add = [](std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    if (a.size() < b.size()) a.resize(b.size(), 0);
    for (size_t i = 0; i < b.size(); ++i) a[i] += b[i];
  };
  add(drafted_per_position, o.drafted_per_position);
  add(accepted_per_position, o.accepted_per_position);
  target_passes += o.target_passes;
  draft_forwards += o.draft_forwards;
  draft_ms += o.draft_ms;
  target_ms += o.target_ms;
  verify_ms += o.verify_ms;
}

Coordinator::Coordinator(Transformer& target, const Tokenizer& tokenizer, Proposer* proposer, int32_t context)
    : target_(target), tok_(tokenizer), proposer_(proposer), context_(context) {}

GenerateResult Coordinator::run(std::span<const int32_t> prompt, const GenerateOptions& opts,
                                const StreamCallback& cb) {
  GenerateResult res;
  res.prompt_tokens.assign(prompt.begin(), prompt.end());
  res.timings.n_prompt = static_cast<int32_t>(prompt.size());
  if (prompt.empty()) throw std::invalid_argument("empty prompt: nothing to condition on");
  if (static_cast<int32_t>(prompt.size()) >= context_)
    throw std::invalid_argument("prompt of " + std::to_string(prompt.size()) + " tokens does not fit the context of " +
                                std::to_string(context_) + " tokens");
  if (opts.max_tokens <= 0) return res;

  const SpeculativeOptions& so = opts.speculative;
  const bool speculate = so.mode != DraftMode::None && so.draft_max > 0;
  if (speculate && !proposer_) throw std::invalid_argument("speculation requested but no proposer is available");
  SpeculativeMetrics& m = res.speculative;
  if (speculate) {
    m.drafted_per_position.assign(static_cast<size_t>(so.draft_max), 0);
    m.accepted_per_position.assign(static_cast<size_t>(so.draft_max), 0);
    proposer_->reset();
  }

  SequenceKV seq(target_.cache());
  Rng rng(opts.sampling.seed);
  OutputSink out(tok_, opts, cb, res);
  // Every committed token, the pending one included: the history for penalties and drafting.
  std::vector<int32_t> committed(prompt.begin(), prompt.end());
  std::vector<float> logits, unused;

  const auto t0 = Clock::now();
  // Prefill everything but the last prompt token; it is the first step's pending token.
  for (size_t i = 0; i + 1 < prompt.size(); i += kPrefillChunk) {
    const auto chunk = prompt.subspan(i, std::min(kPrefillChunk, prompt.size() - 1 - i));
    Batch b;
    b.add(seq, chunk, std::vector<bool>(chunk.size(), false));
    target_.forward(b, unused);
  }
  int32_t pending = prompt.back();
  Clock::time_point t_first{};
  const int32_t vocab = target_.model().config().n_vocab;

  for (bool more = true; more;) {
    // Room for this step: the pending token plus k drafts must fit the context, and
    // drafting past the token budget is wasted work.
    const int32_t room = context_ - seq.length() - 1;
    if (room < 0) {
      out.length_limit();
      break;
    }
    const int32_t budget = opts.max_tokens - static_cast<int32_t>(res.tokens.size()) - 1;
    const int32_t k = speculate ? std::max(0, std::min({so.draft_max, room, budget})) : 0;
    Proposal prop;
    if (k > 0) {
      const auto td = Clock::now();
      ProposeOptions po;
      po.max_tokens = k;
      po.p_min = so.draft_p_min;
      po.sampling = &opts.sampling;
      const int64_t f0 = proposer_->forward_passes();
      prop = proposer_->propose(committed, po, rng);
      m.draft_forwards += proposer_->forward_passes() - f0;
      if (static_cast<int32_t>(prop.tokens.size()) < std::max(1, so.draft_min)) prop = Proposal{};
      m.draft_ms += ms_since(td);
    }

    // One target pass over [pending, drafts...], logits at every position.
    std::vector<int32_t> run;
    run.reserve(prop.tokens.size() + 1);
    run.push_back(pending);
    run.insert(run.end(), prop.tokens.begin(), prop.tokens.end());
    const int32_t base_len = seq.length();
    const auto tt = Clock::now();
    Batch b;
    b.add_all_logits(seq, run);
    target_.forward(b, logits);
    if (!res.tokens.empty()) {  // decoding; the first pass belongs to prefill
      m.target_ms += ms_since(tt);
      ++m.target_passes;
    }

    // Verify. p_i's penalties see the tokens accepted before position i.
    const auto tv = Clock::now();
    std::vector<int32_t> hist = committed;
    auto target_dist = [&](int32_t i) {
      hist.resize(committed.size());
      hist.insert(hist.end(), prop.tokens.begin(), prop.tokens.begin() + i);
      const std::span<const float> row(logits.data() + static_cast<size_t>(i) * vocab, static_cast<size_t>(vocab));
      return make_distribution(row, opts.sampling, hist);
    };
    VerifyResult v;
    if (opts.sampling.greedy()) {
      v = verify_greedy(prop.tokens, target_dist);
    } else if (prop.deterministic()) {
      v = verify_stochastic(prop.tokens, target_dist, nullptr, rng);
    } else {
      DistFn qf = [&](int32_t i) { return prop.dists[static_cast<size_t>(i)]; };
      v = verify_stochastic(prop.tokens, target_dist, &qf, rng);
    }
    m.verify_ms += ms_since(tv);
    if (!prop.tokens.empty()) {
      ++m.drafts;
      m.drafted_tokens += static_cast<int64_t>(prop.tokens.size());
      m.accepted_tokens += v.n_accepted;
      for (size_t i = 0; i < prop.tokens.size(); ++i) ++m.drafted_per_position[i];
      for (int32_t i = 0; i < v.n_accepted; ++i) ++m.accepted_per_position[static_cast<size_t>(i)];
    }

    // The cache keeps pending + accepted drafts; the rejected tail is rolled back.
    seq.truncate(base_len + 1 + v.n_accepted);
    if (res.tokens.empty()) {
      res.timings.prefill_ms = ms_since(t0);
      t_first = Clock::now();
    }
    for (int32_t i = 0; i < v.n_accepted && more; ++i) {
      more = out.commit(prop.tokens[static_cast<size_t>(i)]);
      if (more) committed.push_back(prop.tokens[static_cast<size_t>(i)]);
    }
    if (more) more = out.commit(v.next_token);
    committed.push_back(v.next_token);
    pending = v.next_token;
  }
  out.close();
  res.timings.n_generated = static_cast<int32_t>(res.tokens.size());
  if (!res.tokens.empty()) res.timings.decode_ms = ms_since(t_first);
  return res;
}

}  // namespace tandem
