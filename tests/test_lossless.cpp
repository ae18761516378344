// Losslessness of sampled speculative decoding, position by position.
//
// For each configuration (proposer, policy, draft_min / draft_p_min, sampler settings,
// verification mode) N seeded generations run through the real path (Engine →
// SequenceRun → proposer → verifier), and the distribution of the token at every output
// position 0..L-1 is compared with the EXACT marginal of target-only sampling, computed by
// enumerating every prefix the target can produce (the sampler's cuts keep the tree small).
// A one-sample χ² against exact probabilities has twice the power of a two-sample test
// against a second sampled run, and no reference run can share a bug with the tested one.
//
// Configurations whose outputs may end early (EOS, a stop string, a grammar that completes)
// have an "ended" cell at every later position, in the reference as in the outputs. The CUDA
// configurations run too slowly under the emulator for 12,000 generations: they are checked
// through the device's own rules written out on the host (DeviceTwin, below).
//
// Power: TANDEM_LOSSLESS_INJECT=1 turns on the verifier's fault-injection hook (2% of
// probability moved between two tokens at one output position, a different position per
// configuration) and every configuration must then FAIL; ctest runs the suite both ways.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "engine/runtime/engine_access.hpp"
#include "engine/runtime/grammar_cache.hpp"
#include "engine/model/transformer.hpp"
#include "engine/sampling/gumbel.hpp"
#include "engine/sampling/sampler.hpp"
#include "engine/runtime/sequence_run.hpp"
#include "tandem/engine.hpp"
#include "tests/support/drive.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/stats.hpp"
#include "tests/support/tiny_hf.hpp"
#include "tests/support/tiny_model.hpp"
#include "draft/token_tree.hpp"
#include "kernels/device_decode.hpp"
#include "verify/verifier.hpp"

namespace tandem {
namespace {

constexpr int kPositions = 5;        // output positions checked: the first token and two k=3 steps' worth
// Generations per configuration. TANDEM_LOSSLESS_RUNS lowers it for the sanitizer run, which
// checks the memory safety of these paths, not their statistics (scripts/test.sh).
const int kRuns = std::getenv("TANDEM_LOSSLESS_RUNS") ? std::atoi(std::getenv("TANDEM_LOSSLESS_RUNS")) : 12000;
constexpr double kAlpha = 1e-5;      // per position; fixed seeds make every outcome deterministic
constexpr float kInjectedMass = 0.02f;
constexpr int kPromptGreedy = 8;  // greedy tokens after the prompt's seed
constexpr float kPerturb = 0.1f;  // the close draft's weight noise: it agrees about half the time

// The target; a draft with slightly perturbed weights (agrees about half the time: both
// verification branches, accept and resample, run a lot); a far draft, perturbed more
// (rarely agrees: mostly resampling).
struct Models {
  std::string target, close_draft, far_draft;
};
test::TinyModelSpec target_spec() {
  test::TinyModelSpec t;
  t.arch = "llama";
  t.seed = 21;
  t.tied_embeddings = false;  // an output matrix of std 1/sqrt(n_embd): logits of order one, several tokens compete
  return t;
}
const Models& fixture() {
  static const Models m = [] {
    test::TinyModelSpec t = target_spec();
    const std::string dir = test::scratch_dir("lossless");
    Models m{dir + "/target.gguf", dir + "/close.gguf", dir + "/far.gguf"};
    test::write_tiny_model(m.target, t);
    t.perturb = kPerturb;
    test::write_tiny_model(m.close_draft, t);
    t.perturb = 0.4f;
    test::write_tiny_model(m.far_draft, t);
    return m;
  }();
  return m;
}

// device: "cpu", or "cuda-emulated" (the CUDA backend's kernels under the SIMT emulator,
// target and draft in its one arena): the same statistics through the other backend.
// draft_vocab: the draft's reduced vocabulary (FR-Spec), its first n token ids.
// draft_type: the draft's matrix weights re-quantized at load ("keep": as stored).
// target: the target's file (default: fixture().target).
Engine& engine_with(const std::string& draft, const std::string& device = "cpu", int32_t draft_vocab = 0,
                    const std::string& draft_type = "keep", const std::string& target = "") {
  static std::map<std::tuple<std::string, std::string, std::string, int32_t, std::string>, std::unique_ptr<Engine>>
      engines;
  const std::string t = target.empty() ? fixture().target : target;
  auto& e = engines[{t, draft, device, draft_vocab, draft_type}];
  if (!e) {
    LoadOptions o;
    o.model_path = t;
    o.draft_model_path = draft;
    o.draft_vocab = draft_vocab;
    o.draft_type = draft_type;
    o.threads = 1;
    o.context = 128;
    o.device = device;
    e = Engine::load(o);
  }
  return *e;
}

// The prompt: a seed and the target's own greedy continuation of it, so sampled outputs
// sometimes repeat it and prompt lookup (n-gram) has continuations to propose.
std::vector<int32_t> prompt_for(Engine& e) {
  std::vector<int32_t> p = {17, 203, 45, 88};
  GenerateOptions g;
  g.max_tokens = kPromptGreedy;
  g.sampling.temperature = 0.0f;
  g.ignore_eos = true;
  const auto r = e.generate_tokens(p, g);
  p.insert(p.end(), r.tokens.begin(), r.tokens.end());
  return p;
}

// The "eos" configurations' models: the target and the close draft again, with an
// end-of-generation token the target really emits: the third most likely after the prompt
// (about a tenth of the mass; it comes back at later positions too), so outputs end at
// every position, inside accepted drafts among them.
const Models& eos_fixture() {
  static const Models m = [] {
    Engine& plain = engine_with("");
    const std::vector<int32_t> prompt = prompt_for(plain);
    const std::vector<float> all = plain.logits(prompt);
    const size_t vocab = all.size() / prompt.size();
    SamplingParams sp;
    sp.temperature = 1.0f;
    sp.top_k = 6;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    const Distribution d = make_distribution(std::span<const float>(all).last(vocab), sp, prompt);
    test::TinyModelSpec t = target_spec();
    t.eos_id = d.ids.at(2);
    const std::string dir = test::scratch_dir("lossless_eos");
    Models e{dir + "/target.gguf", dir + "/close.gguf", ""};
    test::write_tiny_model(e.target, t);
    t.perturb = kPerturb;
    test::write_tiny_model(e.close_draft, t);
    return e;
  }();
  return m;
}

// The fixture's target and close draft as Hugging Face folders.
const Models& hf_fixture() {
  static const Models m = [] {
    const std::string dir = test::scratch_dir("lossless_hf");
    Models h{dir + "/target", dir + "/close", ""};
    test::gguf_to_tiny_hf(fixture().target, h.target);
    test::gguf_to_tiny_hf(fixture().close_draft, h.close_draft);
    return h;
  }();
  return m;
}

// The "stop" configurations' stop string: the letter found in about a sixth of the mass of
// the tokens the target may give after the prompt. Many tokens hold it, so outputs stop at
// every position, inside accepted drafts among them, and where two tokens' texts meet too.
std::string stop_string(Engine& e, const std::vector<int32_t>& prompt, const SamplingParams& sp) {
  const std::vector<float> all = e.logits(prompt);
  const size_t vocab = all.size() / prompt.size();
  const Distribution d = make_distribution(std::span<const float>(all).last(vocab), sp, prompt);
  std::string best;
  double best_gap = 1.0;
  for (char ch = 'a'; ch <= 'z'; ++ch) {
    double mass = 0.0;
    for (size_t i = 0; i < d.size(); ++i) {
      if (EngineAccess::parts(e).tokenizer.is_control(d.ids[i])) continue;
      if (e.detokenize(std::span<const int32_t>(&d.ids[i], 1)).find(ch) != std::string::npos) mass += d.probs[i];
    }
    if (std::abs(mass - 1.0 / 6.0) < best_gap) {
      best_gap = std::abs(mass - 1.0 / 6.0);
      best = std::string(1, ch);
    }
  }
  return best;
}

// The exact reference, from a walk over every prefix the target can produce with
// probability at least kPrune. Two views of each output position j are tested:
//   * the token y_j (its marginal over all prefixes);
//   * the rank of y_j in the target's conditional distribution p(. | y_<j) (1 = most likely).
// A bias that depends on the prefix (more mass to whatever is most likely, as a wrong
// acceptance rule gives) spreads over many tokens in the first view but adds up in the
// second. Prefixes below kPrune are not expanded; an output whose prefix was not expanded
// counts in a cell of its own whose exact probability is the mass left out, so pruning makes
// the cells coarser, never the reference inexact.
constexpr double kPrune = 2e-5;
constexpr int kRanks = 4;          // ranks 1..kRanks-1 each, the rest in one cell (few cells: power)
constexpr int32_t kPruned = -1;    // the cell of outputs whose prefix was not expanded
constexpr int32_t kOutside = -2;   // a token outside the target's support: a bug (probability 0)
constexpr int32_t kEnded = -3;     // the output ended before this position (EOS, a stop string, a grammar)

struct Reference {
  std::vector<std::map<int32_t, double>> token;  // [position][token] → P(expanded prefix, token)
  std::vector<std::map<int32_t, double>> rank;   // [position][rank cell] → probability
  std::map<std::vector<int32_t>, std::vector<int32_t>> support;  // expanded prefix → ids by rank
};

// Constrained configurations: the target's distribution over what the grammar allows after
// the output so far (the grammar's own masks are checked against a plain reference in
// test_grammar.cpp).
struct Constraint {
  const TokenGrammar* grammar = nullptr;
  GrammarState state;
};

// What ends an output before kPositions tokens, as the engine decides it (SequenceRun::commit):
// an end-of-generation token (without ignore_eos), a stop string in the output's text (the
// token completing it is the last), a grammar that is complete (nothing may follow).
struct Ending {
  const Tokenizer* eog = nullptr;  // its is_eog tokens end the output
  std::string stop;
  bool grammar = false;
  bool any() const { return eog || !stop.empty() || grammar; }
};

// The target after a sequence that grows and shrinks one token at a time, as the walk below
// goes down and back up its tree: one token's pass per node instead of the whole prefix's.
class TargetCursor {
 public:
  TargetCursor(Engine& e, const std::vector<int32_t>& prompt)
      : tf_(EngineAccess::parts(e).target), kv_(tf_.cache()), vocab_(static_cast<size_t>(tf_.model().config().n_vocab)) {
    std::vector<bool> want(prompt.size(), false);
    want.back() = true;
    run(prompt, want);
  }
  // The logits after the current sequence.
  std::span<const float> last() const { return std::span<const float>(logits_).first(vocab_); }
  void push(int32_t token) { run(std::vector<int32_t>{token}, {true}); }
  void pop() { kv_.truncate(kv_.length() - 1); }

 private:
  void run(const std::vector<int32_t>& tokens, std::vector<bool> want) {
    Batch b;
    b.add(kv_, tokens, std::move(want));
    tf_.forward(b, logits_);
  }
  Transformer& tf_;
  SequenceKV kv_;
  size_t vocab_;
  std::vector<float> logits_;
};

void walk(Engine& e, TargetCursor& cur, const SamplingParams& sp, std::vector<int32_t>& seq, size_t prompt_len,
          double prob, double prune, Reference& ref, const Constraint& c, const Ending& end) {
  const size_t depth = seq.size() - prompt_len;
  const std::vector<float> last(cur.last().begin(), cur.last().end());
  const Distribution d = c.grammar ? make_distribution(last, sp, seq, *c.grammar->mask(c.state))
                                   : make_distribution(last, sp, seq);
  ref.support.emplace(std::vector<int32_t>(seq.begin() + static_cast<ptrdiff_t>(prompt_len), seq.end()), d.ids);
  for (size_t i = 0; i < d.size(); ++i) {
    const double pc = prob * d.probs[i];
    ref.token[depth][d.ids[i]] += pc;
    ref.rank[depth][std::min<int32_t>(static_cast<int32_t>(i), kRanks - 1)] += pc;
    if (depth + 1 == static_cast<size_t>(kPositions)) continue;
    seq.push_back(d.ids[i]);
    Constraint next = c;
    if (c.grammar) next.state = c.grammar->after(c.state, d.ids[i]);
    bool ended = end.eog && end.eog->is_eog(d.ids[i]);
    if (!end.stop.empty()) {
      // The output's text as the client gets it: streamed (control tokens are no text,
      // incomplete characters wait for the rest).
      StreamDecoder text_of(EngineAccess::parts(e).tokenizer);
      std::string text;
      for (size_t j = prompt_len; j < seq.size(); ++j) text += text_of.push(seq[j]);
      ended = ended || text.find(end.stop) != std::string::npos;
    }
    ended = ended || (end.grammar && TokenGrammar::complete(next.state));
    if (ended) {  // every later position of this output is in the ended cell
      for (size_t j = depth + 1; j < static_cast<size_t>(kPositions); ++j) {
        ref.token[j][kEnded] += pc;
        ref.rank[j][kEnded] += pc;
      }
    } else if (pc >= prune) {
      cur.push(d.ids[i]);
      walk(e, cur, sp, seq, prompt_len, pc, prune, ref, next, end);
      cur.pop();
    }
    seq.pop_back();
  }
}

Reference exact_reference(Engine& e, const std::vector<int32_t>& prompt, const SamplingParams& sp,
                          double prune = kPrune, const std::string& grammar = "", Ending end = {}) {
  Reference ref;
  ref.token.resize(kPositions);
  ref.rank.resize(kPositions);
  std::vector<int32_t> seq = prompt;
  Constraint c;
  std::unique_ptr<TokenGrammar> tg;
  if (!grammar.empty()) {
    tg = std::make_unique<TokenGrammar>(Grammar::parse(grammar), grammar_vocab(EngineAccess::parts(e).tokenizer));
    c = {tg.get(), tg->initial()};
  }
  TargetCursor cur(e, prompt);
  walk(e, cur, sp, seq, prompt.size(), 1.0, prune, ref, c, end);
  return ref;
}


// The grammar of the constrained configurations: never complete within kPositions tokens,
// with states whose allowed sets differ (words, a parenthesised name, digits and punctuation),
// each allowing more tokens than top-k keeps.
const char* const kGrammar = R"G(root ::= ( [a-z ]+ | "(" [a-z_ ]* ")" | [0-9,.;:]+ )+)G";
// The "grammar" ending configurations': words, then one digit or mark that completes the
// sentence (nothing may follow it), which the target reaches at any position.
const char* const kGrammarEnds = R"G(root ::= [a-z ]+ [0-9,.;:])G";

// The cells one sampled output falls in at position j: {token cell, rank cell}.
std::pair<int32_t, int32_t> cells_of(const std::vector<int32_t>& out, int j, const Reference& ref) {
  if (static_cast<size_t>(j) >= out.size()) return {kEnded, kEnded};
  const auto it = ref.support.find(std::vector<int32_t>(out.begin(), out.begin() + j));
  if (it == ref.support.end()) return {kPruned, kPruned};
  const int32_t y = out[static_cast<size_t>(j)];
  const auto at = std::find(it->second.begin(), it->second.end(), y);
  if (at == it->second.end()) return {kOutside, kOutside};
  return {y, std::min<int32_t>(static_cast<int32_t>(at - it->second.begin()), kRanks - 1)};
}

struct Sampler {
  std::string name;
  SamplingParams sp;
};

Sampler sampler(const std::string& name) {
  SamplingParams s;
  s.top_p = 1.0f;
  s.min_p = 0.0f;
  s.top_k = 0;
  if (name == "temp1.0_topk6") {
    s.temperature = 1.0f;
    s.top_k = 6;
  } else if (name == "temp0.8_topk8_topp0.9_minp0.05") {
    s.temperature = 0.8f;
    s.top_k = 8;
    s.top_p = 0.9f;
    s.min_p = 0.05f;
  } else if (name == "temp1.0_topk6_penalties") {
    s.temperature = 1.0f;
    s.top_k = 6;
    s.repetition_penalty = 1.3f;
    s.presence_penalty = 0.4f;
    s.frequency_penalty = 0.3f;
  } else if (name == "temp1.0_topk6_mild_penalties") {  // strong ones leave prompt lookup nothing to find
    s.temperature = 1.0f;
    s.top_k = 6;
    s.repetition_penalty = 1.1f;
    s.frequency_penalty = 0.1f;
  } else if (name == "temp1.0_topk6_topp0.9_minp0.05") {  // every cut, flat enough for the emulator's 600 runs
    s.temperature = 1.0f;
    s.top_k = 6;
    s.top_p = 0.9f;
    s.min_p = 0.05f;
  } else if (name == "temp1.0_topk6_logit_bias") {
    // Every fifth token favoured, every seventh (from 3) banned: the target's top-6 and the
    // draft's q both change at most positions.
    s.temperature = 1.0f;
    s.top_k = 6;
    for (int32_t t = 0; t < 320; ++t)
      if (t % 7 == 3) s.logit_bias[t] = -100.0f;
      else if (t % 5 == 0) s.logit_bias[t] = 1.5f;
  } else if (name == "temp0.6_topp0.8_minp0.2") {
    s.temperature = 0.6f;
    s.top_p = 0.8f;
    s.min_p = 0.2f;
  } else {
    throw std::invalid_argument(name);
  }
  return {name, s};
}

struct Config {
  std::string name;
  DraftMode mode;
  std::string policy;
  int k;
  float p_min;
  int draft_min;
  std::string sampler;
  VerifyMode verify;
  bool far_draft;
  std::string device = "cpu";
  std::string grammar = "";  // GBNF: a constrained configuration
  int32_t draft_vocab = 0;   // a reduced draft vocabulary: q is 0 outside it
  std::string draft_type = "keep";  // the draft's weights re-quantized at load (--draft-type)
  int32_t lookup_min = 3;  // prompt lookup ahead of the draft model (on by default); 0: off
  // What may end an output inside an accepted run: "eos" (a token the target emits is its
  // EOS), "stop" (a stop string), "grammar" (the configuration's grammar completes). "": none.
  std::string ending = "";
  // The target and the close draft loaded from Hugging Face folders of the same weights
  // (safetensors, config.json, tokenizer.json) instead of GGUF files.
  bool hf = false;
  // Token trees (SpeculativeOptions::tree_width, tree_nodes); width 1: chains.
  int32_t tree_width = 1;
  int32_t tree_nodes = 0;
};

std::ostream& operator<<(std::ostream& o, const Config& c) { return o << c.name; }

// χ² of observed cells against exact probabilities; cells expected below 5 are merged with
// the pruned-prefix cell. A token outside the support (expected 0) fails outright.
test::Chi2Result cell_test(const std::map<int32_t, int64_t>& seen, const std::map<int32_t, double>& exact, int64_t n) {
  if (seen.count(kOutside)) return {std::numeric_limits<double>::infinity(), 1, 0.0};
  std::vector<int64_t> obs;
  std::vector<double> probs;
  int64_t other_obs = 0;
  double other_p = 0.0, listed = 0.0;
  for (const auto& [cell, p] : exact) {
    listed += p;
    const auto it = seen.find(cell);
    const int64_t c = it == seen.end() ? 0 : it->second;
    if (p * static_cast<double>(n) >= 5.0) {
      obs.push_back(c);
      probs.push_back(p);
    } else {
      other_obs += c;
      other_p += p;
    }
  }
  for (const auto& [cell, c] : seen)
    if (!exact.count(cell)) other_obs += c;  // the pruned-prefix cell
  other_p += std::max(0.0, 1.0 - listed);
  if (other_p * static_cast<double>(n) >= 5.0 || other_obs > 0) {
    obs.push_back(other_obs);
    probs.push_back(std::max(other_p, 1e-300));
  }
  return test::chi2_goodness_of_fit(obs, probs, n);
}

// ---- the device's algorithm, on the host -----------------------------------------------
//
// On a backend that samples and verifies on the device (the CUDA one), a run's output is a
// pure function of its seed: every random choice is counter-based noise keyed by (seed,
// position, tag) (kernels/device_decode.hpp), the draft's draws included. DeviceTwin is that
// function written out plainly from the kernels' rules (kernels/cuda/ops/sampling.cu): draws
// by inverse CDF in id order over 2^-44 fixed-point weights, a draft accepted when
// u * q(x) < p(x), the residual max(0, p - q) (p itself when it has no mass), the bonus
// token drawn from p, and coupled output the Gumbel-max argmin -log u / p (ties to the larger
// p, then the lower id). Its p and q are make_distribution's over the backend's own logits.
//
// Rejection-mode token trees: the draft's tree grown as the device grows it (TreeBuilder: each
// pass's nodes begun in order, then their children), each node's children drawn without
// replacement over the fixed-point weights left (tag tree_draw_tag(depth, slot) - j), and the
// walk with recursive rejection over the visited node's children: child j accepted when
// u · fx(q(x)) / Q_j < fx(W(x)) / S (u keyed kTagAccept, then kTagSiblingAccept - j), else W
// becomes max(0, W/S − q_j) rounded to float where that has mass; the token after the last
// child or at a leaf drawn from W.
//
// Constrained configurations: p and q over what the grammar allows after their sequence
// (the device masks each row before its transforms); a draft with nothing allowed in its
// vocabulary stops there, and so does one after a token that ends the generation (an EOS
// the grammar allows) or the sentence.
//
// The CUDA configurations check the device against it seed by seed (exact: a bias the
// device's verification picks up changes outputs, whatever their number), and check the
// twin's outputs over kRuns seeds, which the emulator could not generate in CI's time, with
// the χ²: together, the device's output distribution is the target's, with the power the CPU
// configurations have.
class DeviceTwin {
 public:
  // k: the drafts per step (fixed policy; rejection mode only: coupled output ignores drafts).
  // bias: the verifier's injected bias (verify/verifier.hpp), applied to p as the device does.
  // tree_width > 1: rejection-mode token trees of tree_nodes nodes (SpeculativeOptions' budget).
  // grammar: GBNF of a constrained configuration ("": none).
  DeviceTwin(Engine& e, const SamplingParams& sp, std::vector<int32_t> prompt, bool rejection, int32_t k,
             int32_t max_tokens, InjectedBias bias = {}, int32_t tree_width = 1, int32_t tree_nodes = 0,
             const std::string& grammar = "")
      : e_(e), sp_(sp), prompt_(std::move(prompt)), rejection_(rejection), k_(k), max_tokens_(max_tokens),
        bias_(bias), tree_width_(tree_width), tree_nodes_(tree_nodes) {
    if (!grammar.empty())
      grammar_ = std::make_unique<TokenGrammar>(Grammar::parse(grammar), grammar_vocab(EngineAccess::parts(e).tokenizer));
  }

  // Fills the cache of p along an output (one pass gives every prefix's row): what run() will
  // ask for when it follows that output.
  void prefetch(const std::vector<int32_t>& out) {
    std::vector<int32_t> seq = prompt_;
    seq.insert(seq.end(), out.begin(), out.end());
    if (!out.empty()) seq.pop_back();
    fill_p(seq);
  }

  std::vector<int32_t> run(uint64_t seed) {
    const PositionNoise noise(seed);
    std::vector<int32_t> seq = prompt_;
    std::vector<int32_t> out;
    while (static_cast<int32_t>(out.size()) < max_tokens_) {
      const int64_t base = static_cast<int64_t>(seq.size());
      if (!rejection_) {  // coupled: the target's Gumbel-max token, whatever was drafted
        out.push_back(gumbel(p_at(seq), noise, base));
        seq.push_back(out.back());
        continue;
      }
      // The first token is plain; then k drafts a step, within the token budget.
      const int32_t k = out.empty() ? 0 : std::min(k_, max_tokens_ - static_cast<int32_t>(out.size()) - 1);
      if (tree_width_ > 1 && k > 0) {
        const std::vector<int32_t> got = tree_step(seq, k, noise);
        out.insert(out.end(), got.begin(), got.end());
        seq.insert(seq.end(), got.begin(), got.end());
        continue;
      }
      std::vector<int32_t> drafts, ctx = seq;
      for (int32_t i = 0; i < k; ++i) {
        const std::vector<float>& q = q_at(ctx);
        const int32_t d = draw([&](size_t v) { return fx(q[v]); }, q.size(), noise.uniform(base + i, kernels::kTagDraft - i));
        if (d < 0) break;
        drafts.push_back(d);
        ctx.push_back(d);
        // Constrained: nothing is drafted after a token that ends the generation or the sentence.
        if (grammar_ && (grammar_->vocab().is_eog(d) || TokenGrammar::complete(state_after(ctx)))) break;
      }
      ctx = seq;
      int32_t next = -1;
      size_t a = 0;
      for (;; ++a) {
        const std::vector<float> p = p_at(ctx);
        const int64_t pos = base + static_cast<int64_t>(a);
        if (a == drafts.size()) {
          next = draw([&](size_t v) { return fx(p[v]); }, p.size(), noise.uniform(pos, kernels::kTagSample));
          break;
        }
        const std::vector<float>& q = q_at(ctx);
        const int32_t x = drafts[a];
        const double u = noise.uniform(pos, kernels::kTagAccept);
        if (u * static_cast<double>(q[static_cast<size_t>(x)]) < static_cast<double>(p[static_cast<size_t>(x)])) {
          ctx.push_back(x);
          continue;
        }
        const double u2 = noise.uniform(pos, kernels::kTagSample);
        next = draw([&](size_t v) { return fx(static_cast<double>(p[v]) - static_cast<double>(q[v])); }, p.size(), u2);
        if (next < 0) next = draw([&](size_t v) { return fx(p[v]); }, p.size(), u2);
        break;
      }
      for (size_t i = 0; i < a; ++i) out.push_back(drafts[i]);
      out.push_back(next);
      seq.insert(seq.end(), drafts.begin(), drafts.begin() + static_cast<ptrdiff_t>(a));
      seq.push_back(next);
    }
    return out;
  }

 private:
  static uint64_t fx(double w) { return w > 0.0 ? static_cast<uint64_t>(w * 17592186044416.0) : 0; }  // 2^44

  // One rejection-mode tree step after seq, k deep: the accepted tokens and the next one.
  std::vector<int32_t> tree_step(const std::vector<int32_t>& seq, int32_t k, const PositionNoise& noise) {
    SpeculativeOptions so;
    so.draft_max = k_;
    so.tree_width = tree_width_;
    so.tree_nodes = tree_nodes_;
    ProposeOptions po;
    po.max_tokens = k;
    po.sampling = &sp_;
    po.vocab = static_cast<int32_t>(q_at(seq).size());
    po.tree_width = tree_width_;
    po.tree_nodes = so.tree_budget();
    const GrammarState state = state_after(seq);
    po.grammar = grammar_.get();
    po.grammar_state = grammar_ ? &state : nullptr;
    Rng unused(0);
    TreeBuilder tb(seq, po, &unused);
    // A pass's nodes: all begun, then each one's draws.
    auto grow = [&](const std::vector<int32_t>& nodes) {
      std::vector<std::vector<TreeChild>> kids(nodes.size());
      for (size_t i = 0; i < nodes.size(); ++i) {
        const int32_t slot = tb.next_slot(), room = tb.begin_expand(nodes[i]);
        if (room <= 0) continue;
        const std::vector<float>& q = q_at(tb.history(nodes[i]));  // after the node's path
        const int32_t tag = kernels::tree_draw_tag(tb.children_depth(nodes[i]), slot);
        std::vector<int32_t> drawn;
        for (int32_t j = 0; j < room; ++j) {
          const int32_t t = draw([&](size_t v) { return std::find(drawn.begin(), drawn.end(), static_cast<int32_t>(v)) == drawn.end() ? fx(q[v]) : 0; },
                                 q.size(), noise.uniform(tb.children_position(nodes[i]), tag - j));
          if (t < 0) break;
          drawn.push_back(t);
          kids[i].push_back({t, std::log(static_cast<double>(q[static_cast<size_t>(t)]))});
        }
      }
      for (size_t i = 0; i < nodes.size(); ++i) tb.add_children(nodes[i], kids[i], 0);
    };
    grow({-1});
    for (std::vector<int32_t> f = tb.take_frontier(); !f.empty(); f = tb.take_frontier()) grow(f);
    const Proposal prop = tb.take();
    // The walk.
    std::vector<int32_t> out, ctx = seq;
    const int64_t base = static_cast<int64_t>(seq.size());
    for (int32_t node = -1;;) {
      std::vector<float> w = p_at(ctx);
      const int64_t pos = base + static_cast<int64_t>(out.size());
      uint64_t sw = 0;
      for (float x : w) sw += fx(x);
      std::vector<int32_t> children;
      for (size_t c = 0; c < prop.parents.size(); ++c)
        if (prop.parents[c] == node) children.push_back(static_cast<int32_t>(c));
      int32_t chosen = -1;
      if (!children.empty()) {
        const std::vector<float>& q = q_at(ctx);
        uint64_t qj = 0;
        for (float x : q) qj += fx(x);
        std::vector<int32_t> tried;
        for (size_t j = 0; j < children.size(); ++j) {
          const int32_t x = prop.tokens[static_cast<size_t>(children[j])];
          const double px = static_cast<double>(fx(w[static_cast<size_t>(x)])) / static_cast<double>(sw);
          const uint64_t qx_fx = fx(q[static_cast<size_t>(x)]);
          const double qx = static_cast<double>(qx_fx) / static_cast<double>(qj);
          const double u = noise.uniform(pos, j == 0 ? kernels::kTagAccept : kernels::kTagSiblingAccept - static_cast<int32_t>(j));
          if (u * qx < px) {
            chosen = children[j];
            break;
          }
          std::vector<float> r(w.size());
          uint64_t s2 = 0;
          for (size_t v = 0; v < w.size(); ++v) {
            const double pv = static_cast<double>(fx(w[v])) / static_cast<double>(sw);
            const bool out_of_q = std::find(tried.begin(), tried.end(), static_cast<int32_t>(v)) != tried.end();
            const double qv = out_of_q ? 0.0 : static_cast<double>(fx(q[v])) / static_cast<double>(qj);
            r[v] = static_cast<float>(pv > qv ? pv - qv : 0.0);
            s2 += fx(r[v]);
          }
          if (s2 > 0) w = std::move(r), sw = s2;
          qj -= qx_fx;
          tried.push_back(x);
        }
      }
      if (chosen < 0) {
        out.push_back(draw([&](size_t v) { return fx(w[v]); }, w.size(), noise.uniform(pos, kernels::kTagSample)));
        return out;
      }
      out.push_back(prop.tokens[static_cast<size_t>(chosen)]);
      ctx.push_back(out.back());
      node = chosen;
    }
  }
  // The first id whose cumulative weight exceeds u times the total; -1 without weight.
  template <class W>
  static int32_t draw(const W& w, size_t n, double u) {
    uint64_t total = 0;
    for (size_t v = 0; v < n; ++v) total += w(v);
    if (total == 0) return -1;
    uint64_t target = static_cast<uint64_t>(u * static_cast<double>(total));
    if (target >= total) target = total - 1;
    uint64_t acc = 0;
    for (size_t v = 0; v < n; ++v) {
      acc += w(v);
      if (acc > target) return static_cast<int32_t>(v);
    }
    return -1;
  }
  static int32_t gumbel(const std::vector<float>& p, const PositionNoise& noise, int64_t position) {
    int32_t best = -1;
    double best_key = std::numeric_limits<double>::infinity();
    float best_p = 0.0f;
    for (size_t v = 0; v < p.size(); ++v) {
      if (!(p[v] > 0.0f)) continue;
      const double key = -portable_log(noise.uniform(position, static_cast<int32_t>(v))) / static_cast<double>(p[v]);
      if (key < best_key || (key == best_key && p[v] > best_p)) {  // (ids ascend: ties keep the lower)
        best = static_cast<int32_t>(v);
        best_key = key;
        best_p = p[v];
      }
    }
    return best;
  }
  static std::vector<float> dense(const Distribution& d, size_t vocab) {
    std::vector<float> out(vocab, 0.0f);
    for (size_t i = 0; i < d.size(); ++i) out[static_cast<size_t>(d.ids[i])] = d.probs[i];
    return out;
  }
  // p after seq (with the injected bias at its position: mass from the most likely token to
  // the second, ties to the lower id, as the device moves it).
  std::vector<float> p_at(const std::vector<int32_t>& seq) {
    if (!p_.count(seq)) fill_p(seq);
    std::vector<float> p = p_.at(seq);
    if (bias_.position != static_cast<int64_t>(seq.size()) || bias_.mass <= 0.0f) return p;
    size_t top = 0;
    for (size_t v = 1; v < p.size(); ++v)
      if (p[v] > p[top]) top = v;
    size_t second = p.size();
    for (size_t v = 0; v < p.size(); ++v)
      if (v != top && p[v] > 0.0f && (second == p.size() || p[v] > p[second])) second = v;
    if (second == p.size()) return p;
    const float moved = std::min(bias_.mass, p[top]);
    p[top] -= moved;
    p[second] += moved;
    return p;
  }
  void fill_p(const std::vector<int32_t>& seq) {
    const std::vector<float> all = e_.logits(seq);
    const size_t vocab = all.size() / seq.size();
    for (size_t n = prompt_.size(); n <= seq.size(); ++n) {
      const std::vector<int32_t> prefix(seq.begin(), seq.begin() + static_cast<ptrdiff_t>(n));
      if (p_.count(prefix)) continue;
      const std::span<const float> row(all.data() + (n - 1) * vocab, vocab);
      p_[prefix] = dense(grammar_ ? make_distribution(row, sp_, prefix, *grammar_->mask(state_after(prefix)))
                                  : make_distribution(row, sp_, prefix),
                         vocab);
    }
  }
  // The grammar's state after seq (its tokens past the prompt).
  GrammarState state_after(const std::vector<int32_t>& seq) const {
    if (!grammar_) return {};
    GrammarState st = grammar_->initial();
    for (size_t i = prompt_.size(); i < seq.size(); ++i) st = grammar_->after(st, seq[i]);
    return st;
  }
  // The draft's q after seq: its logits (over a reduced vocabulary's ids, -inf elsewhere)
  // through the request's transforms, as the draft samples on the device.
  const std::vector<float>& q_at(const std::vector<int32_t>& seq) {
    auto it = q_.find(seq);
    if (it != q_.end()) return it->second;
    Transformer& draft = *EngineAccess::parts(e_).draft;
    const size_t vocab = static_cast<size_t>(draft.model().config().n_vocab);
    std::vector<float> logits;
    {
      SequenceKV kv(draft.cache());
      Batch b;
      std::vector<bool> want(seq.size(), false);
      want.back() = true;
      b.add(kv, seq, want);
      draft.forward(b, logits);
    }
    std::vector<float> row(vocab, -std::numeric_limits<float>::infinity());
    if (const OutputSubset* subset = draft.output_subset()) {
      for (size_t j = 0; j < subset->ids.size(); ++j) row[static_cast<size_t>(subset->ids[j])] = logits[j];
    } else {
      row.assign(logits.begin(), logits.begin() + static_cast<ptrdiff_t>(vocab));
    }
    if (!grammar_) return q_[seq] = dense(make_distribution(row, sp_, seq), vocab);
    try {
      return q_[seq] = dense(make_distribution(row, sp_, seq, *grammar_->mask(state_after(seq))), vocab);
    } catch (const std::runtime_error&) {
      return q_[seq] = std::vector<float>(vocab, 0.0f);  // nothing allowed in the draft's vocabulary
    }
  }

  Engine& e_;
  SamplingParams sp_;
  std::vector<int32_t> prompt_;
  bool rejection_;
  int32_t k_, max_tokens_;
  InjectedBias bias_;
  int32_t tree_width_, tree_nodes_;
  std::unique_ptr<TokenGrammar> grammar_;
  std::map<std::vector<int32_t>, std::vector<float>> p_, q_;
};

class Lossless : public ::testing::TestWithParam<Config> {};
extern const std::vector<Config> kConfigs;

// The request a configuration makes.
GenerateOptions options_of(const Config& c, const SamplingParams& sp) {
  GenerateOptions g;
  g.max_tokens = kPositions;
  g.ignore_eos = c.ending != "eos";
  g.sampling = sp;
  g.speculative.mode = c.mode;
  g.speculative.policy = c.policy;
  g.speculative.draft_max = c.k;
  g.speculative.draft_p_min = c.p_min;
  g.speculative.draft_min = c.draft_min;
  g.speculative.verify = c.verify;
  g.speculative.alpha_prior = 0.9f;    // adaptive/goodput start by drafting,
  g.speculative.start_budget = -1.0f;  // however short the output (kPositions tokens)
  g.speculative.lookup = c.lookup_min > 0;
  if (c.lookup_min > 0) g.speculative.lookup_min = c.lookup_min;
  g.grammar = c.grammar;
  g.speculative.tree_width = c.tree_width;
  g.speculative.tree_nodes = c.tree_nodes;
  return g;
}

uint64_t seed_of(int r) { return 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(r + 1); }

// Every output position's tokens and ranks against the exact reference: each passes, or,
// with the bias injected, the biased position fails.
void check_positions(const std::vector<std::map<int32_t, int64_t>>& seen_token,
                     const std::vector<std::map<int32_t, int64_t>>& seen_rank, const Reference& exact, int runs,
                     bool inject, int biased, const std::string& name, const SpeculativeMetrics& m) {
  double min_p = 1.0;
  for (int j = 0; j < kPositions; ++j) {
    const auto uj = static_cast<size_t>(j);
    const auto tok = cell_test(seen_token[uj], exact.token[uj], runs);
    const auto rank = cell_test(seen_rank[uj], exact.rank[uj], runs);
    ASSERT_GE(tok.df, 2) << "position " << j << ": too few competing tokens for a meaningful test";
    ASSERT_GE(rank.df, 2) << "position " << j << ": too few competing ranks for a meaningful test";
    const double pj = std::min(tok.p_value, rank.p_value);
    min_p = std::min(min_p, pj);
    const std::string what = "position " + std::to_string(j) + ": tokens chi2 " + std::to_string(tok.statistic) +
                             " df " + std::to_string(tok.df) + " p " + std::to_string(tok.p_value) + "; ranks chi2 " +
                             std::to_string(rank.statistic) + " df " + std::to_string(rank.df) + " p " +
                             std::to_string(rank.p_value);
    if (!inject) {
      EXPECT_GT(tok.p_value, kAlpha) << what;
      EXPECT_GT(rank.p_value, kAlpha) << what;
    } else if (j == biased) {
      EXPECT_LT(pj, kAlpha) << "the injected bias went unnoticed at " << what;
    }
  }
  ::testing::Test::RecordProperty("min_p_value", std::to_string(min_p));
  std::printf("%s: acceptance %.3f (%lld drafted), min p-value %.3g%s\n", name.c_str(), m.acceptance_rate(),
              static_cast<long long>(m.drafted_tokens), min_p, inject ? " (bias injected)" : "");
}

// The configuration must really exercise what it claims to.
void check_exercised(const Config& c, const SpeculativeMetrics& m, int runs) {
  // (Prompt lookup finds a continuation in about one step of ten here; a draft model always.)
  EXPECT_GT(m.drafted_tokens, c.mode == DraftMode::Ngram ? runs / 20 : runs / 2) << "too few drafts to mean much";
  EXPECT_GT(m.accepted_tokens, std::max<int64_t>(runs / 240, m.drafted_tokens / 100)) << "too few accepted drafts to mean much";
  EXPECT_LT(m.accepted_tokens, m.drafted_tokens) << "no rejections: the resampling branch went untested";
  if (c.mode == DraftMode::Model && c.lookup_min == 1) {
    // Steps of both sources: lookup's point masses and the model's sampled drafts.
    EXPECT_GT(m.lookup_steps, runs / 20) << "prompt lookup hardly drafted";
    EXPECT_GT(m.lookup_accepted_tokens, 0);
    EXPECT_GT(m.drafted_tokens - m.lookup_drafted_tokens, runs / 2) << "the draft model hardly drafted";
  }
  if (c.tree_width > 1) {
    // (Prompt lookup drafts seldom here, and an adaptive policy sizes its trees by cost and
    // drafts chains where they have paid more.)
    EXPECT_GT(m.tree_steps, c.mode == DraftMode::Ngram ? runs / 20 : runs / 4) << "hardly any token trees were verified";
    // A draft model's fixed trees hold several nodes a step: the siblings are really drafted.
    if (c.mode == DraftMode::Model && c.policy == "fixed") {
      EXPECT_GT(m.drafted_tokens, 2 * m.drafts) << "the trees hardly branched";
    }
  }
  if (c.policy == "adaptive" || c.policy == "goodput") {
    int distinct = 0;
    for (size_t k = 0; k < m.steps_per_k.size(); ++k) distinct += m.steps_per_k[k] > 0;
    EXPECT_GE(distinct, 2) << "the policy never varied k";
  }
}

// Seed-by-seed device runs: fewer than a χ² needs (each is an emulated generation), and
// enough that a 2% bias in the device's verification changes some output: about 3% of runs
// change under it (several of these 200 in each configuration; the seeds are fixed, so the
// injected-bias run shows it every time, within its first 60 runs).
const int kDeviceRuns =
    std::getenv("TANDEM_LOSSLESS_RUNS_CUDA") ? std::atoi(std::getenv("TANDEM_LOSSLESS_RUNS_CUDA")) : 200;

// A CUDA configuration: the device against its twin (DeviceTwin) seed by seed, and the twin
// with the χ² over kRuns seeds.
void check_on_device(const Config& c, int biased, bool inject) {
  ASSERT_TRUE(c.ending.empty()) << "the twin follows no endings (its grammars never complete)";
  const bool rejection = c.verify == VerifyMode::Rejection;
  if (rejection) {
    // Its drafts must be a function of the seed: a fixed k, and no prompt lookup (whose
    // choice against the draft model follows measured times).
    ASSERT_EQ(c.policy, "fixed");
    ASSERT_EQ(c.lookup_min, 0);
  }
  const std::string draft = c.far_draft ? fixture().far_draft : fixture().close_draft;
  Engine& dev = engine_with(draft, c.device, c.draft_vocab, c.draft_type);
  Engine& host = engine_with(draft, "cpu", c.draft_vocab, c.draft_type);
  const std::vector<int32_t> prompt = prompt_for(host);
  const Sampler s = sampler(c.sampler);
  const GenerateOptions g = options_of(c, s.sp);
  const InjectedBias bias{static_cast<int64_t>(prompt.size()) + biased, kInjectedMass};

  // Each run on the device (with the bias where injected), then its twin (never biased here).
  // With the bias, the first run that differs shows it was caught, and the runs stop there:
  // the unbiased configuration checks every run and what they exercised.
  DeviceTwin twin(dev, s.sp, prompt, rejection, c.k, kPositions, {}, c.tree_width, c.tree_nodes, c.grammar);
  GenerateOptions gr = g;
  int mismatches = 0, runs = 0;
  std::string first;
  SpeculativeMetrics m;
  for (int r = 0; r < kDeviceRuns && !(inject && mismatches > 0); ++r, ++runs) {
    gr.sampling.seed = seed_of(r);
    if (inject) inject_verifier_bias(bias);
    const GenerateResult got = dev.generate_tokens(prompt, gr);
    inject_verifier_bias({});
    m.merge(got.speculative);
    twin.prefetch(got.tokens);
    const std::vector<int32_t> want = twin.run(seed_of(r));
    if (want == got.tokens) continue;
    if (++mismatches == 1) {
      first = "run " + std::to_string(r) + ": device";
      for (int32_t t : got.tokens) first += " " + std::to_string(t);
      first += ", twin";
      for (int32_t t : want) first += " " + std::to_string(t);
    }
  }
  std::printf("%s: %d of %d device runs differ from the twin%s\n", c.name.c_str(), mismatches, runs,
              inject ? " (bias injected on the device; the runs stop at the first)" : "");
  if (!inject) {
    check_exercised(c, m, kDeviceRuns);
    // The device's sampling and verification (verify/device_verifier.hpp, draft/draft_probs.hpp),
    // not a host fallback.
    EXPECT_EQ(m.device_verified_steps, m.target_passes) << "steps verified on the host";
    if (c.mode == DraftMode::Model) {
      EXPECT_EQ(m.device_drafted_tokens + m.lookup_drafted_tokens, m.drafted_tokens) << "drafts drawn on the host";
    }
    EXPECT_EQ(mismatches, 0) << mismatches << " of " << kDeviceRuns << " runs differ from the twin; " << first;
  } else {
    EXPECT_GT(mismatches, 0) << "the bias injected on the device changed none of " << runs << " outputs";
  }

  // The twin's distribution: over kRuns seeds, on the CPU backend's distributions (those of
  // the exact reference), with the bias where injected.
  DeviceTwin host_twin(host, s.sp, prompt, rejection, c.k, kPositions, inject ? bias : InjectedBias{}, c.tree_width,
                       c.tree_nodes, c.grammar);
  const Reference exact = exact_reference(host, prompt, s.sp, kPrune, c.grammar);
  std::vector<std::map<int32_t, int64_t>> seen_token(kPositions), seen_rank(kPositions);
  for (int r = 0; r < kRuns; ++r) {
    const std::vector<int32_t> out = host_twin.run(seed_of(r));
    for (int j = 0; j < kPositions; ++j) {
      const auto [token, rank] = cells_of(out, j, exact);
      ++seen_token[static_cast<size_t>(j)][token];
      ++seen_rank[static_cast<size_t>(j)][rank];
    }
  }
  check_positions(seen_token, seen_rank, exact, kRuns, inject, biased, c.name + " (twin)", m);
}

TEST_P(Lossless, EveryOutputPositionFollowsTheTarget) {
  const Config& c = GetParam();
  const bool inject = std::getenv("TANDEM_LOSSLESS_INJECT") != nullptr;
  // The bias goes to position (index of the configuration) mod kPositions: across the suite
  // every position is shown to be checked, several times.
  const auto at = std::find_if(kConfigs.begin(), kConfigs.end(), [&](const Config& k) { return k.name == c.name; });
  const int biased = static_cast<int>(at - kConfigs.begin()) % kPositions;
  if (c.device != "cpu") {
    check_on_device(c, biased, inject);
    return;
  }
  const bool eos = c.ending == "eos";
  const Models& models = eos ? eos_fixture() : c.hf ? hf_fixture() : fixture();
  const std::string draft = c.far_draft ? models.far_draft : models.close_draft;
  Engine& e = engine_with(c.mode == DraftMode::Model ? draft : std::string(), c.device, c.draft_vocab, c.draft_type,
                          models.target);
  if (c.draft_type != "keep") {
    ASSERT_EQ(e.info().draft_type, c.draft_type);
  }
  const std::vector<int32_t> prompt = prompt_for(e);
  const Sampler s = sampler(c.sampler);
  GenerateOptions g = options_of(c, s.sp);
  Ending ending;
  if (eos) ending.eog = &EngineAccess::parts(e).tokenizer;
  if (c.ending == "stop") {
    ending.stop = stop_string(e, prompt, s.sp);
    g.stop = {ending.stop};
  }
  ending.grammar = c.ending == "grammar";
  const Reference exact = exact_reference(e, prompt, s.sp, kPrune, c.grammar, ending);

  if (inject) inject_verifier_bias({static_cast<int64_t>(prompt.size()) + biased, kInjectedMass});
  std::vector<std::map<int32_t, int64_t>> seen_token(kPositions), seen_rank(kPositions);
  SpeculativeMetrics m;
  int64_t ended = 0, cut_inside = 0;
  for (int r = 0; r < kRuns; ++r) {
    g.sampling.seed = seed_of(r);
    const GenerateResult res = e.generate_tokens(prompt, g);
    if (!ending.any()) {
      ASSERT_EQ(res.tokens.size(), static_cast<size_t>(kPositions));
    } else {
      ASSERT_GE(res.tokens.size(), 1u);
      ASSERT_LE(res.tokens.size(), static_cast<size_t>(kPositions));
      ended += res.tokens.size() < static_cast<size_t>(kPositions);
      // Steps commit their accepted drafts and one more token, unless the output ended among
      // them: then fewer tokens were kept than the steps accepted.
      cut_inside += res.speculative.accepted_tokens + res.speculative.target_passes + 1 >
                    static_cast<int64_t>(res.tokens.size());
    }
    for (int j = 0; j < kPositions; ++j) {
      const auto [token, rank] = cells_of(res.tokens, j, exact);
      ++seen_token[static_cast<size_t>(j)][token];
      ++seen_rank[static_cast<size_t>(j)][rank];
    }
    m.merge(res.speculative);
  }
  inject_verifier_bias({});
  check_exercised(c, m, kRuns);
  if (ending.any()) {
    EXPECT_GT(ended, kRuns / 20) << "outputs hardly ended early";
    EXPECT_GT(cut_inside, kRuns / 100) << "outputs hardly ended inside accepted drafts";
  }
  check_positions(seen_token, seen_rank, exact, kRuns, inject, biased, c.name, m);
}

// The draft_min rule in isolation, with a proposer built to expose it: it draws x1 from the
// target's own distribution (so verification accepts it always) and drafts a second token
// only when x1 is not the target's most likely token. Dropping drafts shorter than
// draft_min = 2 would then turn exactly the draws of the top token into plain steps, and the
// first speculative position would show the top token with probability p_top^2 instead of
// p_top. Sampled drafts must be verified whatever their length.
class TopShyProposer final : public PerSequenceProposer {
 public:
  TopShyProposer(Engine& e, const SamplingParams& sp) : e_(e), sp_(sp) {}
  std::string name() const override { return "top-shy"; }
  Proposal propose_sequence(std::span<const int32_t> context, const ProposeOptions& o, Rng& rng) override {
    const std::vector<int32_t> ctx(context.begin(), context.end());
    std::vector<float> logits;
    {
      SequenceKV seq(parts_().target.cache());
      Batch b;
      b.add(seq, ctx);
      parts_().target.forward(b, logits);
    }
    Proposal p;
    Distribution q = make_distribution(logits, sp_, ctx);
    const int32_t x1 = sample(q, rng);
    const int32_t top = q.ids[0];
    p.tokens.push_back(x1);
    p.dists.push_back(std::move(q));
    if (x1 != top && o.max_tokens >= 2) {  // a second, point-mass draft
      p.tokens.push_back(top);
      p.dists.push_back(Distribution{{top}, {1.0f}});
    } else if (x1 == top) {
      ++short_drafts;
    }
    return p;
  }
  int64_t short_drafts = 0;

 private:
  EngineParts parts_() const { return EngineAccess::parts(e_); }
  Engine& e_;
  SamplingParams sp_;
};

TEST(LosslessRules, ShortSampledDraftsAreVerifiedNotDropped) {
  Engine& e = engine_with("");
  const std::vector<int32_t> prompt = prompt_for(e);
  const SamplingParams sp = sampler("temp1.0_topk6").sp;
  const Reference exact = exact_reference(e, prompt, sp);
  const EngineParts parts = EngineAccess::parts(e);
  const int32_t n_vocab = parts.target.model().config().n_vocab;
  GenerateOptions g;
  g.max_tokens = 4;  // the first token is plain; the second step drafts two
  g.ignore_eos = true;
  g.sampling = sp;
  g.speculative.mode = DraftMode::Model;
  g.speculative.draft_max = 2;
  g.speculative.draft_min = 2;
  g.speculative.verify = VerifyMode::Rejection;  // the rule under test (coupled output ignores drafts)
  std::map<int32_t, int64_t> seen_token, seen_rank;
  const int runs = std::min(6000, kRuns);
  const bool inject = std::getenv("TANDEM_LOSSLESS_INJECT") != nullptr;
  if (inject) inject_verifier_bias({static_cast<int64_t>(prompt.size()) + 1, kInjectedMass});
  TopShyProposer proposer(e, sp);
  FixedPolicy policy;
  for (int r = 0; r < runs; ++r) {
    g.sampling.seed = 1000 + static_cast<uint64_t>(r);
    SequenceRun run(parts.target, parts.tokenizer, prompt, g, {}, parts.context, n_vocab, &proposer, &policy);
    test::drive_to_end(run, parts.target);
    const auto [token, rank] = cells_of(run.result().tokens, 1, exact);
    ++seen_token[token];
    ++seen_rank[rank];
  }
  inject_verifier_bias({});
  EXPECT_GT(proposer.short_drafts, runs / 10) << "the proposer should often draft one token";
  const auto tok = cell_test(seen_token, exact.token[1], runs);
  const auto rank = cell_test(seen_rank, exact.rank[1], runs);
  if (inject) {
    EXPECT_LT(std::min(tok.p_value, rank.p_value), kAlpha) << "the injected bias went unnoticed";
  } else {
    EXPECT_GT(tok.p_value, kAlpha) << "tokens chi2 " << tok.statistic << " df " << tok.df;
    EXPECT_GT(rank.p_value, kAlpha) << "ranks chi2 " << rank.statistic << " df " << rank.df;
  }
}

using V = VerifyMode;
const std::vector<Config> kConfigs = {

        Config{"model_fixed_k3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6", V::Rejection, false},
        Config{"model_confidence_pmin0.2", DraftMode::Model, "confidence", 3, 0.2f, 0, "temp1.0_topk6", V::Rejection,
               false},
        Config{"model_adaptive", DraftMode::Model, "adaptive", 4, 0.0f, 0, "temp1.0_topk6", V::Rejection, false},
        Config{"model_goodput", DraftMode::Model, "goodput", 4, 0.0f, 0, "temp1.0_topk6_penalties", V::Rejection,
               false},
        Config{"model_draftmin2_pmin0.18", DraftMode::Model, "fixed", 3, 0.18f, 2, "temp1.0_topk6", V::Rejection,
               false},
        Config{"model_topp_minp", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp0.8_topk8_topp0.9_minp0.05",
               V::Rejection, false},
        Config{"model_penalties", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6_penalties", V::Rejection,
               false},
        Config{"model_topp_minp_no_topk", DraftMode::Model, "fixed", 2, 0.0f, 0, "temp0.6_topp0.8_minp0.2",
               V::Rejection, false},
        Config{"far_model_fixed_k3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp0.8_topk8_topp0.9_minp0.05",
               V::Rejection, true},
        Config{"ngram_fixed_k3", DraftMode::Ngram, "fixed", 3, 0.0f, 0, "temp1.0_topk6", V::Rejection, false},
        Config{"ngram_penalties", DraftMode::Ngram, "fixed", 4, 0.0f, 0, "temp1.0_topk6_mild_penalties",
               V::Rejection, false},
        Config{"ngram_draftmin2", DraftMode::Ngram, "fixed", 3, 0.0f, 2, "temp0.8_topk8_topp0.9_minp0.05",
               V::Rejection, false},
        Config{"coupled_model_fixed_k3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6", V::Coupled, false},
        Config{"coupled_model_goodput_penalties", DraftMode::Model, "goodput", 4, 0.15f, 2, "temp1.0_topk6_penalties",
               V::Coupled, false},
        Config{"coupled_ngram", DraftMode::Ngram, "fixed", 3, 0.0f, 0, "temp0.8_topk8_topp0.9_minp0.05", V::Coupled,
               false},
        // Prompt lookup ahead of the draft model, matching a single token so that it drafts
        // often: steps alternate between its point masses and the model's sampled drafts.
        Config{"lookup1_far_model_fixed_k3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6",
               V::Rejection, true, "cpu", "", 0, "keep", 1},
        Config{"coupled_lookup1_model_goodput", DraftMode::Model, "goodput", 4, 0.0f, 0, "temp0.8_topk8_topp0.9_minp0.05",
               V::Coupled, false, "cpu", "", 0, "keep", 1},
        // Through the CUDA backend (under the SIMT emulator): the exact reference is the
        // target's on that backend, so these check the speculative path there.
        // (every cut: top-k, top-p and min-p, computed on the device for both models)
        Config{"cuda_model_fixed_k3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6_topp0.9_minp0.05",
               V::Rejection, false, "cuda-emulated", "", 0, "keep", 0},
        Config{"cuda_coupled_model_goodput", DraftMode::Model, "goodput", 4, 0.0f, 0, "temp1.0_topk6",
               V::Coupled, false, "cuda-emulated"},
        // Constrained decoding (a grammar): p and q both over what the grammar allows, drafts
        // cut where it forbids a token.
        Config{"grammar_model_fixed_k3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6", V::Rejection, false,
               "cpu", kGrammar},
        Config{"grammar_model_penalties_topp", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6_penalties",
               V::Rejection, false, "cpu", kGrammar},
        Config{"grammar_ngram_fixed_k3", DraftMode::Ngram, "fixed", 3, 0.0f, 0, "temp0.8_topk8_topp0.9_minp0.05",
               V::Rejection, false, "cpu", kGrammar},
        Config{"grammar_coupled_model_goodput", DraftMode::Model, "goodput", 4, 0.0f, 0, "temp1.0_topk6", V::Coupled,
               false, "cpu", kGrammar},
        // A reduced draft vocabulary (FR-Spec): the draft's q covers half the tokens (ids
        // below 160 of 320) and is 0 on the rest, which the target often wants: its tokens
        // there come only from resampling the residual.
        Config{"draft_vocab_model_fixed_k3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6", V::Rejection,
               false, "cpu", "", 160},
        Config{"draft_vocab_coupled_goodput_penalties", DraftMode::Model, "goodput", 4, 0.0f, 0,
               "temp1.0_topk6_penalties", V::Coupled, false, "cpu", "", 160},
        Config{"draft_vocab_grammar_model_fixed_k3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6",
               V::Rejection, false, "cpu", kGrammar, 160},
        // More of the CUDA backend's device sampling and verification (appended, so the CPU
        // configurations keep their injected positions): coupled with penalties. (n-gram
        // drafts find too few continuations in the emulator's 400 generations; their device
        // path is tested in test_cuda_sampling and test_scheduler.)
        Config{"cuda_coupled_model_penalties", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6_penalties",
               V::Coupled, false, "cuda-emulated"},
        // A reduced draft vocabulary sampled on the device (q = 0 outside it after scatter_cols).
        Config{"cuda_draft_vocab_model_fixed_k3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6",
               V::Rejection, false, "cuda-emulated", "", 160, "keep", 0},
        // The draft re-quantized at load (--draft-type): its F16 weights as Q4_0,
        // with a reduced vocabulary (whose head rows are re-quantized too).
        Config{"draft_type_q4_0_draft_vocab_model_fixed_k3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6",
               V::Rejection, false, "cpu", "", 160, "q4_0"},
        // Outputs that end inside accepted drafts (appended, so the configurations above keep
        // their injected positions): an EOS token the target emits, a stop string, a grammar
        // that completes. The drafts after the end were accepted, never committed.
        // (Their order puts the injected bias at an early position for those whose outputs
        // end soonest: a bias where few outputs still run is seen by few of them.)
        Config{"eos_model_fixed_k3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6", V::Rejection, false,
               "cpu", "", 0, "keep", 3, "eos"},
        Config{"grammar_ends_coupled_model_goodput", DraftMode::Model, "goodput", 4, 0.0f, 0, "temp1.0_topk6",
               V::Coupled, false, "cpu", kGrammarEnds, 0, "keep", 3, "grammar"},
        Config{"grammar_ends_model_fixed_k3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6", V::Rejection,
               false, "cpu", kGrammarEnds, 0, "keep", 3, "grammar"},
        Config{"stop_model_fixed_k3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6", V::Rejection, false,
               "cpu", "", 0, "keep", 3, "stop"},
        Config{"stop_coupled_lookup1_model_fixed_k3", DraftMode::Model, "fixed", 3, 0.0f, 0,
               "temp0.8_topk8_topp0.9_minp0.05", V::Coupled, false, "cpu", "", 0, "keep", 1, "stop"},
        Config{"eos_coupled_model_goodput_penalties", DraftMode::Model, "goodput", 4, 0.0f, 0,
               "temp1.0_topk6_mild_penalties", V::Coupled, false, "cpu", "", 0, "keep", 3, "eos"},
        // A Hugging Face pair: the same weights through the other loader (safetensors,
        // config.json, Llama's q/k rows permuted at load, tokenizer.json).
        Config{"hf_model_fixed_k3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6_topp0.9_minp0.05", V::Rejection,
               false, "cpu", "", 0, "keep", 3, "", true},
        Config{"hf_coupled_model_goodput_penalties", DraftMode::Model, "goodput", 4, 0.0f, 0, "temp1.0_topk6_penalties",
               V::Coupled, false, "cpu", "", 0, "keep", 3, "", true},
        // Token trees: several children a node, drawn without replacement from q and
        // verified by recursive rejection sampling over siblings (or Gumbel-max walks), with
        // every cut of p and q, penalties along each branch, a reduced draft vocabulary, and
        // outputs that end inside an accepted branch.
        Config{"tree_model_fixed_w3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6", V::Rejection, false,
               "cpu", "", 0, "keep", 0, "", false, 3, 9},
        Config{"tree_model_topp_minp_w2", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp0.8_topk8_topp0.9_minp0.05",
               V::Rejection, false, "cpu", "", 0, "keep", 0, "", false, 2, 6},
        Config{"tree_far_model_penalties_w4", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6_penalties",
               V::Rejection, true, "cpu", "", 0, "keep", 0, "", false, 4, 12},
        Config{"tree_eos_model_fixed_w2", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6", V::Rejection, false,
               "cpu", "", 0, "keep", 0, "eos", false, 2, 6},
        Config{"tree_coupled_model_goodput_w3", DraftMode::Model, "goodput", 4, 0.0f, 0, "temp1.0_topk6_penalties",
               V::Coupled, false, "cpu", "", 0, "keep", 3, "", false, 3, 10},
        Config{"tree_draft_vocab_model_fixed_w3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6", V::Rejection,
               false, "cpu", "", 160, "keep", 0, "", false, 3, 8},
        Config{"tree_ngram_fixed_w3", DraftMode::Ngram, "fixed", 3, 0.0f, 0, "temp1.0_topk6", V::Rejection, false,
               "cpu", "", 0, "keep", 0, "", false, 3, 8},
        Config{"tree_stop_coupled_model_fixed_w3", DraftMode::Model, "fixed", 3, 0.0f, 0,
               "temp0.8_topk8_topp0.9_minp0.05", V::Coupled, false, "cpu", "", 0, "keep", 0, "stop", false, 3, 8},
        // Constrained trees: every node drawn from q over what the grammar allows after its
        // path (p likewise), and a grammar that completes inside an accepted branch.
        Config{"tree_grammar_model_fixed_w3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6", V::Rejection,
               false, "cpu", kGrammar, 0, "keep", 0, "", false, 3, 9},
        Config{"tree_grammar_ends_coupled_model_fixed_w3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6",
               V::Coupled, false, "cpu", kGrammarEnds, 0, "keep", 0, "grammar", false, 3, 8},
        // Coupled trees verified on the device: each row's Gumbel-max token under penalties
        // along its node's path, then the walk.
        Config{"cuda_tree_coupled_model_penalties_w3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6_penalties",
               V::Coupled, false, "cuda-emulated", "", 0, "keep", 0, "", false, 3, 8},
        // Rejection-mode trees on the device: children drawn from q without replacement there,
        // recursive rejection over siblings there.
        Config{"cuda_tree_model_fixed_w3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6_penalties",
               V::Rejection, false, "cuda-emulated", "", 0, "keep", 0, "", false, 3, 8},
        // Sampled trees sized by the cost model (the goodput policy's T(n)): how many children
        // a node gets depends on q and the tree so far, never on the children's own draws.
        Config{"tree_model_goodput_w3", DraftMode::Model, "goodput", 4, 0.0f, 0, "temp1.0_topk6", V::Rejection, false,
               "cpu", "", 0, "keep", 0, "", false, 3, 10},
        // Constrained requests on the device: each row's grammar mask applied there before the
        // draft's q (after a reduced vocabulary's scatter) and the target's p, with penalties;
        // a rejection-mode tree whose nodes are drawn from masked q's there.
        Config{"cuda_grammar_draft_vocab_model_penalties", DraftMode::Model, "fixed", 3, 0.0f, 0,
               "temp1.0_topk6_penalties", V::Rejection, false, "cuda-emulated", kGrammar, 160, "keep", 0},
        Config{"cuda_tree_grammar_model_fixed_w3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6", V::Rejection,
               false, "cuda-emulated", kGrammar, 0, "keep", 0, "", false, 3, 8},
        // A logit bias (OpenAI's logit_bias): p and q both biased, after the penalties; on
        // chains, a reduced draft vocabulary (biased ids past it skipped), trees and the device.
        Config{"bias_coupled_draft_vocab_goodput", DraftMode::Model, "goodput", 4, 0.0f, 0,
               "temp1.0_topk6_logit_bias", V::Coupled, false, "cpu", "", 160},
        Config{"bias_model_fixed_k3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6_logit_bias",
               V::Rejection, false},
        Config{"bias_tree_model_fixed_w3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6_logit_bias",
               V::Rejection, false, "cpu", "", 0, "keep", 0, "", false, 3, 9},
        Config{"cuda_bias_model_fixed_k3", DraftMode::Model, "fixed", 3, 0.0f, 0, "temp1.0_topk6_logit_bias",
               V::Rejection, false, "cuda-emulated", "", 0, "keep", 0}};

INSTANTIATE_TEST_SUITE_P(
    Configs, Lossless, ::testing::ValuesIn(kConfigs),
    [](const ::testing::TestParamInfo<Config>& i) {
      std::string n = i.param.name;
      for (char& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

}  // namespace
}  // namespace tandem
