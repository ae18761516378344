// ModelProposer's batched passes under memory pressure and in chunks: each lane of a draft
// pass gets its cache blocks or not on its own (one sequence out of draft memory does not
// stop the others from drafting), and a prefill read in chunks, batched with other
// sequences, leaves the draft exactly where a one-go prefill does.
#include <gtest/gtest.h>

#include "draft/model_proposer.hpp"
#include "engine/model/model.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/prompts.hpp"
#include "tests/support/tiny_model.hpp"

namespace tandem {
namespace {

const std::string& draft_path() {
  static const std::string p = [] {
    test::TinyModelSpec t;
    t.seed = 21;
    return test::write_tiny_pair(test::scratch_dir("model-proposer"), t).close_draft;
  }();
  return p;
}

std::vector<int32_t> prompt_of(int n, uint32_t seed) {
  return test::random_prompt(n, seed, 3);
}

// The draft model on a cache of `num_blocks` blocks of 4 token slots.
struct Draft {
  std::unique_ptr<kernels::Backend> be = kernels::make_cpu_backend(1);
  std::unique_ptr<Model> model;
  std::unique_ptr<KVCache> cache;
  std::unique_ptr<Transformer> tf;
  explicit Draft(int32_t num_blocks) {
    model = Model::load(draft_path(), *be);
    KVCacheOptions o;
    o.block_size = 4;
    o.num_blocks = num_blocks;
    cache = std::make_unique<KVCache>(*be, model->config(), o);
    tf = std::make_unique<Transformer>(*model, *cache);
  }
};

SamplingParams greedy_sampling() {
  SamplingParams sp;
  sp.temperature = 0.0f;
  return sp;
}

ProposeOptions k_of(int32_t k, const SamplingParams& sp) {
  ProposeOptions o;
  o.max_tokens = k;
  o.sampling = &sp;
  return o;
}

TEST(ModelProposer, OneLaneOutOfMemoryDoesNotStopTheOthers) {
  const SamplingParams sp = greedy_sampling();
  const auto small = prompt_of(6, 1), big = prompt_of(40, 2);
  Rng rng(1);
  Proposal want;
  {
    Draft roomy(64);
    ModelProposer p(*roomy.tf);
    want = p.propose(small, k_of(3, sp), rng);
  }
  ASSERT_EQ(want.tokens.size(), 3u);
  // 8 blocks of 4: the small lane needs 2 (6 context + 2 drafted positions), the big one 11.
  Draft tight(8);
  for (bool big_first : {true, false}) {
    ModelProposer a(*tight.tf), b(*tight.tf);
    Rng ra(1), rb(1);
    std::vector<ProposeJob> jobs;
    ProposeJob js{&a, small, k_of(3, sp), &ra, {}};
    ProposeJob jb{&b, big, k_of(3, sp), &rb, {}};
    if (big_first) jobs = {jb, js};
    else jobs = {js, jb};
    propose_all(jobs);
    const ProposeJob& got_small = jobs[big_first ? 1 : 0];
    const ProposeJob& got_big = jobs[big_first ? 0 : 1];
    EXPECT_EQ(got_small.out.tokens, want.tokens) << "big lane first: " << big_first;
    EXPECT_FALSE(got_small.kv_full);
    EXPECT_TRUE(got_big.out.tokens.empty());
    EXPECT_TRUE(got_big.kv_full);  // what the scheduler counts (tandem_draft_kv_full_total)
  }
}

// A lane that runs short while drafting keeps the tokens it drafted; the others go on.
TEST(ModelProposer, ALaneShortOfMemoryMidDraftKeepsWhatItDrafted) {
  const SamplingParams sp = greedy_sampling();
  const auto ctx_a = prompt_of(9, 3), ctx_b = prompt_of(8, 4);
  Rng rng(1);
  Proposal want_a, want_b;
  {
    Draft roomy(64);
    ModelProposer p(*roomy.tf);
    want_a = p.propose(ctx_a, k_of(4, sp), rng);
    p.reset();
    want_b = p.propose(ctx_b, k_of(4, sp), rng);
  }
  ASSERT_EQ(want_a.tokens.size(), 4u);
  ASSERT_EQ(want_b.tokens.size(), 4u);
  // 5 blocks of 4. Lane a: 9 context positions (3 blocks) and its 3 fed drafts fit in the
  // third. Lane b: 8 positions (2 full blocks); its first fed draft needs a block there is not.
  Draft tight(5);
  ModelProposer a(*tight.tf), b(*tight.tf);
  Rng ra(1), rb(1);
  std::vector<ProposeJob> jobs = {{&a, ctx_a, k_of(4, sp), &ra, {}}, {&b, ctx_b, k_of(4, sp), &rb, {}}};
  propose_all(jobs);
  EXPECT_EQ(jobs[0].out.tokens, want_a.tokens);
  EXPECT_FALSE(jobs[0].kv_full);
  EXPECT_TRUE(jobs[1].kv_full);
  // Its first token came from its context's logits; the next ones needed the block.
  EXPECT_EQ(jobs[1].out.tokens, std::vector<int32_t>{want_b.tokens[0]});
}

// The prefill in chunks, several sequences per pass (the scheduler), leaves each draft
// where a one-go prefill (the single-request path) does: the same drafts follow. Until it
// is complete the draft reports what it has still to read.
TEST(ModelProposer, ChunkedBatchedPrefillMatchesAOneGoPrefill) {
  const SamplingParams sp = greedy_sampling();
  std::vector<int32_t> ctx_a = prompt_of(37, 5), ctx_b = prompt_of(23, 6);
  Draft d(64);
  Rng rng(1);
  ModelProposer one(*d.tf);
  EXPECT_EQ(one.prefill_pending(ctx_a), ctx_a.size() - 1);
  one.prefill(ctx_a);
  EXPECT_EQ(one.prefill_pending(ctx_a), 0u);
  const Proposal want_a = one.propose(ctx_a, k_of(4, sp), rng);
  one.reset();
  EXPECT_EQ(one.prefill_pending(ctx_b), ctx_b.size() - 1);
  one.prefill(ctx_b);
  const Proposal want_b = one.propose(ctx_b, k_of(4, sp), rng);
  one.reset();

  ModelProposer a(*d.tf), b(*d.tf);
  int passes = 0;
  while (a.prefill_pending(ctx_a) > 0 || b.prefill_pending(ctx_b) > 0) {
    std::vector<DraftPrefillJob> jobs;
    if (a.prefill_pending(ctx_a) > 0) jobs.push_back({&a, ctx_a, 5});
    if (b.prefill_pending(ctx_b) > 0) jobs.push_back({&b, ctx_b, 7});
    const size_t before = a.prefill_pending(ctx_a) + b.prefill_pending(ctx_b);
    prefill_all(jobs);
    for (const auto& j : jobs) {
      EXPECT_FALSE(j.kv_full);
      EXPECT_LE(j.fed, j.max_tokens);
    }
    EXPECT_LT(a.prefill_pending(ctx_a) + b.prefill_pending(ctx_b), before);
    ASSERT_LT(++passes, 20);
  }
  EXPECT_EQ(passes, 8);  // ceil(36 / 5) passes for a (b's 22 tokens take 4 of them)
  EXPECT_EQ(a.forward_passes(), 0);  // the prefill is not drafting (cost metrics exclude it)
  Rng ra(1), rb(1);
  std::vector<ProposeJob> jobs = {{&a, ctx_a, k_of(4, sp), &ra, {}}, {&b, ctx_b, k_of(4, sp), &rb, {}}};
  propose_all(jobs);
  EXPECT_EQ(jobs[0].out.tokens, want_a.tokens);
  EXPECT_EQ(jobs[1].out.tokens, want_b.tokens);
  // Read once: a longer context later is fed by the drafting pass itself, not a prefill.
  ctx_a.push_back(7);
  ctx_a.push_back(9);
  EXPECT_EQ(a.prefill_pending(ctx_a), 0u);
}

// A prefill lane without room feeds nothing and says so; the others are fed.
TEST(ModelProposer, PrefillLaneOutOfMemoryDoesNotStopTheOthers) {
  Draft d(6);
  ModelProposer a(*d.tf), b(*d.tf);
  const auto ctx_a = prompt_of(40, 7), ctx_b = prompt_of(12, 8);
  std::vector<DraftPrefillJob> jobs = {{&a, ctx_a, 30}, {&b, ctx_b, 30}};
  prefill_all(jobs);
  EXPECT_TRUE(jobs[0].kv_full);
  EXPECT_EQ(jobs[0].fed, 0u);
  EXPECT_FALSE(jobs[1].kv_full);
  EXPECT_EQ(jobs[1].fed, 11u);
  EXPECT_EQ(b.prefill_pending(ctx_b), 0u);
  EXPECT_EQ(a.prefill_pending(ctx_a), 39u);
}

}  // namespace
}  // namespace tandem
