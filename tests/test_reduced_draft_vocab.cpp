// The reduced draft vocabulary (FR-Spec: draft/vocab_ranking.hpp, engine/model/
// output_subset.hpp). Its logits are exactly the full head's columns for the kept tokens,
// on the CPU and on the CUDA backend (emulated); the draft never proposes a token outside
// it; greedy output stays the target's; the counts file is read strictly. The sampled
// outputs' distribution with a reduced draft vocabulary is tested in test_lossless.cpp
// (the draft_vocab_* configurations).
#include <gtest/gtest.h>

#include <fstream>

#include "draft/model_proposer.hpp"
#include "draft/vocab_ranking.hpp"
#include "engine/model/model.hpp"
#include "kernels/backend_factory.hpp"
#include "tandem/engine.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/prompts.hpp"
#include "tests/support/tiny_model.hpp"

namespace tandem {
namespace {

const test::TinyPair& pair() {
  static const test::TinyPair p = [] {
    test::TinyModelSpec t;
    t.seed = 33;
    t.tied_embeddings = false;
    return test::write_tiny_pair(test::scratch_dir("reduced-draft-vocab"), t);
  }();
  return p;
}

// Ids spread over the vocabulary, not a prefix: the copy must pick the right rows.
std::vector<int32_t> some_ids(int32_t n_vocab) {
  std::vector<int32_t> ids;
  for (int32_t i = 3; i < n_vocab; i += 7) ids.push_back(i);
  return ids;
}

// Counts files, in a folder of their own (scratch_dir starts a folder afresh).
const std::string& counts_dir() {
  static const std::string d = test::scratch_dir("reduced-draft-vocab-counts");
  return d;
}

std::vector<float> run_logits(Transformer& tf, const std::vector<int32_t>& prompt) {
  SequenceKV seq(tf.cache());
  Batch b;
  b.add_all_logits(seq, prompt);
  std::vector<float> logits;
  tf.forward(b, logits);
  return logits;
}

void expect_columns_of_full_head(kernels::Backend& be, const char* what) {
  auto model = Model::load(pair().close_draft, be);
  KVCacheOptions o;
  o.max_tokens = 64;
  KVCache cache(be, model->config(), o);
  Transformer tf(*model, cache);
  const std::vector<int32_t> prompt = test::random_prompt(9, 5, 3);
  const std::vector<float> full = run_logits(tf, prompt);
  const int32_t n_vocab = model->config().n_vocab;
  const std::vector<int32_t> ids = some_ids(n_vocab);
  tf.set_output_subset(make_output_subset(*model, ids));
  ASSERT_EQ(tf.n_logits(), static_cast<int32_t>(ids.size()));
  const std::vector<float> part = run_logits(tf, prompt);
  ASSERT_EQ(part.size(), prompt.size() * ids.size());
  // The same dot products over the same rows: the same floats.
  for (size_t r = 0; r < prompt.size(); ++r)
    for (size_t j = 0; j < ids.size(); ++j)
      ASSERT_EQ(part[r * ids.size() + j], full[r * static_cast<size_t>(n_vocab) + static_cast<size_t>(ids[j])])
          << what << ": row " << r << ", token " << ids[j];
  tf.set_output_subset(nullptr);
  EXPECT_EQ(run_logits(tf, prompt), full) << what << ": back to the whole vocabulary";
}

TEST(ReducedDraftVocab, LogitsAreTheFullHeadsColumnsOnTheCpu) {
  auto be = kernels::make_cpu_backend(1);
  expect_columns_of_full_head(*be, "cpu");
}

TEST(ReducedDraftVocab, LogitsAreTheFullHeadsColumnsOnEmulatedCuda) {
  auto be = kernels::make_emulated_cuda_backend();
  expect_columns_of_full_head(*be, "cuda-emulated");
}

TEST(ReducedDraftVocab, SubsetsAreCheckedAndNormalised) {
  auto be = kernels::make_cpu_backend(1);
  auto model = Model::load(pair().close_draft, *be);
  EXPECT_THROW(make_output_subset(*model, {}), std::invalid_argument);
  EXPECT_THROW(make_output_subset(*model, {1, model->config().n_vocab}), std::invalid_argument);
  EXPECT_THROW(make_output_subset(*model, {-1, 2}), std::invalid_argument);
  const auto s = make_output_subset(*model, {9, 2, 9, 5});
  EXPECT_EQ(s->ids, (std::vector<int32_t>{2, 5, 9}));
}

TEST(ReducedDraftVocab, TheDraftProposesOnlyKeptTokens) {
  auto be = kernels::make_cpu_backend(1);
  auto model = Model::load(pair().close_draft, *be);
  KVCacheOptions o;
  o.max_tokens = 256;
  KVCache cache(*be, model->config(), o);
  Transformer tf(*model, cache);
  const std::vector<int32_t> ids = some_ids(model->config().n_vocab);
  tf.set_output_subset(make_output_subset(*model, ids));
  ModelProposer p(tf);
  SamplingParams sp;
  sp.temperature = 1.5f;  // flat: without the subset, tokens outside it would come often
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  ProposeOptions po;
  po.max_tokens = 6;
  po.sampling = &sp;
  Rng rng(7);
  int proposed = 0;
  for (uint32_t s = 0; s < 20; ++s) {
    p.reset();
    const Proposal pr = p.propose(test::random_prompt(8, s, 3), po, rng);
    ASSERT_EQ(pr.dists.size(), pr.tokens.size());
    for (size_t i = 0; i < pr.tokens.size(); ++i) {
      EXPECT_TRUE(std::binary_search(ids.begin(), ids.end(), pr.tokens[i])) << pr.tokens[i];
      // q is a distribution over the kept tokens only.
      double mass = 0.0;
      for (size_t t = 0; t < pr.dists[i].size(); ++t) {
        EXPECT_TRUE(std::binary_search(ids.begin(), ids.end(), pr.dists[i].ids[t])) << pr.dists[i].ids[t];
        mass += pr.dists[i].probs[t];
      }
      EXPECT_NEAR(mass, 1.0, 1e-4);
      ++proposed;
    }
  }
  EXPECT_GT(proposed, 60);
}

std::unique_ptr<Engine> load(int32_t draft_vocab, const std::string& counts = "", const std::string& device = "cpu") {
  LoadOptions o;
  o.device = device;
  o.model_path = pair().target;
  o.draft_model_path = pair().close_draft;
  o.threads = 1;
  o.context = 128;
  o.draft_vocab = draft_vocab;
  o.draft_vocab_counts = counts;
  return Engine::load(o);
}

TEST(ReducedDraftVocab, GreedyOutputIsTheTargetsAtEverySize) {
  auto e = load(0);
  GenerateOptions g;
  g.max_tokens = 32;
  g.ignore_eos = true;
  g.sampling.temperature = 0.0f;
  g.speculative.mode = DraftMode::Model;
  g.speculative.draft_max = 4;
  GenerateOptions plain = g;
  plain.speculative.mode = DraftMode::None;
  const int32_t n_vocab = e->info().n_vocab;
  for (int32_t n : {0, 8, n_vocab / 4, n_vocab / 2, n_vocab - 1, n_vocab}) {
    e->set_draft_vocab(n);
    EXPECT_EQ(e->info().draft_vocab, n >= n_vocab ? 0 : n);
    int64_t drafted = 0, accepted = 0;
    for (uint32_t s = 0; s < 4; ++s) {
      const auto prompt = test::random_prompt(6, s, 3);
      const auto want = e->generate_tokens(prompt, plain);
      const auto got = e->generate_tokens(prompt, g);
      EXPECT_EQ(got.tokens, want.tokens) << "draft vocabulary " << n << ", prompt " << s;
      drafted += got.speculative.drafted_tokens;
      accepted += got.speculative.accepted_tokens;
    }
    EXPECT_GT(drafted, 0) << n;
    if (n == 0) {
      EXPECT_GT(accepted, 0);
    }
  }
  EXPECT_THROW(e->set_draft_vocab(-1), std::invalid_argument);
}

// On the CUDA backend a reduced vocabulary's logits are spread over the whole one on the
// device (scatter_cols) and the draft samples there: coupled output, drafted or not, is the
// same text for a seed (so the device's q over the subset is a proper distribution that the
// verifier takes), and greedy output is the target's.
TEST(ReducedDraftVocab, OnEmulatedCudaTheDraftSamplesOnTheDeviceAndOutputIsUnchanged) {
  auto e = load(0, "", "cuda-emulated");
  const int32_t n_vocab = e->info().n_vocab;
  e->set_draft_vocab(n_vocab / 2);
  GenerateOptions g;
  g.max_tokens = 24;
  g.ignore_eos = true;
  g.sampling.temperature = 0.9f;
  g.sampling.top_k = 8;
  g.speculative.mode = DraftMode::Model;
  g.speculative.draft_max = 3;
  g.speculative.verify = VerifyMode::Coupled;
  int64_t drafted = 0, accepted = 0, on_device = 0;
  for (uint32_t s = 0; s < 3; ++s) {
    const auto prompt = test::random_prompt(6, 40 + s, 3);
    for (float t : {0.0f, 0.9f}) {
      g.sampling.temperature = t;
      g.sampling.seed = 100 + s;
      GenerateOptions plain = g;
      plain.speculative.mode = DraftMode::None;
      const auto want = e->generate_tokens(prompt, plain);
      const auto got = e->generate_tokens(prompt, g);
      EXPECT_EQ(got.tokens, want.tokens) << "prompt " << s << " temperature " << t;
      EXPECT_EQ(got.speculative.device_verified_steps, got.speculative.target_passes);
      drafted += got.speculative.drafted_tokens;
      accepted += got.speculative.accepted_tokens;
      // (prompt lookup's drafts, point masses, are the host's)
      on_device += got.speculative.device_drafted_tokens + got.speculative.lookup_drafted_tokens;
    }
  }
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted);
  EXPECT_EQ(on_device, drafted) << "drafts drawn on the host";
}

TEST(ReducedDraftVocab, NeedsADraftModel) {
  LoadOptions o;
  o.model_path = pair().target;
  o.threads = 1;
  o.context = 64;
  o.draft_vocab = 16;
  EXPECT_THROW(Engine::load(o), std::invalid_argument);
  o.draft_vocab = 0;
  auto e = Engine::load(o);
  EXPECT_THROW(e->set_draft_vocab(16), std::invalid_argument);
}

TEST(ReducedDraftVocab, CountsRankTokensTiesByIdAndRoundTrip) {
  TokenCounts c(10);
  c.add(std::vector<int32_t>{7, 7, 7, 2, 2, 9, 4, 4});
  EXPECT_EQ(c.total(), 8u);
  EXPECT_THROW(c.add(std::vector<int32_t>{10}), std::invalid_argument);
  EXPECT_EQ(rank_tokens(c), (std::vector<int32_t>{7, 2, 4, 9, 0, 1, 3, 5, 6, 8}));
  EXPECT_EQ(draft_vocab_ids(rank_tokens(c), 3, std::vector<int32_t>{8, 2}), (std::vector<int32_t>{2, 4, 7, 8}));
  EXPECT_EQ(draft_vocab_ids(rank_by_id(5), 9, {}), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  const std::string path = counts_dir() + "/counts.txt";
  save_token_counts(path, c);
  const TokenCounts back = load_token_counts(path, 10);
  EXPECT_EQ(back.counts, c.counts);
  EXPECT_THROW(load_token_counts(path, 11), std::runtime_error);  // another vocabulary
}

TEST(ReducedDraftVocab, BadCountsFilesAreClearErrors) {
  const std::string& dir = counts_dir();
  auto expect_error = [&](const std::string& body, const std::string& says) {
    const std::string path = dir + "/bad.txt";
    std::ofstream(path, std::ios::binary) << body;
    try {
      load_token_counts(path, 0);
      ADD_FAILURE() << "accepted: " << body;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  expect_error("", "empty");
  expect_error("hello\n", "not a token counts file");
  expect_error("tandem-token-counts 1 0\n", "not a token counts file");
  expect_error("tandem-token-counts 1 10\n3 4\nabc\n", ":3: expected");
  expect_error("tandem-token-counts 1 10\n3 4\n12 1\n", ":3: token id 12 outside");
  expect_error("tandem-token-counts 1 10\n3 4\n3 1\n", "listed twice");
  expect_error("tandem-token-counts 1 10\n3 -4\n", ":2: expected");
  EXPECT_THROW(load_token_counts(dir + "/no-such-file.txt"), std::runtime_error);
  // Through the engine: a counts file for another vocabulary fails the load, naming it.
  const std::string other = dir + "/other.txt";
  std::ofstream(other, std::ios::binary) << "tandem-token-counts 1 7\n1 1\n";
  try {
    load(16, other);
    ADD_FAILURE() << "loaded counts of another vocabulary";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("vocabulary of 7 tokens"), std::string::npos) << e.what();
  }
}

TEST(ReducedDraftVocab, TheRankingFromCountsIsUsed) {
  // Counts that favour the highest ids: the draft then keeps those, and greedy output is
  // still the target's.
  auto e0 = load(0);
  const int32_t n_vocab = e0->info().n_vocab;
  TokenCounts c(n_vocab);
  for (int32_t id = n_vocab - 40; id < n_vocab; ++id) c.add(std::vector<int32_t>{id});
  const std::string path = counts_dir() + "/high.txt";
  save_token_counts(path, c);
  auto e = load(40, path);
  EXPECT_EQ(e->info().draft_vocab, 40);
  EXPECT_EQ(e->info().draft_vocab_ranking, path);
  GenerateOptions g;
  g.max_tokens = 24;
  g.ignore_eos = true;
  g.sampling.temperature = 0.0f;
  g.speculative.mode = DraftMode::Model;
  GenerateOptions plain = g;
  plain.speculative.mode = DraftMode::None;
  const auto prompt = test::random_prompt(6, 1, 3);
  EXPECT_EQ(e->generate_tokens(prompt, g).tokens, e->generate_tokens(prompt, plain).tokens);
}

}  // namespace
}  // namespace tandem
