// Token trees end to end (draft/token_tree.hpp, verify/tree_verifier.hpp, tree attention):
// greedy output is the target's token for token whatever the tree's shape and draft, alone
// and batched, on the CPU and on the emulated CUDA backend; a seed gives plain decoding's text
// under coupled verification; logprobs, EOS and stop strings inside a branch behave as with
// chains; the metrics count trees by depth.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "draft/model_proposer.hpp"
#include "draft/token_tree.hpp"
#include "engine/grammar/grammar.hpp"
#include "engine/grammar/token_grammar.hpp"
#include "engine/runtime/engine_access.hpp"
#include "engine/runtime/grammar_cache.hpp"
#include "engine/runtime/sequence_grammar.hpp"
#include "engine/runtime/scheduler.hpp"
#include "kernels/backend_factory.hpp"
#include "tandem/engine.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/prompts.hpp"
#include "tests/support/tiny_model.hpp"

namespace tandem {
namespace {

test::TinyModelSpec fixture_spec() {
  test::TinyModelSpec t;
  t.arch = "qwen2";
  t.tied_embeddings = false;
  t.seed = 3;
  return t;
}

const test::TinyPair& fixture_pair() {
  static const test::TinyPair p = test::write_tiny_pair(test::scratch_dir("tree-pair"), fixture_spec());
  return p;
}

std::unique_ptr<Engine> load(const std::string& target, const std::string& draft, const std::string& backend = "cpu") {
  LoadOptions o;
  o.model_path = target;
  o.draft_model_path = draft;
  o.threads = 1;
  o.context = 256;
  o.device = backend;
  return Engine::load(o);
}

GenerateOptions greedy(int n) { return test::greedy_options(n, DraftMode::None, 4); }

GenerateOptions with_tree(GenerateOptions g, int width, int nodes, int depth) {
  g.speculative.mode = DraftMode::Model;
  g.speculative.draft_max = depth;
  g.speculative.tree_width = width;
  g.speculative.tree_nodes = nodes;
  g.speculative.lookup = false;
  return g;
}

struct Shape {
  int width, nodes, depth;
};
const Shape kShapes[] = {{2, 4, 2}, {2, 8, 4}, {3, 12, 4}, {4, 16, 6}, {2, 0, 3}, {8, 40, 8}};

TEST(TokenTrees, GreedyOutputIsTheTargetsForEveryShapeAndDraft) {
  const auto& fx = fixture_pair();
  for (const std::string& draft : {fx.close_draft, fx.far_draft}) {
    auto e = load(fx.target, draft);
    for (uint32_t s = 0; s < 4; ++s) {
      const auto prompt = test::random_prompt(3 + static_cast<int>(s) * 7, s, 1);
      const auto plain = e->generate_tokens(prompt, greedy(40));
      for (const Shape& sh : kShapes) {
        const auto tree = e->generate_tokens(prompt, with_tree(greedy(40), sh.width, sh.nodes, sh.depth));
        ASSERT_EQ(tree.tokens, plain.tokens) << "draft " << draft << " prompt " << s << " width " << sh.width
                                             << " nodes " << sh.nodes << " depth " << sh.depth;
        const SpeculativeMetrics& m = tree.speculative;
        EXPECT_GT(m.tree_steps, 0);
        EXPECT_EQ(m.drafted_per_position.size(), static_cast<size_t>(sh.depth));
        EXPECT_LE(m.accepted_tokens, m.drafted_tokens);
        for (size_t d = 0; d < m.accepted_per_position.size(); ++d)
          EXPECT_LE(m.accepted_per_position[d], m.drafted_per_position[d]) << "depth " << d + 1;
      }
    }
  }
}

// Prompt lookup's trees: the continuations of several earlier occurrences merged, each
// verified in the same pass. A prompt whose phrases go on differently after the same words.
TEST(TokenTrees, PromptLookupTreesKeepGreedyOutputAndBranch) {
  auto e = load(fixture_pair().target, "");
  for (uint32_t s = 0; s < 4; ++s) {
    std::vector<int32_t> prompt;
    const auto a = test::random_prompt(6, 50 + s, 1), b = test::random_prompt(6, 60 + s, 1);
    for (int rep = 0; rep < 3; ++rep) {  // "x y" then a or b, three times each
      for (const auto* tail : {&a, &b}) {
        prompt.push_back(7);
        prompt.push_back(9);
        prompt.insert(prompt.end(), tail->begin(), tail->end());
      }
    }
    GenerateOptions g = greedy(40);
    const auto plain = e->generate_tokens(prompt, g);
    g.speculative.mode = DraftMode::Ngram;
    g.speculative.draft_max = 5;
    g.speculative.tree_width = 3;
    g.speculative.tree_nodes = 12;
    const auto tree = e->generate_tokens(prompt, g);
    ASSERT_EQ(tree.tokens, plain.tokens) << "prompt " << s;
    EXPECT_GT(tree.speculative.tree_steps, 0);
  }
}

// The draft keeps the KV of the tree nodes the target accepted (moved into chain order, not
// read again): its next tree is the one a draft that read the whole context afresh drafts.
TEST(TokenTrees, TheDraftKeepsTheAcceptedPathsCache) {
  const auto& fx = fixture_pair();
  auto e = load(fx.target, fx.close_draft);
  Transformer& draft = *EngineAccess::parts(*e).draft;
  SamplingParams sp;
  sp.temperature = 0.0f;
  ProposeOptions po;
  po.max_tokens = 4;
  po.sampling = &sp;
  po.vocab = draft.model().config().n_vocab;
  po.tree_width = 3;
  po.tree_nodes = 12;
  Rng rng(1);
  for (uint32_t s = 0; s < 3; ++s) {
    const auto ctx = test::random_prompt(8 + static_cast<int>(s) * 5, 70 + s, 1);
    ModelProposer kept(draft), fresh(draft);
    kept.prefill(ctx);
    const Proposal first = kept.propose(ctx, po, rng);
    ASSERT_TRUE(first.tree());
    // Accept the first child at each depth while it has one (the nodes fed first).
    std::vector<int32_t> next(ctx);
    for (int32_t node = -1;;) {
      int32_t child = -1;
      for (size_t i = 0; i < first.parents.size() && child < 0; ++i)
        if (first.parents[i] == node) child = static_cast<int32_t>(i);
      if (child < 0) break;
      next.push_back(first.tokens[static_cast<size_t>(child)]);
      node = child;
    }
    const size_t accepted = next.size() - ctx.size();
    next.push_back(5);  // the bonus token
    const Proposal again = kept.propose(next, po, rng);
    fresh.prefill(next);
    const Proposal want = fresh.propose(next, po, rng);
    EXPECT_EQ(again.tokens, want.tokens) << "prompt " << s;
    EXPECT_EQ(again.parents, want.parents) << "prompt " << s;
    // The path's fed nodes were kept: at least its first (the best child is always fed), at
    // most all of it (a fed node may have lost its children to the pruning).
    EXPECT_GE(kept.tree_tokens_kept(), 1) << "prompt " << s;
    EXPECT_LE(kept.tree_tokens_kept(), static_cast<int64_t>(accepted)) << "prompt " << s;
  }
}

// Coupled verification: a seed gives plain decoding's text whatever the tree, and its
// logprobs (each from the node's own row of the tree pass) are plain decoding's, bit for bit.
TEST(TokenTrees, ASeedGivesThePlainTextAndLogprobsWhateverTheTree) {
  const auto& fx = fixture_pair();
  auto e = load(fx.target, fx.close_draft);
  for (uint32_t s = 0; s < 3; ++s) {
    const auto prompt = test::random_prompt(5 + static_cast<int>(s) * 4, 10 + s, 1);
    GenerateOptions g;
    g.max_tokens = 30;
    g.ignore_eos = true;
    g.sampling.temperature = 0.8f;
    g.sampling.top_k = 12;
    g.sampling.repetition_penalty = 1.1f;
    g.sampling.seed = 100 + s;
    g.logprobs = 3;
    g.speculative.verify = VerifyMode::Coupled;
    const auto plain = e->generate_tokens(prompt, g);
    for (const Shape& sh : kShapes) {
      const auto tree = e->generate_tokens(prompt, with_tree(g, sh.width, sh.nodes, sh.depth));
      ASSERT_EQ(tree.tokens, plain.tokens) << "prompt " << s << " width " << sh.width << " nodes " << sh.nodes;
      EXPECT_GT(tree.speculative.tree_steps, 0);
      ASSERT_EQ(tree.logprobs.size(), plain.logprobs.size());
      for (size_t i = 0; i < plain.logprobs.size(); ++i) {
        EXPECT_EQ(tree.logprobs[i].chosen.logprob, plain.logprobs[i].chosen.logprob) << "token " << i;
        ASSERT_EQ(tree.logprobs[i].top.size(), plain.logprobs[i].top.size());
        for (size_t j = 0; j < plain.logprobs[i].top.size(); ++j)
          EXPECT_EQ(tree.logprobs[i].top[j].logprob, plain.logprobs[i].top[j].logprob);
      }
    }
  }
}

// Greedy logprobs with trees are plain decoding's too.
TEST(TokenTrees, GreedyLogprobsAreThePlainOnes) {
  const auto& fx = fixture_pair();
  auto e = load(fx.target, fx.close_draft);
  const auto prompt = test::random_prompt(9, 4, 1);
  GenerateOptions g = greedy(24);
  g.logprobs = 2;
  const auto plain = e->generate_tokens(prompt, g);
  const auto tree = e->generate_tokens(prompt, with_tree(g, 3, 12, 4));
  ASSERT_EQ(tree.tokens, plain.tokens);
  ASSERT_EQ(tree.logprobs.size(), plain.logprobs.size());
  for (size_t i = 0; i < plain.logprobs.size(); ++i) EXPECT_EQ(tree.logprobs[i].chosen.logprob, plain.logprobs[i].chosen.logprob) << i;
}

// On the CUDA backend (its kernels under the emulator): trees are drafted with their nodes'
// children chosen on the device, their nodes attended to by the CUDA kernel, and verified on
// the device (greedy: a walk along each row's argmax, of the penalised logits with penalties;
// coupled: along each row's Gumbel-max token), so only ids come back; a seed's coupled text
// is plain decoding's.
TEST(TokenTrees, GreedyOutputIsTheTargetsOnTheCudaBackend) {
  const auto& fx = fixture_pair();
  auto e = load(fx.target, fx.close_draft, "cuda-emulated");
  for (uint32_t s = 0; s < 2; ++s) {
    const auto prompt = test::random_prompt(6 + static_cast<int>(s) * 9, 20 + s, 1);
    const auto plain = e->generate_tokens(prompt, greedy(16));
    GenerateOptions k = greedy(16);
    k.sampling.temperature = 0.9f;
    k.sampling.top_k = 16;
    k.sampling.repetition_penalty = 1.1f;
    k.sampling.seed = 7 + s;
    k.speculative.verify = VerifyMode::Coupled;
    const auto kplain = e->generate_tokens(prompt, k);
    GenerateOptions pen = greedy(16);  // greedy with penalties: the argmax of penalised rows
    pen.sampling.repetition_penalty = 1.3f;
    pen.sampling.frequency_penalty = 0.2f;
    const auto pplain = e->generate_tokens(prompt, pen);
    for (const Shape& sh : {Shape{2, 6, 3}, Shape{4, 16, 5}}) {
      const auto ptree = e->generate_tokens(prompt, with_tree(pen, sh.width, sh.nodes, sh.depth));
      ASSERT_EQ(ptree.tokens, pplain.tokens) << "penalties, prompt " << s << " width " << sh.width;
      EXPECT_GT(ptree.speculative.device_verified_steps, 0) << "greedy trees with penalties are verified on the device";
      const auto tree = e->generate_tokens(prompt, with_tree(greedy(16), sh.width, sh.nodes, sh.depth));
      ASSERT_EQ(tree.tokens, plain.tokens) << "prompt " << s << " width " << sh.width;
      EXPECT_GT(tree.speculative.tree_steps, 0);
      EXPECT_GT(tree.speculative.device_verified_steps, 0) << "greedy trees are verified on the device";
      EXPECT_GT(tree.speculative.device_drafted_tokens, 0) << "greedy trees are drafted on the device";
      EXPECT_GT(ptree.speculative.device_drafted_tokens, 0) << "so are greedy trees with penalties";
      const auto ktree = e->generate_tokens(prompt, with_tree(k, sh.width, sh.nodes, sh.depth));
      ASSERT_EQ(ktree.tokens, kplain.tokens) << "coupled, prompt " << s << " width " << sh.width;
      EXPECT_GT(ktree.speculative.tree_steps, 0);
      EXPECT_GT(ktree.speculative.device_verified_steps, 0) << "coupled trees are verified on the device";
      EXPECT_GT(ktree.speculative.device_drafted_tokens, 0) << "coupled trees are drafted on the device";
    }
  }
}

// On the CUDA backend, requests with logprobs draft and verify their trees on the device
// too, and each token's logprobs (reached on the device from its node's row) are plain
// decoding's, bit for bit: greedy, coupled with penalties, and rejection mode (whose tokens
// differ from plain decoding's: checked against the teacher-forced logits in test_logprobs).
TEST(TokenTrees, LogprobsOnTheCudaBackendAreThePlainOnes) {
  const auto& fx = fixture_pair();
  auto e = load(fx.target, fx.close_draft, "cuda-emulated");
  const auto prompt = test::random_prompt(11, 30, 1);
  GenerateOptions g = greedy(14);
  g.logprobs = 4;
  GenerateOptions k = g;
  k.sampling.temperature = 0.9f;
  k.sampling.top_k = 16;
  k.sampling.repetition_penalty = 1.2f;
  k.sampling.seed = 5;
  k.speculative.verify = VerifyMode::Coupled;
  for (const GenerateOptions& o : {g, k}) {
    const auto plain = e->generate_tokens(prompt, o);
    const auto tree = e->generate_tokens(prompt, with_tree(o, 3, 10, 4));
    const std::string what = o.sampling.greedy() ? "greedy" : "coupled";
    ASSERT_EQ(tree.tokens, plain.tokens) << what;
    EXPECT_GT(tree.speculative.tree_steps, 0) << what;
    EXPECT_GT(tree.speculative.device_verified_steps, 0) << what << ": verified on the device";
    EXPECT_GT(tree.speculative.device_drafted_tokens, 0) << what << ": drafted on the device";
    ASSERT_EQ(tree.logprobs.size(), plain.logprobs.size()) << what;
    for (size_t i = 0; i < plain.logprobs.size(); ++i) {
      EXPECT_EQ(tree.logprobs[i].chosen.token, tree.tokens[i]) << what << " token " << i;
      EXPECT_EQ(tree.logprobs[i].chosen.logprob, plain.logprobs[i].chosen.logprob) << what << " token " << i;
      ASSERT_EQ(tree.logprobs[i].top.size(), 4u) << what;
      for (size_t j = 0; j < 4; ++j) {
        EXPECT_EQ(tree.logprobs[i].top[j].token, plain.logprobs[i].top[j].token) << what << " token " << i;
        EXPECT_EQ(tree.logprobs[i].top[j].logprob, plain.logprobs[i].top[j].logprob) << what << " token " << i;
      }
    }
  }
  // Rejection-mode trees: one logprobs entry per token, each of its token, and the verdicts
  // reached on the device.
  GenerateOptions r = k;
  r.speculative.verify = VerifyMode::Rejection;
  const auto rtree = e->generate_tokens(prompt, with_tree(r, 3, 10, 4));
  EXPECT_GT(rtree.speculative.device_verified_steps, 0);
  ASSERT_EQ(rtree.logprobs.size(), rtree.tokens.size());
  for (size_t i = 0; i < rtree.tokens.size(); ++i) {
    EXPECT_EQ(rtree.logprobs[i].chosen.token, rtree.tokens[i]) << i;
    EXPECT_TRUE(std::isfinite(rtree.logprobs[i].chosen.logprob)) << "a drawn token is in its distribution: " << i;
  }
}

// The CUDA engine on the tree pair, its draft and DraftProbs, and the greedy and coupled
// requests the device-drafting tests draft for (coupled: repetition penalty over the context
// and each node's path; its seed is its noise's, as SequenceRun settles it).
struct DeviceDrafting {
  std::unique_ptr<Engine> e = load(fixture_pair().target, fixture_pair().close_draft, "cuda-emulated");
  Transformer& draft = *EngineAccess::parts(*e).draft;
  DraftProbs* dp = EngineAccess::parts(*e).draft_probs;
  SamplingParams greedy_sp = [] {
    SamplingParams p;
    p.temperature = 0.0f;
    return p;
  }();
  SamplingParams coupled_sp = [] {
    SamplingParams p;
    p.temperature = 0.9f;
    p.top_k = 16;
    p.repetition_penalty = 1.2f;
    p.seed = 11;
    return p;
  }();
  PositionNoise noise{11};
  // One proposal drafted on the device and one on the host from the downloaded rows, with
  // the bytes each brought back.
  struct Both {
    Proposal device, host;
    int64_t device_bytes, host_bytes;
  };
  Both propose_both(const std::vector<int32_t>& ctx, const ProposeOptions& po, Rng& rng) {
    ModelProposer on_device(draft, dp), on_host(draft);
    Both b;
    const int64_t b0 = kernels::cuda_bytes_to_host(draft.backend());
    b.device = on_device.propose(ctx, po, rng);
    const int64_t b1 = kernels::cuda_bytes_to_host(draft.backend());
    b.host = on_host.propose(ctx, po, rng);
    b.device_bytes = b1 - b0;
    b.host_bytes = kernels::cuda_bytes_to_host(draft.backend()) - b1;
    return b;
  }
};

// On the CUDA backend greedy and coupled trees choose their nodes' children on the device
// (DraftProbs::tree_children): the same trees as the host's TreeBuilder::expand reading the
// downloaded rows, with the whole draft vocabulary and a reduced one.
TEST(TokenTrees, TheDeviceChoosesTheChildrenTheHostWould) {
  DeviceDrafting dd;
  ASSERT_NE(dd.dp, nullptr);
  auto& [e, draft, dp, greedy_sp, coupled_sp, noise] = dd;
  Rng rng(1);
  for (const int32_t subset : {0, 24}) {
    e->set_draft_vocab(subset);
    for (uint32_t s = 0; s < 3; ++s) {
      const auto ctx = test::random_prompt(6 + static_cast<int>(s) * 7, 90 + s, 1);
      for (const bool coupled : {false, true}) {
        for (const Shape& sh : {Shape{3, 12, 4}, Shape{4, 20, 5}}) {
          SCOPED_TRACE("subset " + std::to_string(subset) + " prompt " + std::to_string(s) + (coupled ? " coupled" : " greedy") +
                       " width " + std::to_string(sh.width));
          ProposeOptions po;
          po.max_tokens = sh.depth;
          po.sampling = coupled ? &coupled_sp : &greedy_sp;
          po.coupled = coupled ? &noise : nullptr;
          po.vocab = draft.model().config().n_vocab;
          po.tree_width = sh.width;
          po.tree_nodes = sh.nodes;
          po.on_device = true;
          const auto [d, h, device_bytes, host_bytes] = dd.propose_both(ctx, po, rng);
          ASSERT_TRUE(h.tree());
          EXPECT_EQ(d.tokens, h.tokens);
          EXPECT_EQ(d.parents, h.parents);
          EXPECT_TRUE(d.on_device);
          EXPECT_FALSE(h.on_device);
          // What crossed: a few ids and values per expanded node, not its row of logits.
          if (subset == 0) {
            const int64_t row = static_cast<int64_t>(draft.n_logits()) * 4;
            EXPECT_LT(device_bytes, row) << "the device's tree: less than one row of logits in all";
            EXPECT_GE(host_bytes, 2 * row) << "the host's: a row per expanded node";
          }
        }
      }
    }
  }
}

// Constrained drafting on the CUDA backend: each row is masked there (RowMasks) before the
// draft chooses, so chains and trees under a grammar are the ones the host drafts from the
// downloaded rows (greedy with the confidence stop, coupled; a grammar that never ends and
// one that ends after a mark), while only ids and a few values come back.
TEST(TokenTrees, ConstrainedDraftsAreChosenOnTheDeviceAsOnTheHost) {
  DeviceDrafting dd;
  ASSERT_NE(dd.dp, nullptr);
  auto& [e, draft, dp, greedy_sp, coupled_sp, noise] = dd;
  const auto vocab = grammar_vocab(EngineAccess::parts(*e).tokenizer);
  Rng rng(1);
  int drafted = 0, ended = 0;
  for (const char* text : {"root ::= [a-m ]+", "root ::= [a-z ]+ [0-9,.;:]"}) {
    const TokenGrammar tg(Grammar::parse(text), vocab);
    const GrammarState start = tg.initial();
    for (uint32_t s = 0; s < 2; ++s) {
      const auto ctx = test::random_prompt(6 + static_cast<int>(s) * 7, 50 + s, 1);
      for (const bool coupled : {false, true})
        for (const bool tree : {false, true}) {
          SCOPED_TRACE(std::string(text) + " prompt " + std::to_string(s) + (coupled ? " coupled" : " greedy") +
                       (tree ? " tree" : " chain"));
          ProposeOptions po;
          po.max_tokens = tree ? 4 : 6;
          po.sampling = coupled ? &coupled_sp : &greedy_sp;
          po.coupled = coupled ? &noise : nullptr;
          po.vocab = draft.model().config().n_vocab;
          po.grammar = &tg;
          po.grammar_state = &start;
          po.p_min = tree ? 0.0f : 0.02f;
          po.tree_width = tree ? 3 : 1;
          po.tree_nodes = tree ? 12 : 0;
          po.on_device = true;
          const auto [d, h, device_bytes, host_bytes] = dd.propose_both(ctx, po, rng);
          EXPECT_EQ(d.tokens, h.tokens);
          EXPECT_EQ(d.parents, h.parents);
          EXPECT_EQ(d.on_device, !d.tokens.empty());
          EXPECT_LT(device_bytes, static_cast<int64_t>(draft.n_logits()) * 4) << "less than one row of logits in all";
          drafted += static_cast<int>(d.tokens.size());
          // The chain stops after a token that ends the sentence.
          GrammarState g = start;
          for (size_t i = 0; !tree && i < d.tokens.size(); ++i) {
            ASSERT_TRUE(tg.allows(g, d.tokens[i]));
            g = tg.after(g, d.tokens[i]);
            if (TokenGrammar::complete(g)) {
              EXPECT_EQ(i + 1, d.tokens.size());
              ++ended;
            }
          }
        }
    }
  }
  EXPECT_GT(drafted, 40);
  EXPECT_GT(ended, 0) << "no chain completed its sentence: the stop went untested";
}

// Rejection-mode trees on the CUDA backend: each node's children drawn from q without
// replacement on the device (q left there), verified there with recursive rejection over
// siblings; prompt lookup's trees as point masses. Nothing falls back to the host, and a
// seed's output is the same every time (every draw is keyed by the seed). Their outputs'
// distribution: test_cuda_sampling (RejectionTreesFollowTheTargetAtEveryDepth) and the
// losslessness suite (cuda_tree_model_fixed_w3).
TEST(TokenTrees, RejectionTreesAreDrawnAndVerifiedOnTheCudaBackend) {
  const auto& fx = fixture_pair();
  auto e = load(fx.target, fx.close_draft, "cuda-emulated");
  auto lookup = load(fx.target, "", "cuda-emulated");
  for (uint32_t s = 0; s < 2; ++s) {
    const auto prompt = test::random_prompt(8 + static_cast<int>(s) * 5, 30 + s, 1);
    GenerateOptions r = greedy(20);
    r.sampling.temperature = 0.8f;
    r.sampling.top_k = 12;
    r.sampling.repetition_penalty = 1.1f;
    r.sampling.seed = 5 + s;
    r.speculative.verify = VerifyMode::Rejection;
    for (const Shape& sh : {Shape{3, 9, 3}, Shape{2, 10, 5}}) {
      SCOPED_TRACE("prompt " + std::to_string(s) + " width " + std::to_string(sh.width));
      const GenerateOptions t = with_tree(r, sh.width, sh.nodes, sh.depth);
      const auto a = e->generate_tokens(prompt, t), b = e->generate_tokens(prompt, t);
      EXPECT_EQ(a.tokens, b.tokens) << "a seed's output";
      EXPECT_EQ(a.tokens.size(), 20u);
      EXPECT_GT(a.speculative.tree_steps, 0);
      EXPECT_EQ(a.speculative.device_drafted_tokens, a.speculative.drafted_tokens) << "drawn on the host";
      EXPECT_GT(a.speculative.device_verified_steps, 0);
      EXPECT_EQ(a.speculative.device_verified_steps, a.speculative.target_passes) << "verified on the host";
    }
  }
  // Prompt lookup's trees (point masses), in rejection mode.
  std::vector<int32_t> prompt;
  const auto x = test::random_prompt(5, 71, 1), y = test::random_prompt(5, 72, 1);
  for (int rep = 0; rep < 3; ++rep)
    for (const auto* tail : {&x, &y}) {
      prompt.insert(prompt.end(), {7, 9});
      prompt.insert(prompt.end(), tail->begin(), tail->end());
    }
  GenerateOptions g = greedy(24);
  g.sampling.temperature = 0.7f;
  g.sampling.seed = 3;
  g.speculative.verify = VerifyMode::Rejection;
  g.speculative.mode = DraftMode::Ngram;
  g.speculative.draft_max = 4;
  g.speculative.tree_width = 3;
  g.speculative.tree_nodes = 10;
  const auto a = lookup->generate_tokens(prompt, g), b = lookup->generate_tokens(prompt, g);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_GT(a.speculative.tree_steps, 0);
  EXPECT_EQ(a.speculative.device_verified_steps, a.speculative.target_passes);
}

// Constrained requests draft trees too: each node from q over what the grammar allows after
// its path, none after a node that ends the sentence. Greedy output and a seed's coupled
// output are plain constrained decoding's, for a grammar that never ends and one that ends
// after a word and a mark. Bad shapes are refused.
TEST(TokenTrees, GrammarsConstrainEveryNodeAndBadShapesAreRefused) {
  const auto& fx = fixture_pair();
  auto e = load(fx.target, fx.close_draft);
  for (const char* grammar : {"root ::= [a-m ]+", "root ::= [a-z ]+ [0-9,.;:]"}) {
    for (uint32_t s = 0; s < 2; ++s) {
      SCOPED_TRACE(std::string(grammar) + " prompt " + std::to_string(s));
      const auto prompt = test::random_prompt(7 + static_cast<int>(s) * 5, 3 + s, 1);
      GenerateOptions c = greedy(16);
      c.grammar = grammar;
      const auto plain = e->generate_tokens(prompt, c);
      const auto tree = e->generate_tokens(prompt, with_tree(c, 3, 9, 3));
      EXPECT_EQ(tree.tokens, plain.tokens);
      EXPECT_GT(tree.speculative.tree_steps, 0);
      GenerateOptions k = c;
      k.sampling.temperature = 0.9f;
      k.sampling.top_k = 20;
      k.sampling.seed = 40 + s;
      k.speculative.verify = VerifyMode::Coupled;
      const auto kplain = e->generate_tokens(prompt, k);
      const auto ktree = e->generate_tokens(prompt, with_tree(k, 3, 10, 4));
      EXPECT_EQ(ktree.tokens, kplain.tokens);
      EXPECT_GT(ktree.speculative.tree_steps, 0);
    }
  }
  const auto prompt = test::random_prompt(7, 3, 1);
  GenerateOptions g = with_tree(greedy(8), 3, 9, 3);
  g.speculative.tree_nodes = 65;
  EXPECT_THROW(e->generate_tokens(prompt, g), std::invalid_argument);
  g.speculative.tree_nodes = 9;
  g.speculative.tree_width = 0;
  EXPECT_THROW(e->generate_tokens(prompt, g), std::invalid_argument);
}

// A deterministic tree (prompt lookup's) under a grammar: a forbidden node goes with its
// subtree, the children of a node that ends the sentence go, the rest keep their shape, and
// each kept row's mask is the grammar's after that node's path. A sampled tree that would
// need a cut is a bug of its drafter and is refused.
TEST(TokenTrees, GrammarCutsADeterministicTreeNodeByNode) {
  auto vocab = std::make_shared<const TokenVocab>(std::vector<std::string>{"a", "b", "z", ".", " ", ""},
                                                  std::vector<bool>{true, true, true, true, true, false},
                                                  std::vector<int32_t>{5});
  auto tg = std::make_shared<const TokenGrammar>(Grammar::parse(R"G(root ::= [a-b ]+ ".")G"), vocab);
  SequenceGrammar sg(tg);
  Proposal p;
  // a, z (forbidden), b under z, "." under a (ends), a under ".", " " under a, "." under " ".
  p.tokens = {0, 2, 1, 3, 0, 4, 3};
  p.parents = {-1, -1, 1, 0, 3, 0, 5};
  Proposal sampled = p;
  sg.fit(p);
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{0, 3, 4, 3}));
  EXPECT_EQ(p.parents, (std::vector<int32_t>{-1, 0, 0, 2}));
  auto allows = [&](size_t row, int32_t t) { return mask_allows(*sg.step_mask(row), t); };
  EXPECT_TRUE(allows(0, 0));
  EXPECT_FALSE(allows(0, 2));
  EXPECT_TRUE(allows(1, 3)) << "after \"a\": the mark may end it";
  EXPECT_FALSE(allows(2, 0)) << "after \"a.\": nothing but the end";
  EXPECT_TRUE(allows(3, 1)) << "after \"a \": a letter";
  sampled.dists.assign(sampled.tokens.size() + 1, Distribution{});
  EXPECT_THROW(sg.fit(sampled), std::logic_error);
}

// A tree of width 3 and depth 4 grown from `context` with `row` as the draft's logits at
// every node, at most `nodes` nodes, sized by `cost` (empty: not): the proposal, and in
// *widths the nodes of each draft pass.
Proposal grow_tree(const std::vector<float>& row, const SamplingParams& sp, int32_t nodes,
                   const std::vector<double>& cost, Rng* rng = nullptr, std::vector<size_t>* widths = nullptr) {
  const std::vector<int32_t> context = {1, 2, 3};
  ProposeOptions po;
  po.max_tokens = 4;
  po.sampling = &sp;
  po.tree_width = 3;
  po.tree_nodes = nodes;
  po.tree_cost = cost;
  TreeBuilder b(context, po, rng);
  b.expand(-1, row);
  for (std::vector<int32_t> f = b.take_frontier(); !f.empty(); f = b.take_frontier()) {
    if (widths) widths->push_back(f.size());
    for (int32_t n : f) b.expand(n, row);
  }
  return b.take();
}

// A deterministic tree keeps the chain the draft would have drafted whole (its first
// children to full depth), even where siblings near the root are more probable than the
// chain's deep nodes; sizing by cost trims only the other nodes. So it commits at least what
// that chain would, and ShapeChoice's paired count of the chain is exact.
TEST(TokenTrees, DeterministicTreesKeepTheWholeChain) {
  std::vector<float> row(16, 0.0f);
  row[5] = 3.0f;  // the argmax (p 0.30), then two close seconds (0.27, 0.24)
  row[6] = 2.9f;
  row[7] = 2.8f;
  SamplingParams sp;
  sp.temperature = 0.0f;
  auto grow = [&](int32_t nodes, const std::vector<double>& cost) { return grow_tree(row, sp, nodes, cost); };
  // Depth of the path of first children drafting the argmax from the root.
  auto chain_depth = [](const Proposal& p) {
    int32_t depth = 0;
    for (int32_t node = -1;; ++depth) {
      const auto first = std::find(p.parents.begin(), p.parents.end(), node);
      if (first == p.parents.end() || p.tokens[static_cast<size_t>(first - p.parents.begin())] != 5) return depth;
      node = static_cast<int32_t>(first - p.parents.begin());
    }
  };
  // By path probability alone the six best nodes reach depth 2 (0.30, 0.27, 0.24, 0.09, ...;
  // the chain's third node has 0.027).
  const Proposal six = grow(6, {});
  EXPECT_EQ(six.tokens.size(), 6u);
  EXPECT_EQ(chain_depth(six), 4);
  std::vector<double> steep(13);
  for (size_t n = 0; n < steep.size(); ++n) steep[n] = 1.0 + 0.5 * static_cast<double>(n);
  const Proposal sized = grow(12, steep);
  EXPECT_EQ(chain_depth(sized), 4) << "sizing by cost cut into the chain";
  EXPECT_LT(sized.tokens.size(), 12u);
  std::vector<double> free_cost(13, 1.0);
  EXPECT_EQ(grow(12, free_cost).tokens.size(), 12u);
}

// Sized by cost, a deterministic tree feeds the draft only nodes whose children could be
// kept: with a confident draft and verification whose cost grows with every node, each draft
// pass takes the chain's one node (a chain's draft cost); where nodes cost nothing more,
// the whole width.
TEST(TokenTrees, AConfidentDraftFeedsOnlyItsChainWhereNodesCost) {
  std::vector<float> row(16, 0.0f);
  row[5] = 8.0f;  // p 0.995
  SamplingParams sp;
  sp.temperature = 0.0f;
  auto widths = [&](const std::vector<double>& cost) {
    std::vector<size_t> w;
    grow_tree(row, sp, 12, cost, nullptr, &w);
    return w;
  };
  std::vector<double> steep(13), free_cost(13, 1.0);
  for (size_t n = 0; n < steep.size(); ++n) steep[n] = 1.0 + 0.5 * static_cast<double>(n);
  EXPECT_EQ(widths(steep), (std::vector<size_t>{1, 1, 1}));
  EXPECT_EQ(widths(free_cost), (std::vector<size_t>{3, 3, 3}));
}

// A sampled tree sized by the cost model: children are drawn while the expected tokens per
// cost rise, decided from q before the draws. Verification that costs nothing more per node
// lets the tree spend its budget; verification whose cost grows with every node keeps a chain
// (or nothing) where q is flat, and grows siblings only where q is confident.
TEST(TokenTrees, SampledTreesAreSizedByTheCostModel) {
  std::vector<float> flat(16, 0.0f), peaked(16, 0.0f);
  peaked[5] = 4.0f;
  peaked[6] = 3.0f;
  SamplingParams sp;
  sp.temperature = 1.0f;
  auto grow = [&](const std::vector<float>& row, const std::vector<double>& cost) {
    Rng rng(9);
    return grow_tree(row, sp, 12, cost, &rng).tokens.size();
  };
  std::vector<double> free_cost(13, 1.0), steep(13);
  for (size_t n = 0; n < steep.size(); ++n) steep[n] = 1.0 + 0.5 * static_cast<double>(n);
  EXPECT_EQ(grow(flat, {}), 12u) << "without a cost model the budget is spent";
  EXPECT_EQ(grow(flat, free_cost), 12u) << "free nodes: the budget is spent";
  EXPECT_EQ(grow(flat, steep), 0u) << "a flat q over 16 tokens is not worth a node at that cost";
  const size_t confident = grow(peaked, steep);
  EXPECT_GE(confident, 1u);
  EXPECT_LT(confident, 12u);
}

}  // namespace
}  // namespace tandem
