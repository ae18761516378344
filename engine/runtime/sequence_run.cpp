#include "engine/runtime/sequence_run.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/base/clock.hpp"
#include "engine/sampling/fresh_seed.hpp"
#include "engine/sampling/logprobs.hpp"
#include "draft/ngram_proposer.hpp"
#include "engine/sampling/sampler.hpp"
#include "verify/verifier.hpp"

namespace tandem {
namespace {
// The request's options with its seed settled: its own, else a fresh one (fresh_seed.hpp).
GenerateOptions with_seed(const GenerateOptions& opts) {
  GenerateOptions o = opts;
  if (!o.sampling.seed) o.sampling.seed = fresh_seed();
  return o;
}
}  // namespace

SequenceRun::SequenceRun(KVCache& cache, const Tokenizer& tok, std::span<const int32_t> prompt,
                         const GenerateOptions& opts, StreamEventCallback cb, int32_t context, int32_t n_vocab,
                         Proposer* proposer, SpeculationPolicy* policy, Clock::time_point start,
                         std::shared_ptr<const TokenGrammar> grammar)
    : kv_(cache),
      tok_(tok),
      opts_(with_seed(opts)),
      cb_(std::move(cb)),
      context_(context),
      n_vocab_(n_vocab),
      proposer_(proposer),
      policy_(policy),
      speculate_(opts.speculative.mode != DraftMode::None && opts.speculative.draft_max > 0),
      coupled_(opts.speculative.verify == VerifyMode::Coupled && !opts.sampling.greedy()),
      rng_(*opts_.sampling.seed),
      noise_(*opts_.sampling.seed),
      grammar_(std::move(grammar)),
      decoder_(tok),
      stops_(opts.stop),
      committed_(prompt.begin(), prompt.end()),
      start_(start) {
  res_.prompt_tokens.assign(prompt.begin(), prompt.end());
  res_.seed = *opts_.sampling.seed;
  res_.timings.n_prompt = static_cast<int32_t>(prompt.size());
  try {
    validate_sampling(opts.sampling);
  } catch (const std::invalid_argument&) {
    sampling_valid_ = false;  // the host path reports it where it always did
  }
  if (prompt.empty()) throw std::invalid_argument("empty prompt: nothing to condition on");
  if (static_cast<int32_t>(prompt.size()) >= context_)
    throw std::invalid_argument("prompt of " + std::to_string(prompt.size()) + " tokens does not fit the context of " +
                                std::to_string(context_) + " tokens");
  for (int32_t t : prompt)
    if (t < 0 || t >= n_vocab_)
      throw std::invalid_argument("prompt token " + std::to_string(t) + " is outside the vocabulary");
  if (opts.logprobs < -1 || opts.logprobs > kMaxTopLogprobs)
    throw std::invalid_argument("logprobs must be -1 (none) or in 0.." + std::to_string(kMaxTopLogprobs));
  if (speculate_ && (!proposer_ || !policy_))
    throw std::invalid_argument("speculation requested but no proposer is available");
  if (speculate_) {
    const size_t k = static_cast<size_t>(opts.speculative.draft_max);
    res_.speculative.drafted_per_position.assign(k, 0);
    res_.speculative.accepted_per_position.assign(k, 0);
    res_.speculative.steps_per_k.assign(k + 1, 0);
    proposer_->reset();
    policy_->reset();
    draft_deferred_ = policy_->may_start_off();
    const SpeculativeOptions& so = opts.speculative;
    if (so.lookup && so.mode == DraftMode::Model) {
      if (so.lookup_min < 1 || so.lookup_min > kMaxLookupMin)
        throw std::invalid_argument("lookup_min must be in 1.." + std::to_string(kMaxLookupMin) + " (got " +
                                    std::to_string(so.lookup_min) + ")");
      lookup_ = std::make_unique<NgramProposer>(so.lookup_min, std::max(so.lookup_min, so.ngram_max));
    }
  }
  if (!opts.grammar.empty() && !grammar_) throw std::logic_error("SequenceRun: the request's grammar was not compiled");
  if (grammar_) {
    grammar_state_ = grammar_->initial();
    // A grammar whose only sentence is empty leaves nothing to generate.
    if (TokenGrammar::complete(grammar_state_)) {
      res_.finish = FinishReason::Stop;
      done_ = true;
    }
  }
  if (opts.max_tokens <= 0) done_ = true;
}

std::span<const int32_t> SequenceRun::prefill_todo() const {
  const size_t have = static_cast<size_t>(kv_.length());
  const size_t want = committed_.size() - 1;
  if (have >= want) return {};
  return std::span<const int32_t>(committed_).subspan(have, want - have);
}

size_t SequenceRun::draft_prefill_pending() const {
  if (!speculate_ || done_ || res_.tokens.empty() || prefilling() || draft_deferred_) return 0;
  return proposer_->prefill_pending(committed_);
}

int32_t SequenceRun::next_step_positions() const {
  if (prefilling()) return static_cast<int32_t>(committed_.size()) - 1;
  return kv_.length() + 1 + (speculate_ ? opts_.speculative.draft_max : 0);
}

// Room for this step: pending + k drafts must fit the context; drafting past the token
// budget is wasted work.
int32_t SequenceRun::k_limit() const {
  const int32_t room = context_ - kv_.length() - 1;
  const int32_t budget = opts_.max_tokens - static_cast<int32_t>(res_.tokens.size()) - 1;
  return std::max(0, std::min({opts_.speculative.draft_max, room, budget}));
}

int32_t SequenceRun::tokens_left() const {
  return std::max(0, opts_.max_tokens - static_cast<int32_t>(res_.tokens.size()));
}

// A deferred draft (draft_deferred_) has not read the prompt: the policy decides this step's
// k first. Off (0), the step is plain and the draft stays unfed; asking for a draft, the
// deferral ends and the draft's prefill is pending, for the caller to feed before the step.
size_t SequenceRun::resolve_draft(int32_t batch_size) {
  if (draft_deferred_ && speculate_ && !done_ && !prefilling() && !res_.tokens.empty() && decided_k_ < 0 &&
      proposer_->prefill_pending(committed_) > 0) {
    const int32_t k_max = k_limit();
    const PolicyInput in{k_max, batch_size, static_cast<int32_t>(committed_.size()), tokens_left()};
    decided_k_ = k_max > 0 ? policy_->choose_k(in) : 0;
    if (decided_k_ > 0) draft_deferred_ = false;
  }
  return draft_prefill_pending();
}

int32_t SequenceRun::choose_k(int32_t batch_size) {
  if (done_ || prefilling()) throw std::logic_error("SequenceRun: decode step outside the decode phase");
  resolve_draft(batch_size);  // when the caller has not asked before feeding the draft
  const int32_t decided = std::exchange(decided_k_, -1);
  if (draft_deferred_ && decided == 0) {  // the policy keeps speculation off: a plain step
    step_k_max_ = 0;
    ++res_.speculative.steps_per_k[0];
    return 0;
  }
  // The first step (the prompt's last token) is plain: the first token goes out without
  // waiting for the draft to read the prompt, which it does right after (its prefill, fed by
  // the caller: draft_prefill_pending). Steps stay plain until the draft has caught up.
  const bool plain = res_.tokens.empty() || draft_prefill_pending() > 0;
  step_k_max_ = speculate_ && !plain ? k_limit() : 0;
  int32_t k = 0;
  if (step_k_max_ > 0) {
    // A policy asked in resolve_draft this step is not asked again.
    const PolicyInput in{step_k_max_, batch_size, static_cast<int32_t>(committed_.size()), tokens_left()};
    const int32_t want = decided > 0 ? decided : policy_->choose_k(in);
    k = std::clamp(want, 0, step_k_max_);
  }
  if (speculate_ && !plain) ++res_.speculative.steps_per_k[static_cast<size_t>(k)];
  return k;
}

ProposeOptions SequenceRun::propose_options(int32_t k) const {
  ProposeOptions po;
  po.max_tokens = k;
  po.p_min = opts_.speculative.draft_p_min;
  po.sampling = &opts_.sampling;
  po.vocab = n_vocab_;
  po.coupled = coupled_ ? &noise_ : nullptr;
  po.grammar = grammar_.get();
  po.grammar_state = grammar_ ? &grammar_state_ : nullptr;
  po.on_device = device_eligible();
  return po;
}

ProposeJob SequenceRun::draft_job(int32_t k) {
  if (!proposer_ || k <= 0) throw std::logic_error("SequenceRun::draft_job: no drafting this step");
  return ProposeJob{proposer_, committed_, propose_options(k), &rng_};
}

std::span<const int32_t> SequenceRun::take_proposal(ProposeJob&& job) {
  if (job.proposer != proposer_) throw std::logic_error("SequenceRun::take_proposal: another sequence's job");
  return set_proposal(std::move(job.out), job.ms, job.forwards);
}

bool SequenceRun::try_lookup(int32_t k) {
  if (!lookup_ || k <= 0) return false;  // (k > 0 is within step_k_max_)
  const auto t0 = Clock::now();
  // Up to the step's draft_max (within context and budget), whatever k the policy chose for
  // the draft model: the policy prices the model's passes, and lookup drafts cost none.
  Proposal p = lookup_->propose(committed_, propose_options(step_k_max_), rng_);
  if (p.tokens.empty() || !lookup_choice_.prefer_lookup()) return false;
  set_proposal(std::move(p), ms_between(t0, Clock::now()), 0);
  step_lookup_ = !prop_.tokens.empty();
  if (step_lookup_) {
    ++res_.speculative.lookup_steps;
    res_.speculative.lookup_drafted_tokens += static_cast<int64_t>(prop_.tokens.size());
  }
  return true;
}

std::span<const int32_t> SequenceRun::set_proposal(Proposal p, double draft_ms, int64_t draft_forwards) {
  step_lookup_ = false;
  prop_ = std::move(p);
  if (grammar_) fit_proposal_to_grammar();
  // Too short a draft is not worth verifying — but a sampled draft may only be dropped when
  // the output cannot depend on it: whether a draft came out short depends on what was
  // drawn, so dropping it would change which draws reach the verifier (biased output).
  // A deterministic draft is a function of the context, and coupled output ignores drafts.
  const bool droppable = prop_.deterministic() || coupled_;
  if (prop_.tokens.empty() ||
      (droppable && static_cast<int32_t>(prop_.tokens.size()) < opts_.speculative.draft_min))
    prop_ = Proposal{};
  step_draft_ms_ = draft_ms;
  if (prop_.on_device) res_.speculative.device_drafted_tokens += static_cast<int64_t>(prop_.tokens.size());
  res_.speculative.draft_ms += draft_ms;
  res_.speculative.draft_forwards += draft_forwards;
  step_base_len_ = kv_.length();
  step_tokens_.clear();
  step_tokens_.push_back(committed_.back());
  step_tokens_.insert(step_tokens_.end(), prop_.tokens.begin(), prop_.tokens.end());
  return step_tokens_;
}

void SequenceRun::fit_proposal_to_grammar() {
  // A deterministic draft (n-gram) knows nothing of the grammar: it is cut before its first
  // forbidden token (the cut is a function of the context, so output is unaffected). Drafts
  // sampled from a masked q never hold one. Any draft is cut after a token that completes the
  // sentence: the output ends there, so what follows could never be committed.
  // The states along the kept drafts are what verification masks p_i with.
  step_states_.assign(1, grammar_state_);
  size_t keep = 0;
  while (keep < prop_.tokens.size()) {
    const int32_t t = prop_.tokens[keep];
    if (!grammar_->allows(step_states_.back(), t)) {
      if (!prop_.deterministic())
        throw std::logic_error("SequenceRun: a sampled draft proposed a token its grammar forbids");
      break;
    }
    step_states_.push_back(grammar_->after(step_states_.back(), t));
    ++keep;
    if (TokenGrammar::complete(step_states_.back()) || grammar_->vocab().is_eog(t)) break;
  }
  prop_.tokens.resize(keep);
  if (!prop_.deterministic()) prop_.dists.resize(keep);
}

std::span<const int32_t> SequenceRun::plan_step(int32_t batch_size) {
  const int32_t k = choose_k(batch_size);
  if (k == 0) return set_proposal(Proposal{}, 0.0, 0);
  if (try_lookup(k)) return step_tokens_;
  const auto td = Clock::now();
  const int64_t f0 = proposer_->forward_passes();
  Proposal p = proposer_->propose(committed_, propose_options(k), rng_);
  return set_proposal(std::move(p), ms_between(td, Clock::now()), proposer_->forward_passes() - f0);
}

void SequenceRun::finish_step(std::span<const float> logits, double target_ms) {
  if (logits.size() != step_tokens_.size() * static_cast<size_t>(n_vocab_))
    throw std::logic_error("SequenceRun::finish_step: wrong number of logits");
  const auto tv = Clock::now();
  const VerifyResult v = verify(logits);
  // A plain step before the draft was first asked for: how sure the target is of this token
  // is what a policy waiting to start reads (AdaptivePolicy: starting on confidence). Not
  // paid once the draft has run, nor by policies that do not ask.
  if (draft_deferred_ && prop_.tokens.empty() && policy_->wants_confidence()) {
    const float t = opts_.sampling.greedy() ? 1.0f : opts_.sampling.temperature;
    policy_->observe_confidence(top_probability(logits.first(static_cast<size_t>(n_vocab_)), t));
  }
  record_step(v, target_ms, ms_since(tv));
  // The cache keeps pending + accepted drafts; the rejected tail is rolled back.
  kv_.truncate(step_base_len_ + 1 + v.n_accepted);
  commit_step(v, logits);
}

DeviceVerifier::Sequence SequenceRun::device_sequence(int32_t first_row) const {
  DeviceVerifier::Sequence s;
  s.first_row = first_row;
  s.drafts = prop_.tokens;
  if (verdict_is_argmax() && prop_.q_rows.empty()) return s;
  s.sampling = &opts_.sampling;
  s.history = committed_;
  s.coupled = coupled_;
  s.position = static_cast<int64_t>(committed_.size());
  if (!coupled_) s.q_rows = prop_.q_rows;
  return s;
}

void SequenceRun::finish_step(const VerifyResult& verdict, double target_ms) {
  if (!verdict_on_device())
    throw std::logic_error("SequenceRun::finish_step: an outside verdict needs a request verified on the device");
  if (verdict.n_accepted < 0 || verdict.n_accepted > static_cast<int32_t>(prop_.tokens.size()) ||
      verdict.next_token < 0 || verdict.next_token >= n_vocab_)
    throw std::runtime_error("device verification returned an impossible verdict (" +
                             std::to_string(verdict.n_accepted) + " accepted, next token " +
                             std::to_string(verdict.next_token) + ")");
  record_step(verdict, target_ms, 0.0);
  if (!res_.tokens.empty()) ++res_.speculative.device_verified_steps;
  kv_.truncate(step_base_len_ + 1 + verdict.n_accepted);
  commit_step(verdict, {});
}

// The target's verdict on the drafts. p_i's penalties see the tokens accepted before
// position i.
VerifyResult SequenceRun::verify(std::span<const float> logits) {
  // Drafts whose q stayed on the device (a device verification that failed, falling back
  // here) cannot be verified on the host: they are dropped, and the next token is drawn
  // from p alone — exact whatever was drafted. The pass's KV of the drafts is rolled back.
  if (!prop_.q_rows.empty()) prop_ = Proposal{};
  std::vector<int32_t> hist = committed_;
  const size_t base = committed_.size();
  // Constrained: p_i is over the tokens the grammar allows after the drafts before i
  // (step_states_[i], from fit_proposal_to_grammar).
  const bool keep = opts_.logprobs >= 0 && !opts_.sampling.greedy();
  step_dists_.assign(keep ? step_tokens_.size() : 0, std::nullopt);
  auto target_dist = [&](int32_t i) {
    hist.resize(base);
    hist.insert(hist.end(), prop_.tokens.begin(), prop_.tokens.begin() + i);
    const std::span<const float> row = logits.subspan(static_cast<size_t>(i) * n_vocab_, static_cast<size_t>(n_vocab_));
    Distribution d;
    if (!grammar_) {
      d = make_distribution(row, opts_.sampling, hist);
    } else {
      d = make_distribution(row, opts_.sampling, hist, *grammar_->mask(step_states_[static_cast<size_t>(i)]));
    }
    if (keep) step_dists_[static_cast<size_t>(i)] = d;
    return d;
  };
  const auto position = static_cast<int64_t>(base);  // where the first verified token goes
  if (opts_.sampling.greedy()) return verify_greedy(prop_.tokens, target_dist);
  if (coupled_) return verify_coupled(prop_.tokens, target_dist, noise_, position);
  if (prop_.deterministic()) return verify_stochastic(prop_.tokens, target_dist, nullptr, rng_, position);
  DistFn qf = [&](int32_t i) { return prop_.dists[static_cast<size_t>(i)]; };
  return verify_stochastic(prop_.tokens, target_dist, &qf, rng_, position);
}

// The step's speculative metrics, and what the policy learns from it.
void SequenceRun::record_step(const VerifyResult& v, double target_ms, double verify_ms) {
  SpeculativeMetrics& m = res_.speculative;
  if (!res_.tokens.empty()) {  // decoding; the first pass belongs to prefill
    m.target_ms += target_ms;
    ++m.target_passes;
    if (opts_.record_steps) m.steps.push_back({static_cast<int32_t>(prop_.tokens.size()), v.n_accepted});
  }
  m.verify_ms += verify_ms;
  if (!prop_.tokens.empty()) {
    ++m.drafts;
    m.drafted_tokens += static_cast<int64_t>(prop_.tokens.size());
    m.accepted_tokens += v.n_accepted;
    for (size_t i = 0; i < prop_.tokens.size(); ++i) ++m.drafted_per_position[i];
    for (int32_t i = 0; i < v.n_accepted; ++i) ++m.accepted_per_position[static_cast<size_t>(i)];
  }
  if (step_lookup_) {
    // The policy prices and learns the draft model; a lookup step is LookupChoice's alone.
    m.lookup_accepted_tokens += v.n_accepted;
    lookup_choice_.observe_lookup(v.n_accepted, step_draft_ms_ + target_ms);
  } else if (step_k_max_ > 0) {
    if (lookup_ && !prop_.tokens.empty()) lookup_choice_.observe_draft(v.n_accepted, step_draft_ms_ + target_ms);
    StepOutcome o;
    o.drafted = static_cast<int32_t>(prop_.tokens.size());
    o.accepted = v.n_accepted;
    o.draft_ms = step_draft_ms_;
    o.target_ms = target_ms;
    o.verify_ms = verify_ms;
    o.target_tokens = static_cast<int32_t>(step_tokens_.size());
    policy_->observe(o);
  }
}

TokenLogprobs SequenceRun::logprobs_at(std::span<const float> logits, int32_t i, int32_t token) {
  if (logits.empty()) throw std::logic_error("SequenceRun: logprobs need the step's logits");
  const auto row = logits.subspan(static_cast<size_t>(i) * n_vocab_, static_cast<size_t>(n_vocab_));
  const auto r = static_cast<size_t>(i);
  if (opts_.sampling.greedy()) {
    if (!grammar_) return token_logprobs(row, opts_.sampling, committed_, nullptr, token, opts_.logprobs);
    // Under a grammar, the log-softmax over what it allows here (grammar_state_ is the
    // state before this token: logprobs are taken before the commit).
    const auto mask = grammar_->mask(grammar_state_);
    std::vector<float> masked(row.begin(), row.end());
    for (size_t j = 0; j < masked.size(); ++j)
      if (!mask_allows(*mask, static_cast<int32_t>(j))) masked[j] = -std::numeric_limits<float>::infinity();
    return token_logprobs(masked, opts_.sampling, committed_, nullptr, token, opts_.logprobs);
  }
  // Verification reaches every committed row; should one be missing, compute it the same way.
  if (r >= step_dists_.size() || !step_dists_[r]) {
    step_dists_.resize(std::max(step_dists_.size(), r + 1));
    step_dists_[r] = grammar_ ? make_distribution(row, opts_.sampling, committed_, *grammar_->mask(grammar_state_))
                              : make_distribution(row, opts_.sampling, committed_);
  }
  return token_logprobs(row, opts_.sampling, committed_, &*step_dists_[r], token, opts_.logprobs);
}

// Commits the accepted drafts and the corrected/bonus token, until the output ends. A
// token's logprobs are taken before it is committed: their history is then exactly the one
// its distribution was verified with.
void SequenceRun::commit_step(const VerifyResult& v, std::span<const float> logits) {
  if (res_.tokens.empty()) {
    first_token_ = Clock::now();
    res_.timings.prefill_ms = ms_between(start_, first_token_);
  }
  bool more = true;
  auto commit_row = [&](int32_t i, int32_t token) {
    if (opts_.logprobs < 0) return commit(token, nullptr);
    res_.logprobs.push_back(logprobs_at(logits, i, token));
    return commit(token, &res_.logprobs.back());
  };
  for (int32_t i = 0; i < v.n_accepted && more; ++i) more = commit_row(i, prop_.tokens[static_cast<size_t>(i)]);
  if (more) more = commit_row(v.n_accepted, v.next_token);
  // A stop inside the accepted drafts leaves the KV of the drafts after it, which are not
  // committed: the cache never holds KV past the committed tokens (the scheduler publishes
  // its blocks under them).
  kv_.truncate(static_cast<int32_t>(committed_.size()));
  if (more && kv_.length() >= context_) {
    res_.finish = FinishReason::Length;
    more = false;
  }
  if (!more) close_output();
}

bool SequenceRun::commit(int32_t token, const TokenLogprobs* lp) {
  res_.tokens.push_back(token);
  committed_.push_back(token);
  if (!opts_.ignore_eos && tok_.is_eog(token)) {
    res_.finish = FinishReason::Stop;
    return false;
  }
  if (!emit(stops_.push(decoder_.push(token)), token, lp)) {
    res_.finish = FinishReason::Cancelled;
    return false;
  }
  if (stops_.stopped()) {
    res_.finish = FinishReason::Stop;
    return false;
  }
  if (grammar_) {
    grammar_state_ = grammar_->after(grammar_state_, token);
    if (grammar_state_.dead()) throw std::logic_error("SequenceRun: committed a token the grammar forbids");
    if (TokenGrammar::complete(grammar_state_)) {  // the sentence is whole; nothing may follow
      res_.finish = FinishReason::Stop;
      return false;
    }
  }
  if (static_cast<int32_t>(res_.tokens.size()) >= opts_.max_tokens) {
    res_.finish = FinishReason::Length;
    return false;
  }
  return true;
}

bool SequenceRun::emit(const std::string& text, int32_t token, const TokenLogprobs* lp) {
  res_.text += text;
  return !cb_ || cb_(StreamEvent{text, token, lp});
}

void SequenceRun::close_output() {
  if (res_.finish != FinishReason::Cancelled && !stops_.stopped()) {
    std::string tail = stops_.push(decoder_.flush());
    tail += stops_.flush();
    if (!tail.empty()) emit(tail, res_.tokens.empty() ? -1 : res_.tokens.back(), nullptr);
  }
  res_.timings.n_generated = static_cast<int32_t>(res_.tokens.size());
  if (!res_.tokens.empty()) res_.timings.decode_ms = ms_between(first_token_, Clock::now());
  done_ = true;
  // The target cache is left to the owner: the scheduler publishes its full blocks to the
  // prefix cache before freeing them. The draft's state is of no further use.
  if (proposer_) proposer_->reset();
}

void SequenceRun::finish(FinishReason r) {
  if (done_) return;
  res_.finish = r;
  close_output();
}

void SequenceRun::preempt() {
  kv_.clear();
  if (proposer_) proposer_->reset();
  // The draft's context is gone too: with a policy that may be off, it waits to be asked again.
  if (speculate_ && policy_) draft_deferred_ = policy_->may_start_off();
  decided_k_ = -1;
}

}  // namespace tandem
