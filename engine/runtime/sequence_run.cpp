#include "engine/runtime/sequence_run.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "draft/ngram_proposer.hpp"
#include "engine/base/clock.hpp"
#include "engine/sampling/fresh_seed.hpp"
#include "engine/sampling/logprobs.hpp"
#include "engine/sampling/sampler.hpp"
#include "kernels/tree_keys.hpp"
#include "policies/cost_model.hpp"
#include "policies/shape_choice.hpp"
#include "verify/step_verifier.hpp"

namespace tandem {
namespace {
// How many of a tree's accepted nodes (path: from the root's child down) are, from the top,
// each the first child of the one before (parents: the tree's, parents first).
int32_t leading_first_children(std::span<const int32_t> parents, std::span<const int32_t> path) {
  int32_t n = 0, up = -1;
  for (const int32_t node : path) {
    const auto first = std::find(parents.begin(), parents.end(), up);
    if (first == parents.end() || static_cast<int32_t>(first - parents.begin()) != node) break;
    up = node;
    ++n;
  }
  return n;
}

// The request's options with its seed settled: its own, else a fresh one (fresh_seed.hpp).
GenerateOptions with_seed(const GenerateOptions& opts) {
  GenerateOptions o = opts;
  if (!o.sampling.seed) o.sampling.seed = fresh_seed();
  return o;
}
}  // namespace

SequenceRun::SequenceRun(Transformer& target, const Tokenizer& tok, std::span<const int32_t> prompt,
                         const GenerateOptions& opts, StreamEventCallback cb, int32_t context, int32_t n_vocab,
                         Proposer* proposer, SpeculationPolicy* policy, Clock::time_point start,
                         std::shared_ptr<const TokenGrammar> grammar)
    : target_(&target),
      kv_(target.cache()),
      opts_(with_seed(opts)),
      context_(context),
      n_vocab_(n_vocab),
      coupled_(opts.speculative.verify == VerifyMode::Coupled && !opts.sampling.greedy()),
      rng_(*opts_.sampling.seed),
      noise_(*opts_.sampling.seed),
      committed_(prompt.begin(), prompt.end()),
      n_prompt_(static_cast<int32_t>(prompt.size())),
      out_(tok, opts_, std::move(cb), prompt, start),
      grammar_(std::move(grammar)) {
  GenerateResult& res = out_.result();
  res.seed = *opts_.sampling.seed;
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
  for (const auto& [t, bias] : opts.sampling.logit_bias)
    if (t < 0 || t >= n_vocab_)
      throw std::invalid_argument("logit_bias token " + std::to_string(t) + " is outside the vocabulary (" +
                                  std::to_string(n_vocab_) + " tokens)");
  for (int32_t t : opts.stop_token_ids)
    if (t < 0 || t >= n_vocab_)
      throw std::invalid_argument("stop token id " + std::to_string(t) + " is outside the vocabulary (" +
                                  std::to_string(n_vocab_) + " tokens)");
  static_assert(kMaxTreeNodes == kernels::kMaxTreeNodes, "a tree's nodes are the bits of the attention mask");
  if (opts.speculative.tree_width < 1 || opts.speculative.tree_width > kMaxTreeNodes ||
      opts.speculative.tree_nodes < 0 || opts.speculative.tree_nodes > kMaxTreeNodes)
    throw std::invalid_argument("tree_width must be in 1.." + std::to_string(kMaxTreeNodes) + " and tree_nodes in 0.." +
                                std::to_string(kMaxTreeNodes));
  if (opts.logprobs < -1 || opts.logprobs > kMaxTopLogprobs)
    throw std::invalid_argument("logprobs must be -1 (none) or in 0.." + std::to_string(kMaxTopLogprobs));
  if (opts.prompt_logprobs < -1 || opts.prompt_logprobs > kMaxTopLogprobs)
    throw std::invalid_argument("prompt_logprobs must be -1 (none) or in 0.." + std::to_string(kMaxTopLogprobs));
  spec_.proposer = proposer;
  spec_.policy = policy;
  spec_.on = opts.speculative.mode != DraftMode::None && opts.speculative.draft_max > 0;
  if (spec_.on && (!proposer || !policy))
    throw std::invalid_argument("speculation requested but no proposer is available");
  if (spec_.on) {
    const size_t k = static_cast<size_t>(opts.speculative.draft_max);
    res.speculative.drafted_per_position.assign(k, 0);
    res.speculative.accepted_per_position.assign(k, 0);
    res.speculative.steps_per_k.assign(k + 1, 0);
    proposer->reset();
    policy->reset();
    spec_.deferred = policy->may_start_off();
    const SpeculativeOptions& so = opts.speculative;
    if (so.lookup && so.mode == DraftMode::Model) {
      if (so.lookup_min < 1 || so.lookup_min > kMaxLookupMin)
        throw std::invalid_argument("lookup_min must be in 1.." + std::to_string(kMaxLookupMin) + " (got " +
                                    std::to_string(so.lookup_min) + ")");
      spec_.lookup = std::make_unique<NgramProposer>(so.lookup_min, std::max(so.lookup_min, so.ngram_max));
    }
  }
  if (!opts.grammar.empty() && !grammar_.active())
    throw std::logic_error("SequenceRun: the request's grammar was not compiled");
  // A grammar whose only sentence is empty leaves nothing to generate.
  if (grammar_.complete()) {
    res.finish = FinishReason::Stop;
    done_ = true;
  }
  // Nothing to generate; a prompt to score is read all the same (done once it is scored).
  if (opts.max_tokens <= 0 && !score_only()) done_ = true;
}

bool SequenceRun::wants_prompt_rows() const {
  return !done_ && opts_.prompt_logprobs >= 0 &&
         static_cast<int32_t>(out_.result().prompt_logprobs.size()) + 1 < n_prompt_;
}

void SequenceRun::record_prompt_rows(int32_t first_pos, std::span<const float> logits) {
  std::vector<TokenLogprobs>& lps = result().prompt_logprobs;
  const size_t vocab = static_cast<size_t>(n_vocab_);
  const int32_t rows = static_cast<int32_t>(logits.size() / vocab);
  // Raw logits at temperature 1: a greedy request's logprobs without penalties.
  SamplingParams raw;
  raw.temperature = 0.0f;
  for (int32_t j = 0; j < rows; ++j) {
    const int32_t pos = first_pos + j;  // its row predicts the token at pos + 1
    if (pos != static_cast<int32_t>(lps.size()) || pos + 1 >= n_prompt_) continue;
    lps.push_back(token_logprobs(logits.subspan(static_cast<size_t>(j) * vocab, vocab), raw, {}, nullptr,
                                 committed_[static_cast<size_t>(pos) + 1], opts_.prompt_logprobs));
  }
  if (score_only() && !done_ && static_cast<int32_t>(lps.size()) + 1 >= n_prompt_) close_output();  // finish: Length
}

std::span<const int32_t> SequenceRun::prefill_todo() const {
  const size_t have = static_cast<size_t>(kv_.length());
  const size_t want = committed_.size() - 1;
  if (have >= want) return {};
  return std::span<const int32_t>(committed_).subspan(have, want - have);
}

size_t SequenceRun::draft_prefill_pending() const {
  if (!spec_.on || done_ || out_.generated() == 0 || prefilling() || spec_.deferred) return 0;
  return spec_.proposer->prefill_pending(committed_);
}

int32_t SequenceRun::next_step_positions() const {
  if (prefilling()) return static_cast<int32_t>(committed_.size()) - 1;
  return kv_.length() + 1 + (spec_.on ? std::max(opts_.speculative.draft_max, tree_nodes()) : 0);
}

int32_t SequenceRun::tree_nodes() const {
  const SpeculativeOptions& so = opts_.speculative;
  // Trees come from a draft model or prompt lookup.
  if (!spec_.on || so.mode == DraftMode::None) return 0;
  const int32_t nodes = std::min(so.tree_budget(), context_ - kv_.length() - 1);  // the tree's slots fit the context
  return nodes >= 2 ? nodes : 0;
}

// Room for this step: pending + k drafts must fit the context; drafting past the token
// budget is wasted work.
int32_t SequenceRun::k_limit() const {
  const int32_t room = context_ - kv_.length() - 1;
  const int32_t budget = opts_.max_tokens - static_cast<int32_t>(out_.generated()) - 1;
  return std::max(0, std::min({opts_.speculative.draft_max, room, budget}));
}

int32_t SequenceRun::tokens_left() const {
  return std::max(0, opts_.max_tokens - static_cast<int32_t>(out_.generated()));
}

double SequenceRun::expected_left() const {
  if (!lengths_) return tokens_left();
  return lengths_->expected_left(static_cast<int32_t>(out_.generated()), opts_.max_tokens);
}

// A deferred draft (spec_.deferred) has not read the prompt: the policy decides this step's
// k first. Off (0), the step is plain and the draft stays unfed; asking for a draft, the
// deferral ends and the draft's prefill is pending, for the caller to feed before the step.
size_t SequenceRun::resolve_draft(int32_t batch_size, const StartGate& may_start) {
  if (spec_.deferred && spec_.on && !done_ && !prefilling() && out_.generated() > 0 && spec_.decided_k < 0 &&
      spec_.proposer->prefill_pending(committed_) > 0) {
    const int32_t k_max = k_limit();
    const PolicyInput in{k_max, batch_size, static_cast<int32_t>(committed_.size()), tokens_left(), expected_left()};
    spec_.decided_k = k_max > 0 ? spec_.policy->choose_k(in) : 0;
    if (spec_.decided_k > 0 && may_start) {
      const std::optional<double> alpha = spec_.policy->budget_alpha();
      if (alpha && !may_start(BudgetWish{spec_.decided_k, *alpha, 1, false}, static_cast<int32_t>(committed_.size()),
                              in.horizon())) {
        spec_.policy->granted(0);
        spec_.decided_k = 0;
      }
    }
    if (spec_.decided_k > 0) spec_.deferred = false;
    else ++spec_.declines;
  }
  return draft_prefill_pending();
}

int32_t SequenceRun::choose_k(int32_t batch_size, const StartGate& may_start) {
  if (done_ || prefilling()) throw std::logic_error("SequenceRun: decode step outside the decode phase");
  step_.tree = false;
  resolve_draft(batch_size, may_start);  // when the caller has not asked before feeding the draft
  SpeculativeMetrics& m = result().speculative;
  const int32_t decided = std::exchange(spec_.decided_k, -1);
  if (spec_.deferred && decided == 0) {  // the policy keeps speculation off: a plain step
    step_.k_max = 0;
    ++m.steps_per_k[0];
    return 0;
  }
  // The first step (the prompt's last token) is plain: the first token goes out without
  // waiting for the draft to read the prompt, which it does right after (its prefill, fed by
  // the caller: draft_prefill_pending). Steps stay plain until the draft has caught up.
  const bool plain = out_.generated() == 0 || draft_prefill_pending() > 0;
  step_.k_max = spec_.on && !plain ? k_limit() : 0;
  int32_t k = 0;
  if (step_.k_max > 0) {
    // A policy asked in resolve_draft this step is not asked again.
    const PolicyInput in{step_.k_max, batch_size, static_cast<int32_t>(committed_.size()), tokens_left(),
                         expected_left()};
    const int32_t want = decided > 0 ? decided : spec_.policy->choose_k(in);
    k = std::clamp(want, 0, step_.k_max);
    spec_.last_wish = k;
  }
  if (spec_.on && !plain) ++m.steps_per_k[static_cast<size_t>(k)];
  // A policy deciding from measured costs drafts a tree where trees have paid more than
  // chains so far (policies/shape_choice.hpp) and sizes it; a fixed policy drafts the tree
  // asked for.
  ShapeChoice* shapes = spec_.policy ? spec_.policy->shape_choice() : nullptr;
  step_.tree = k > 0 && tree_nodes() > 0 && (!shapes || shapes->prefer_tree());
  if (step_.tree) price_tree(batch_size);
  return k;
}

void SequenceRun::price_tree(int32_t batch_size) {
  tree_cost_.clear();
  const CostModel* costs = spec_.policy ? spec_.policy->cost_model() : nullptr;
  const int32_t nodes = tree_nodes();
  if (!costs || nodes <= 0) return;
  for (int32_t n = 0; n <= nodes; ++n) tree_cost_.push_back(costs->r(n, batch_size));
}

std::optional<BudgetWish> SequenceRun::budget_wish(int32_t k) const {
  const std::optional<double> alpha = spec_.policy ? spec_.policy->budget_alpha() : std::nullopt;
  if (k <= 0 || !alpha || !spec_.proposer) return std::nullopt;
  const size_t lag = spec_.proposer->catch_up_tokens(committed_);
  return BudgetWish{k, *alpha, static_cast<int32_t>(std::max<size_t>(lag, 1)), lag == 0};
}

void SequenceRun::grant(int32_t chosen, int32_t k) {
  if (k >= chosen) return;
  auto& per_k = result().speculative.steps_per_k;
  if (static_cast<size_t>(chosen) < per_k.size() && per_k[static_cast<size_t>(chosen)] > 0) {
    --per_k[static_cast<size_t>(chosen)];
    ++per_k[static_cast<size_t>(k)];
  }
  spec_.policy->granted(k);
}

ProposeOptions SequenceRun::propose_options(int32_t k) const {
  ProposeOptions po;
  po.max_tokens = k;
  po.p_min = opts_.speculative.draft_p_min;
  po.sampling = &opts_.sampling;
  po.vocab = n_vocab_;
  po.coupled = coupled_ ? &noise_ : nullptr;
  po.grammar = grammar_.grammar();
  po.grammar_state = grammar_.active() ? &grammar_.state() : nullptr;
  po.on_device = device_eligible();
  if (const int32_t nodes = step_.tree ? tree_nodes() : 0; nodes > 0) {
    po.tree_width = opts_.speculative.tree_width;
    po.tree_nodes = nodes;
    po.tree_cost = tree_cost_;
  }
  return po;
}

ProposeJob SequenceRun::draft_job(int32_t k) {
  if (!spec_.proposer || k <= 0) throw std::logic_error("SequenceRun::draft_job: no drafting this step");
  return ProposeJob{spec_.proposer, committed_, propose_options(k), &rng_};
}

std::span<const int32_t> SequenceRun::take_proposal(ProposeJob&& job) {
  if (job.proposer != spec_.proposer) throw std::logic_error("SequenceRun::take_proposal: another sequence's job");
  return set_proposal(std::move(job.out), job.ms, job.forwards);
}

bool SequenceRun::try_lookup(int32_t k) {
  if (!spec_.lookup || k <= 0) return false;  // (k > 0 is within step_.k_max)
  const auto t0 = Clock::now();
  // Up to the step's draft_max (within context and budget), whatever k the policy chose for
  // the draft model: the policy prices the model's passes, and lookup drafts cost none.
  Proposal p = spec_.lookup->propose(committed_, propose_options(step_.k_max), rng_);
  if (p.tokens.empty() || !spec_.lookup_choice.prefer_lookup()) return false;
  set_proposal(std::move(p), ms_between(t0, Clock::now()), 0);
  step_.lookup = !step_.prop.tokens.empty();
  if (step_.lookup) {
    SpeculativeMetrics& m = result().speculative;
    ++m.lookup_steps;
    m.lookup_drafted_tokens += static_cast<int64_t>(step_.prop.tokens.size());
  }
  return true;
}

std::span<const int32_t> SequenceRun::set_proposal(Proposal p, double draft_ms, int64_t draft_forwards) {
  step_.lookup = false;
  step_.prop = std::move(p);
  grammar_.fit(step_.prop);
  // Too short a draft is not worth verifying — but a sampled draft may only be dropped when
  // the output cannot depend on it: whether a draft came out short depends on what was
  // drawn, so dropping it would change which draws reach the verifier (biased output).
  // A deterministic draft is a function of the context, and coupled output ignores drafts.
  const bool droppable = step_.prop.deterministic() || coupled_;
  if (step_.prop.tokens.empty() ||
      (droppable && static_cast<int32_t>(step_.prop.tokens.size()) < opts_.speculative.draft_min))
    step_.prop = Proposal{};
  step_.draft_ms = draft_ms;
  SpeculativeMetrics& m = result().speculative;
  if (step_.prop.on_device) m.device_drafted_tokens += static_cast<int64_t>(step_.prop.tokens.size());
  m.draft_ms += draft_ms;
  m.draft_forwards += draft_forwards;
  step_.base_len = kv_.length();
  step_.tokens.clear();
  step_.tokens.push_back(committed_.back());
  step_.tokens.insert(step_.tokens.end(), step_.prop.tokens.begin(), step_.prop.tokens.end());
  return step_.tokens;
}

std::span<const int32_t> SequenceRun::plan_step(int32_t batch_size) {
  const int32_t k = choose_k(batch_size);
  if (k == 0) return no_proposal();
  if (try_lookup(k)) return step_.tokens;
  const auto td = Clock::now();
  const int64_t f0 = spec_.proposer->forward_passes();
  Proposal p = spec_.proposer->propose(committed_, propose_options(k), rng_);
  return set_proposal(std::move(p), ms_between(td, Clock::now()), spec_.proposer->forward_passes() - f0);
}

void SequenceRun::add_step(Batch& b) {
  const Proposal& prop = step_.prop;
  if (!prop.tree()) {
    b.add_all_logits(kv_, step_.tokens);
    return;
  }
  // The pending token at its index, node i at index base + 1 + i and the position of its
  // depth, reading its ancestors (bits are node indices).
  if (prop.tokens.size() > static_cast<size_t>(kernels::kMaxTreeNodes))
    throw std::logic_error("SequenceRun: a token tree of more than " + std::to_string(kernels::kMaxTreeNodes) + " nodes");
  check_tree(prop.tokens, prop.parents);
  const int32_t base = kv_.length();
  std::vector<int32_t> positions = {base};
  std::vector<uint64_t> masks = {0};
  const std::vector<int32_t> depth = prop.depths();
  for (size_t i = 0; i < prop.tokens.size(); ++i) {
    const int32_t par = prop.parents[i];
    masks.push_back((par < 0 ? 0 : masks[static_cast<size_t>(par) + 1]) | (uint64_t{1} << i));
    positions.push_back(base + depth[i]);
  }
  b.add_tree(kv_, step_.tokens, positions, base + 1, masks);
}

TreeVerdict SequenceRun::verify_tree(std::span<const float> logits) {
  const Proposal& prop = step_.prop;
  const bool keep = opts_.logprobs >= 0 && !opts_.sampling.greedy();
  step_.dists.assign(keep ? step_.tokens.size() : 0, std::nullopt);
  std::vector<int32_t> hist;
  // p at row r: the node's path is its history (penalties).
  auto row_dist = [&](int32_t r) {
    hist.assign(committed_.begin(), committed_.end());
    const size_t at = hist.size();
    for (int32_t n = r - 1; n >= 0; n = prop.parents[static_cast<size_t>(n)])
      hist.insert(hist.begin() + static_cast<ptrdiff_t>(at), prop.tokens[static_cast<size_t>(n)]);
    const auto row = logits.subspan(static_cast<size_t>(r) * n_vocab_, static_cast<size_t>(n_vocab_));
    // Constrained: over what the grammar allows after the node's path.
    Distribution d = grammar_.active()
                         ? make_distribution(row, opts_.sampling, hist, *grammar_.step_mask(static_cast<size_t>(r)))
                         : make_distribution(row, opts_.sampling, hist);
    if (keep) step_.dists[static_cast<size_t>(r)] = d;
    return d;
  };
  DistFn target = row_dist;
  DistFn qf = [&](int32_t r) { return prop.dists.at(static_cast<size_t>(r)); };
  HostStep step;
  step.target = &target;
  step.draft = prop.deterministic() ? nullptr : &qf;
  step.greedy = opts_.sampling.greedy();
  step.coupled = coupled_ ? &noise_ : nullptr;
  step.rng = &rng_;
  step.position = static_cast<int64_t>(committed_.size());
  return verify_host_tree(step, prop.tokens, prop.parents);
}

VerifyResult SequenceRun::keep_path(const TreeVerdict& tv) {
  Proposal& prop = step_.prop;
  const int32_t first = step_.base_len + 1;  // node i sits at first + i
  std::vector<int32_t> from, tokens;
  step_.accepted_rows.assign(1, 0);  // the root's row holds p of the path's first token
  for (int32_t n : tv.path) {
    from.push_back(first + n);
    tokens.push_back(prop.tokens[static_cast<size_t>(n)]);
    step_.accepted_rows.push_back(1 + n);
  }
  target_->move_kv(kv_, from, first);
  VerifyResult v;
  v.n_accepted = static_cast<int32_t>(tv.path.size());
  v.next_token = tv.next_token;
  v.all_accepted = tv.leaf;
  prop.tokens = std::move(tokens);  // what commit_step commits, as a chain
  return v;
}

void SequenceRun::finish_step(std::span<const float> logits, double target_ms) {
  if (logits.size() != step_.tokens.size() * static_cast<size_t>(n_vocab_))
    throw std::logic_error("SequenceRun::finish_step: wrong number of logits");
  const auto tv = Clock::now();
  step_.accepted_rows.clear();
  // (A tree whose q stayed on the device is dropped by verify, as a chain's would be.)
  if (step_.prop.tree() && step_.prop.q_rows.empty()) {
    const TreeVerdict t = verify_tree(logits);
    VerifyResult r;
    r.n_accepted = static_cast<int32_t>(t.path.size());
    r.path = t.path;
    r.next_token = t.next_token;
    r.all_accepted = t.leaf;
    record_step(r, target_ms, ms_since(tv));
    const VerifyResult v = keep_path(t);
    kv_.truncate(step_.base_len + 1 + v.n_accepted);
    commit_step(v, logits);
    return;
  }
  const VerifyResult v = verify(logits);
  // A plain step before the draft was first asked for: how sure the target is of this token
  // is what a policy waiting to start reads (AdaptivePolicy: starting on confidence). Not
  // paid once the draft has run, nor by policies that do not ask.
  if (spec_.deferred && step_.prop.tokens.empty() && spec_.policy->wants_confidence()) {
    const float t = opts_.sampling.greedy() ? 1.0f : opts_.sampling.temperature;
    spec_.policy->observe_confidence(top_probability(logits.first(static_cast<size_t>(n_vocab_)), t));
  }
  record_step(v, target_ms, ms_since(tv));
  // The cache keeps pending + accepted drafts; the rejected tail is rolled back.
  kv_.truncate(step_.base_len + 1 + v.n_accepted);
  commit_step(v, logits);
}

DeviceVerifier::Sequence SequenceRun::device_sequence(int32_t first_row) {
  DeviceVerifier::Sequence s;
  s.first_row = first_row;
  s.drafts = step_.prop.tokens;
  s.parents = step_.prop.parents;
  if (grammar_.active()) {
    step_.masks.clear();
    step_.mask_words.clear();
    for (size_t r = 0; r <= step_.prop.tokens.size(); ++r) {
      step_.masks.push_back(grammar_.step_mask(r));
      step_.mask_words.push_back(*step_.masks.back());
    }
    s.masks = step_.mask_words;
  }
  s.request = &opts_.sampling;
  if (opts_.logprobs >= 0) {
    s.logprobs = opts_.logprobs;
    s.history = committed_;
  }
  // A plain step while the policy waits to start the draft: what the target's confidence
  // says of the draft's chances (as finish_step's host path reads it from the rows).
  s.confidence = spec_.deferred && spec_.policy && step_.prop.tokens.empty() && spec_.policy->wants_confidence();
  if (verdict_is_argmax() && step_.prop.q_rows.empty()) return s;
  s.sampling = &opts_.sampling;
  s.history = committed_;
  s.coupled = coupled_;
  s.position = static_cast<int64_t>(committed_.size());
  if (!coupled_) s.q_rows = step_.prop.q_rows;
  return s;
}

void SequenceRun::finish_step(const VerifyResult& verdict, double target_ms) {
  if (!verdict_on_device())
    throw std::logic_error("SequenceRun::finish_step: an outside verdict needs a request verified on the device");
  const bool counted = verdict.n_accepted >= 0 && verdict.n_accepted <= static_cast<int32_t>(step_.prop.tokens.size());
  // No token was possible at the verdict's row (the device's -1): what the host's sampler
  // says of such logits.
  if (counted && verdict.next_token == -1)
    throw std::runtime_error(grammar_.active() ? "logits are all NaN/-inf where the grammar allows a token"
                                               : "logits are all NaN/-inf");
  if (!counted || verdict.next_token < 0 || verdict.next_token >= n_vocab_)
    throw std::runtime_error("device verification returned an impossible verdict (" +
                             std::to_string(verdict.n_accepted) + " accepted, next token " +
                             std::to_string(verdict.next_token) + ")");
  const bool tree = step_.prop.tree();
  if (tree) {
    // The walk's path: nodes in order down the tree, one per accepted token.
    const auto n = static_cast<int32_t>(step_.prop.tokens.size());
    bool ok = static_cast<int32_t>(verdict.path.size()) == verdict.n_accepted;
    for (size_t i = 0; ok && i < verdict.path.size(); ++i) {
      const int32_t node = verdict.path[i], up = i == 0 ? -1 : verdict.path[i - 1];
      ok = node >= 0 && node < n && step_.prop.parents[static_cast<size_t>(node)] == up;
    }
    if (!ok) throw std::runtime_error("device verification returned a path that is not the tree's");
  }
  if (opts_.logprobs >= 0 && verdict.logprobs.size() != static_cast<size_t>(verdict.n_accepted) + 1)
    throw std::runtime_error("device verification returned " + std::to_string(verdict.logprobs.size()) +
                             " tokens' logprobs for " + std::to_string(verdict.n_accepted + 1) + " tokens");
  if (verdict.confidence >= 0.0 && spec_.deferred && spec_.policy && step_.prop.tokens.empty())
    spec_.policy->observe_confidence(verdict.confidence);
  record_step(verdict, target_ms, 0.0);
  if (out_.generated() > 0) ++result().speculative.device_verified_steps;
  // A tree's accepted path is moved into chain order, and committed as a chain.
  VerifyResult v = tree ? keep_path(TreeVerdict{verdict.path, verdict.next_token, verdict.all_accepted}) : verdict;
  if (tree) v.logprobs = verdict.logprobs;  // (in the path's order, as committed)
  kv_.truncate(step_.base_len + 1 + v.n_accepted);
  commit_step(v, {});
}

// The target's verdict on the drafts. p_i's penalties see the tokens accepted before
// position i.
VerifyResult SequenceRun::verify(std::span<const float> logits) {
  // Drafts whose q stayed on the device (a device verification that failed, falling back
  // here) cannot be verified on the host: they are dropped, and the next token is drawn
  // from p alone — exact whatever was drafted. The pass's KV of the drafts is rolled back.
  Proposal& prop = step_.prop;
  if (!prop.q_rows.empty()) prop = Proposal{};
  std::vector<int32_t> hist = committed_;
  const size_t base = committed_.size();
  // Constrained: p_i is over the tokens the grammar allows after the drafts before i
  // (SequenceGrammar::step_mask).
  const bool keep = opts_.logprobs >= 0 && !opts_.sampling.greedy();
  step_.dists.assign(keep ? step_.tokens.size() : 0, std::nullopt);
  auto target_dist = [&](int32_t i) {
    hist.resize(base);
    hist.insert(hist.end(), prop.tokens.begin(), prop.tokens.begin() + i);
    const std::span<const float> row = logits.subspan(static_cast<size_t>(i) * n_vocab_, static_cast<size_t>(n_vocab_));
    Distribution d = grammar_.active()
                         ? make_distribution(row, opts_.sampling, hist, *grammar_.step_mask(static_cast<size_t>(i)))
                         : make_distribution(row, opts_.sampling, hist);
    if (keep) step_.dists[static_cast<size_t>(i)] = d;
    return d;
  };
  DistFn target = target_dist;
  DistFn qf = [&](int32_t i) { return prop.dists[static_cast<size_t>(i)]; };
  HostStep step;
  step.drafts = prop.tokens;
  step.target = &target;
  step.draft = prop.deterministic() ? nullptr : &qf;
  step.greedy = opts_.sampling.greedy();
  step.coupled = coupled_ ? &noise_ : nullptr;
  step.rng = &rng_;
  step.position = static_cast<int64_t>(base);  // where the first verified token goes
  return verify_host(step);
}

// The step's speculative metrics, and what the policy learns from it.
void SequenceRun::record_step(const VerifyResult& v, double target_ms, double verify_ms) {
  SpeculativeMetrics& m = result().speculative;
  const Proposal& prop = step_.prop;
  // How deep the drafts reach: a chain's length, a tree's deepest node. Per-position counts
  // are by depth, and the policy prices a tree as the chain of its depth (its cost is in
  // target_ms and target_tokens).
  size_t depth = prop.tokens.size();
  if (prop.tree()) {
    const std::vector<int32_t> d = prop.depths();
    depth = static_cast<size_t>(*std::max_element(d.begin(), d.end()));
    ++m.tree_steps;
  }
  if (out_.generated() > 0) {  // decoding; the first pass belongs to prefill
    m.target_ms += target_ms;
    ++m.target_passes;
    if (opts_.record_steps) m.steps.push_back({static_cast<int32_t>(prop.tokens.size()), v.n_accepted});
  }
  m.verify_ms += verify_ms;
  if (!prop.tokens.empty()) {
    ++m.drafts;
    m.drafted_tokens += static_cast<int64_t>(prop.tokens.size());
    m.accepted_tokens += v.n_accepted;
    for (size_t i = 0; i < depth; ++i) ++m.drafted_per_position[i];
    for (int32_t i = 0; i < v.n_accepted; ++i) ++m.accepted_per_position[static_cast<size_t>(i)];
  }
  if (step_.lookup) {
    // The policy prices and learns the draft model; a lookup step is LookupChoice's alone.
    m.lookup_accepted_tokens += v.n_accepted;
    spec_.lookup_choice.observe_lookup(v.n_accepted, step_.draft_ms + target_ms);
  } else if (step_.k_max > 0) {
    if (spec_.lookup && !prop.tokens.empty())
      spec_.lookup_choice.observe_draft(v.n_accepted, step_.draft_ms + target_ms);
    ShapeChoice* shapes = spec_.policy ? spec_.policy->shape_choice() : nullptr;
    if (shapes && !prop.tokens.empty() && tree_nodes() > 0) {  // a draft-model step that could have been a tree
      // A greedy chain drafts the draft's argmax at every depth: each node's first child in
      // a greedy tree, whose path of first children (the spine) is kept to the chain's depth
      // (draft/token_tree.hpp). It would have had the accepted path's leading first
      // children accepted, exactly.
      int32_t chain = -1;
      if (prop.tree() && opts_.sampling.greedy() && v.path.size() == static_cast<size_t>(v.n_accepted))
        chain = leading_first_children(prop.parents, v.path);
      shapes->observe(prop.tree(), v.n_accepted, step_.draft_ms + target_ms, chain);
    }
    StepOutcome o;
    o.drafted = static_cast<int32_t>(depth);
    o.accepted = v.n_accepted;
    o.draft_ms = step_.draft_ms;
    o.target_ms = target_ms;
    o.verify_ms = verify_ms;
    o.target_tokens = static_cast<int32_t>(step_.tokens.size());
    spec_.policy->observe(o);
  }
}

TokenLogprobs SequenceRun::logprobs_at(std::span<const float> logits, int32_t i, int32_t token) {
  if (logits.empty()) throw std::logic_error("SequenceRun: logprobs need the step's logits");
  std::span<const float> row = logits.subspan(static_cast<size_t>(i) * n_vocab_, static_cast<size_t>(n_vocab_));
  const auto r = static_cast<size_t>(i);
  // Under a grammar, over what it allows here (its state is the one before this token:
  // logprobs are taken before the commit): a greedy request's log-softmax, and the tokens
  // listed after a sampled distribution's, are of the masked row (what it forbids at -inf,
  // after what the sampling cut), as the device has them.
  std::vector<float> masked;
  if (grammar_.active()) {
    const auto mask = grammar_.grammar()->mask(grammar_.state());
    masked.assign(row.begin(), row.end());
    for (size_t j = 0; j < masked.size(); ++j)
      if (!mask_allows(*mask, static_cast<int32_t>(j))) masked[j] = -std::numeric_limits<float>::infinity();
    row = masked;
  }
  if (opts_.sampling.greedy()) return token_logprobs(row, opts_.sampling, committed_, nullptr, token, opts_.logprobs);
  // Verification reaches every committed row; should one be missing, compute it the same way.
  std::vector<std::optional<Distribution>>& dists = step_.dists;
  if (r >= dists.size() || !dists[r]) {
    dists.resize(std::max(dists.size(), r + 1));
    dists[r] = make_distribution(row, opts_.sampling, committed_);  // (masked under a grammar)
  }
  return token_logprobs(row, opts_.sampling, committed_, &*dists[r], token, opts_.logprobs);
}

// Commits the accepted drafts and the corrected/bonus token, until the output ends. A
// token's logprobs are taken before it is committed: their history is then exactly the one
// its distribution was verified with.
void SequenceRun::commit_step(const VerifyResult& v, std::span<const float> logits) {
  if (out_.generated() == 0) out_.start_decoding();
  GenerateResult& res = result();
  bool more = true;
  // The pass's row whose p the i-th committed token was verified with: a chain's i, the row
  // of a tree path's parent node.
  const std::vector<int32_t>& rows = step_.accepted_rows;
  auto row_of = [&](int32_t i) { return rows.empty() ? i : rows.at(static_cast<size_t>(i)); };
  auto commit_row = [&](int32_t i, int32_t token) {
    if (opts_.logprobs < 0) return commit(token, nullptr);
    res.logprobs.push_back(logits.empty() ? v.logprobs.at(static_cast<size_t>(i)) : logprobs_at(logits, row_of(i), token));
    return commit(token, &res.logprobs.back());
  };
  for (int32_t i = 0; i < v.n_accepted && more; ++i) more = commit_row(i, step_.prop.tokens[static_cast<size_t>(i)]);
  if (more) more = commit_row(v.n_accepted, v.next_token);
  // A stop inside the accepted drafts leaves the KV of the drafts after it, which are not
  // committed: the cache never holds KV past the committed tokens (the scheduler publishes
  // its blocks under them).
  kv_.truncate(static_cast<int32_t>(committed_.size()));
  if (more && kv_.length() >= context_) {
    res.finish = FinishReason::Length;
    more = false;
  }
  if (!more) close_output();
}

bool SequenceRun::commit(int32_t token, const TokenLogprobs* lp) {
  committed_.push_back(token);
  if (!out_.push(token, lp)) return false;
  if (grammar_.active()) {
    grammar_.commit(token);
    if (grammar_.complete()) {  // the sentence is whole; nothing may follow
      result().finish = FinishReason::Stop;
      return false;
    }
  }
  if (out_.full()) {
    result().finish = FinishReason::Length;
    return false;
  }
  return true;
}

void SequenceRun::close_output() {
  out_.close();
  done_ = true;
  const FinishReason f = result().finish;
  if (lengths_ && opts_.max_tokens > 0 && out_.generated() > 0 && f != FinishReason::Cancelled)
    lengths_->add(static_cast<int32_t>(out_.generated()), f == FinishReason::Stop);
  // The target cache is left to the owner: the scheduler publishes its full blocks to the
  // prefix cache before freeing them. The draft's state is of no further use.
  if (spec_.proposer) spec_.proposer->reset();
}

void SequenceRun::finish(FinishReason r) {
  if (done_) return;
  result().finish = r;
  close_output();
}

void SequenceRun::preempt() {
  kv_.clear();
  if (spec_.proposer) spec_.proposer->reset();
  // The draft's context is gone too: with a policy that may be off, it waits to be asked again.
  if (spec_.on && spec_.policy) spec_.deferred = spec_.policy->may_start_off();
  spec_.decided_k = -1;
}

}  // namespace tandem
