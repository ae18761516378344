// Decode passes replayed from CUDA graphs (engine/model/transformer_graphs.cpp) on the tiny
// fixture models under the SIMT emulator: the logits of a graphed pass are the bits of the
// same pass run op by op, over many steps whose shapes change (sequences joining and
// leaving, so the batch bucket changes; positions crossing block boundaries; the block
// table widening); padding lanes store no K/V; graphs are reused, bounded
// and dropped when memory they hold moves; greedy speculation with a graphed draft model
// gives the target's tokens.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <span>

#include "tests/support/cuda_under_test.hpp"
#include "draft/model_proposer.hpp"
#include "engine/kv/kv_cache.hpp"
#include "engine/model/model.hpp"
#include "engine/model/output_subset.hpp"
#include "engine/model/transformer.hpp"
#include "engine/runtime/sequence_run.hpp"
#include "engine/text/tokenizer.hpp"
#include "kernels/backend_factory.hpp"
#include "policies/policy.hpp"
#include "tests/support/drive.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/tiny_model.hpp"

namespace tandem {
namespace {

std::unique_ptr<kernels::Backend> cuda_under_test() { return test::cuda_under_test(size_t{128} << 20); }

using Case = test::CudaModelCase;

std::vector<Case> cases() { return test::cuda_model_cases(); }

std::string model_path(const std::string& name, const test::TinyModelSpec& spec) {
  const std::string path = test::scratch_dir("cuda-graph-forward-" + name) + "/m.gguf";
  test::write_tiny_model(path, spec);
  return path;
}

// One model on its own backend, decode graphs on or off.
struct ModelRun {
  std::unique_ptr<kernels::Backend> be;
  std::unique_ptr<Model> model;
  std::unique_ptr<KVCache> cache;
  std::unique_ptr<Transformer> tf;
  ModelRun(const std::string& path, bool graphs, int64_t max_tokens = 512) : be(cuda_under_test()) {
    model = Model::load(path, *be);
    KVCacheOptions o;
    o.block_size = 4;
    o.max_tokens = max_tokens;
    cache = std::make_unique<KVCache>(*be, model->config(), o);
    tf = std::make_unique<Transformer>(*model, *cache);
    tf->set_graphs(graphs);
  }
  ~ModelRun() {
    tf.reset();
    cache.reset();
    model.reset();
  }
};

int32_t token_of(int lane, int i) { return (i * 37 + lane * 101 + 5) % 300; }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The schedule both runs follow: at step s, lanes join (their prompt prefilled in a pass of
// its own) or leave, then every live lane decodes one token. Lane 3 joins with a prompt of
// 70 tokens: a pass large enough to re-allocate the model's scratch (and to take the
// backend's GEMM path), which must drop the graphs captured before.
struct Event {
  int step;
  int lane;
  int prompt;  // > 0: joins with this many prompt tokens; 0: leaves
};
const Event kSchedule[] = {{0, 0, 3}, {0, 1, 6}, {4, 2, 2},  {8, 3, 70}, {8, 4, 5},  {11, 1, 0},
                           {13, 5, 9}, {13, 6, 1}, {16, 7, 4}, {19, 0, 0}, {22, 2, 0}, {22, 3, 0}};
constexpr int kSteps = 28;

// Runs the schedule; returns the logits of every pass, in order.
std::vector<std::vector<float>> run_schedule(ModelRun& r) {
  std::map<int, std::unique_ptr<SequenceKV>> live;
  std::map<int, int> fed;  // tokens each lane has read
  std::vector<std::vector<float>> out;
  std::vector<float> l;
  for (int step = 0; step < kSteps; ++step) {
    for (const Event& e : kSchedule) {
      if (e.step != step) continue;
      if (e.prompt == 0) {
        live.erase(e.lane);
        continue;
      }
      auto seq = std::make_unique<SequenceKV>(*r.cache);
      std::vector<int32_t> prompt;
      for (int i = 0; i < e.prompt; ++i) prompt.push_back(token_of(e.lane, i));
      Batch b;
      b.add(*seq, prompt);
      r.tf->forward(b, l);
      out.push_back(l);
      fed[e.lane] = e.prompt;
      live[e.lane] = std::move(seq);
    }
    Batch b;
    for (auto& [lane, seq] : live) {
      const int32_t t = token_of(lane, fed[lane]++);
      // Every fifth step the second lane wants no logits: the output rows are not the lanes.
      const bool want = !(step % 5 == 2 && live.size() > 1 && lane == std::next(live.begin())->first);
      b.add(*seq, std::span<const int32_t>(&t, 1), {want});
    }
    r.tf->forward(b, l);
    out.push_back(l);
  }
  return out;
}

TEST(CudaGraphForward, DecodeGraphsGiveTheDirectLogitsBitForBit) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const std::string path = model_path(c.name, c.spec);
    ModelRun direct(path, false), graphed(path, true);
    ASSERT_TRUE(graphed.tf->graphs_on());
    const auto want = run_schedule(direct);
    const auto got = run_schedule(graphed);
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_TRUE(same_bits(want[i], got[i])) << "pass " << i;
    const GraphStats& s = graphed.tf->graph_stats();
    EXPECT_EQ(direct.tf->graph_stats().captures, 0);
    // Buckets met: 1 (lane 6 joins with one token), 2, 3, 4, 6 and 8 lanes; widths 1 to 32 blocks
    // (lane 3: 70 + 14 positions).
    EXPECT_GE(s.captures, 6);
    EXPECT_GE(s.replays, kSteps / 2) << "graphs must be reused";
    EXPECT_GE(s.invalidations, 1) << "lane 3's prompt re-allocates the scratch";
    EXPECT_LE(s.live, static_cast<int32_t>(Transformer::kDefaultMaxGraphs));
  }
}

// Verification passes (every token wants its logits, 1 to 5 tokens per sequence, 2 or 3
// sequences: 4 to 13 tokens, buckets 4 to 16) replayed from graphs give the bits of the same
// passes run op by op, and share the buckets of decode passes.
TEST(CudaGraphForward, VerificationGraphsGiveTheDirectLogitsBitForBit) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const std::string path = model_path(c.name, c.spec);
    ModelRun direct(path, false), graphed(path, true);
    auto run = [&](ModelRun& r) {
      std::vector<std::vector<float>> out;
      std::vector<std::unique_ptr<SequenceKV>> seqs;
      std::vector<int> fed;
      std::vector<float> l;
      for (int lane = 0; lane < 3; ++lane) {
        seqs.push_back(std::make_unique<SequenceKV>(*r.cache));
        std::vector<int32_t> prompt;
        for (int i = 0; i < 5 + 3 * lane; ++i) prompt.push_back(token_of(lane, i));
        Batch b;
        b.add(*seqs.back(), prompt);
        r.tf->forward(b, l);
        fed.push_back(static_cast<int>(prompt.size()));
      }
      for (int step = 0; step < 8; ++step) {
        Batch b;
        for (int lane = 0; lane < (step % 4 == 3 ? 2 : 3); ++lane) {
          std::vector<int32_t> t;
          for (int i = 0; i < 1 + (step + 2 * lane) % 5; ++i) t.push_back(token_of(lane, fed[size_t(lane)]++));
          b.add_all_logits(*seqs[size_t(lane)], t);
        }
        r.tf->forward(b, l);
        out.push_back(l);
      }
      return out;
    };
    const auto want = run(direct), got = run(graphed);
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_TRUE(same_bits(want[i], got[i])) << "pass " << i;
    const GraphStats& s = graphed.tf->graph_stats();
    EXPECT_GE(s.captures, 3);
    EXPECT_GE(s.replays, 8 - s.captures) << "every verification pass goes through a graph";
  }
}

// Bucket 6 for 5 sequences: the padding lane stores no K/V (kernels::kNoKvSlot; several
// padding lanes would all write one row); every slot that changes belongs to a real lane's
// new token. Checked for the pass run directly (a bucket's first use) and for the replay.
TEST(CudaGraphForward, PaddingLanesStoreNothing) {
  test::TinyModelSpec spec;
  ModelRun r(model_path("pad", spec), true, 256);
  std::vector<std::unique_ptr<SequenceKV>> seqs;
  std::vector<float> l;
  for (int lane = 0; lane < 5; ++lane) {
    seqs.push_back(std::make_unique<SequenceKV>(*r.cache));
    std::vector<int32_t> prompt;
    for (int i = 0; i < 2 + lane; ++i) prompt.push_back(token_of(lane, i));  // both passes: 2 blocks
    Batch b;
    b.add(*seqs.back(), prompt);
    r.tf->forward(b, l);
  }
  const kernels::Tensor& k = r.cache->layer(0).k;
  const size_t row = k.row_stride(), n_rows = static_cast<size_t>(k.rows());
  auto snapshot = [&] {
    r.be->synchronize();
    std::vector<uint8_t> v(row * n_rows);
    r.be->download(v.data(), k, v.size());
    return v;
  };
  const int32_t bs = r.cache->block_size();
  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE(pass == 0 ? "captured (run directly)" : "replayed");
    std::set<int32_t> real_slots, held_blocks;
    Batch b;
    for (int lane = 0; lane < 5; ++lane) {
      SequenceKV& s = *seqs[static_cast<size_t>(lane)];
      s.reserve(s.length() + 1);
      real_slots.insert(s.slot(s.length()));
      const int32_t t = token_of(lane, s.length());
      b.add(s, std::span<const int32_t>(&t, 1));
    }
    for (const auto& s : seqs) held_blocks.insert(s->block_table().begin(), s->block_table().end());
    const int64_t replays = r.tf->graph_stats().replays, captures = r.tf->graph_stats().captures;
    const auto before = snapshot();
    r.tf->forward(b, l);
    const auto after = snapshot();
    EXPECT_EQ(r.tf->graph_stats().replays, replays + pass);
    EXPECT_EQ(r.tf->graph_stats().captures, captures + 1 - pass);
    for (size_t slot = 0; slot < n_rows; ++slot) {
      if (std::memcmp(before.data() + slot * row, after.data() + slot * row, row) == 0) continue;
      const int32_t s32 = static_cast<int32_t>(slot);
      EXPECT_TRUE(real_slots.count(s32))
          << "slot " << slot << (held_blocks.count(s32 / bs) ? " of a sequence's block" : " of a free block")
          << " was written, not a real lane's";
    }
    for (int32_t s : real_slots)
      EXPECT_NE(std::memcmp(before.data() + s * row, after.data() + s * row, row), 0) << "real slot " << s;
  }
}

// The pad block is a free block taken for one pass: between passes the cache holds exactly
// what it holds without graphs, and a padded pass with no free block runs directly. A cache
// of six blocks of 4: five sequences decode positions 0..2 in bucket 6 (the sixth block,
// free, is the pad block); lane 0 alone reaches position 4 and takes the last free block;
// then all five again (no new blocks needed, none free for padding).
TEST(CudaGraphForward, ThePadBlockIsTakenForOnePassOnly) {
  test::TinyModelSpec spec;
  const std::string path = model_path("tight", spec);
  const std::vector<std::vector<int>> steps = {{0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}, {0}, {0}, {0, 1, 2, 3, 4}};
  auto run = [&](bool graphs, GraphStats* stats, std::vector<int32_t>* free_after) {
    auto be = cuda_under_test();
    auto model = Model::load(path, *be);
    KVCacheOptions o;
    o.block_size = 4;
    o.num_blocks = 6;
    KVCache cache(*be, model->config(), o);
    Transformer tf(*model, cache);
    tf.set_graphs(graphs);
    std::vector<std::unique_ptr<SequenceKV>> seqs;
    for (int i = 0; i < 5; ++i) seqs.push_back(std::make_unique<SequenceKV>(cache));
    std::vector<std::vector<float>> out;
    std::vector<float> l;
    for (size_t step = 0; step < steps.size(); ++step) {
      Batch b;
      std::vector<int32_t> toks;
      for (int lane : steps[step]) toks.push_back(token_of(lane, seqs[static_cast<size_t>(lane)]->length()));
      for (size_t i = 0; i < toks.size(); ++i)
        b.add(*seqs[static_cast<size_t>(steps[step][i])], std::span<const int32_t>(&toks[i], 1));
      tf.forward(b, l);
      out.push_back(l);
      free_after->push_back(cache.blocks().num_free());
    }
    *stats = tf.graph_stats();
    seqs.clear();
    EXPECT_EQ(cache.blocks().num_free(), 6) << "every block back";
    return out;
  };
  GraphStats on{}, off{};
  std::vector<int32_t> free_on, free_off;
  const auto want = run(false, &off, &free_off);
  const auto got = run(true, &on, &free_on);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(same_bits(want[i], got[i])) << "pass " << i;
  EXPECT_EQ(free_on, free_off) << "graphs hold no block between passes";
  EXPECT_EQ(free_off, (std::vector<int32_t>{1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(on.captures, 3) << "(6 lanes, 1 block), (1, 1), (1, 2); the last pass runs directly";
  EXPECT_EQ(on.replays, 2);
}

// The same bucket again and again: one capture, then replays. Five buckets in turn with
// room for three: evictions, never more than three held, the logits still the direct ones.
// A new output head drops every graph.
TEST(CudaGraphForward, GraphsAreReusedBoundedAndDroppedWhenTheHeadChanges) {
  test::TinyModelSpec spec;
  spec.arch = "qwen2";
  spec.weight_type = DType::Q8_0;
  const std::string path = model_path("reuse", spec);
  ModelRun direct(path, false), graphed(path, true);
  graphed.tf->set_graphs(true, 3);
  std::vector<std::unique_ptr<SequenceKV>> sd, sg;
  for (int lane = 0; lane < 5; ++lane) {
    sd.push_back(std::make_unique<SequenceKV>(*direct.cache));
    sg.push_back(std::make_unique<SequenceKV>(*graphed.cache));
  }
  // Prompts of 17 tokens: the first ten single-lane steps (positions 17..26) stay in one
  // table-width bucket (5..7 blocks of 4: 8).
  std::vector<int> fed(5, 17);
  std::vector<float> ld, lg;
  for (int lane = 0; lane < 5; ++lane) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < 17; ++i) prompt.push_back(token_of(lane, i));
    Batch bd, bg;
    bd.add(*sd[static_cast<size_t>(lane)], prompt);
    bg.add(*sg[static_cast<size_t>(lane)], prompt);
    direct.tf->forward(bd, ld);
    graphed.tf->forward(bg, lg);
  }
  auto step = [&](int n_lanes) {
    Batch bd, bg;
    std::vector<int32_t> toks;
    for (int lane = 0; lane < n_lanes; ++lane) toks.push_back(token_of(lane, fed[static_cast<size_t>(lane)]++));
    for (int lane = 0; lane < n_lanes; ++lane) {
      bd.add(*sd[static_cast<size_t>(lane)], std::span<const int32_t>(&toks[static_cast<size_t>(lane)], 1));
      bg.add(*sg[static_cast<size_t>(lane)], std::span<const int32_t>(&toks[static_cast<size_t>(lane)], 1));
    }
    direct.tf->forward(bd, ld);
    graphed.tf->forward(bg, lg);
    return same_bits(ld, lg);
  };
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(step(1)) << "step " << i;
  EXPECT_EQ(graphed.tf->graph_stats().captures, 1);
  EXPECT_EQ(graphed.tf->graph_stats().replays, 9);
  for (int round = 0; round < 2; ++round)
    for (int n : {1, 2, 3, 4, 5}) ASSERT_TRUE(step(n)) << "lanes " << n;
  const GraphStats& s = graphed.tf->graph_stats();
  EXPECT_GT(s.evictions, 0);
  EXPECT_LE(s.live, 3);

  const std::vector<int32_t> ids{1, 5, 9, 200, 201, 299};
  direct.tf->set_output_subset(make_output_subset(*direct.model, ids));
  graphed.tf->set_output_subset(make_output_subset(*graphed.model, ids));
  EXPECT_EQ(graphed.tf->graph_stats().live, 0);
  const int64_t invalidations = graphed.tf->graph_stats().invalidations;
  EXPECT_GE(invalidations, 1);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(step(2)) << "with the subset head, step " << i;
  EXPECT_EQ(ld.size(), 2u * 6u);
  EXPECT_EQ(graphed.tf->graph_stats().live, 1);

  // Passes that are not pure decode (two tokens of one sequence) run directly.
  const int64_t captures = graphed.tf->graph_stats().captures, replays = graphed.tf->graph_stats().replays;
  Batch b;
  const int32_t two[2] = {3, 4};
  b.add(*sg[0], two);
  graphed.tf->forward(b, lg);
  EXPECT_EQ(graphed.tf->graph_stats().captures, captures);
  EXPECT_EQ(graphed.tf->graph_stats().replays, replays);
}

// A graph holds addresses: of the model's own scratch (re-allocated when a pass needs a
// wider block table than it has room for) and of the backend's scratch (grown by another
// model's larger pass on the same backend: draft and target share one). Either must make
// the next pass capture anew; the logits stay the direct ones throughout.
TEST(CudaGraphForward, GraphsAreDroppedWhenMemoryTheyHoldMoves) {
  test::TinyModelSpec spec;  // F32 weights: no quantized activations in the backend's scratch
  const std::string path = model_path("moves", spec);
  auto be = cuda_under_test();
  kernels::GraphCapture* gc = kernels::graph_capture(*be);
  auto model = Model::load(path, *be);
  KVCacheOptions o;
  o.block_size = 4;
  o.max_tokens = 256;
  KVCache cache(*be, model->config(), o), other_cache(*be, model->config(), o);
  Transformer tf(*model, cache), other(*model, other_cache);
  tf.set_graphs(true);
  ModelRun direct(path, false, 256);

  SequenceKV a(cache), b(cache), c(cache), da(*direct.cache), db(*direct.cache), dc(*direct.cache);
  std::vector<float> l, want;
  auto both = [&](std::vector<std::pair<SequenceKV*, SequenceKV*>> seqs, std::vector<int32_t> toks) {
    Batch bg, bd;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (toks.size() == seqs.size()) {
        bg.add(*seqs[i].first, std::span<const int32_t>(&toks[i], 1));
        bd.add(*seqs[i].second, std::span<const int32_t>(&toks[i], 1));
      } else {
        bg.add(*seqs[i].first, toks);
        bd.add(*seqs[i].second, toks);
      }
    }
    tf.forward(bg, l);
    direct.tf->forward(bd, want);
    return same_bits(l, want);
  };
  std::vector<int32_t> long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt.push_back(token_of(9, i));
  ASSERT_TRUE(both({{&a, &da}}, long_prompt));  // sizes the backend's attention scratch for 40 tokens
  ASSERT_TRUE(both({{&b, &db}}, {7}));   // b, position 0: captures bucket (1 lane, 1 block)
  ASSERT_TRUE(both({{&b, &db}}, {10}));  // replays it
  const GraphStats s0 = tf.graph_stats();
  EXPECT_EQ(s0.captures, 1);
  EXPECT_EQ(s0.replays, 1);
  const uint64_t epoch = gc->capture_epoch();
  // a (11 blocks) and c decode together: a 16-block table, wider than the scratch's.
  ASSERT_TRUE(both({{&a, &da}, {&c, &dc}}, {12, 13}));
  EXPECT_EQ(gc->capture_epoch(), epoch) << "the test means to move the model's scratch only";
  ASSERT_TRUE(both({{&b, &db}}, {14}));  // b alone, position 2: the same bucket, its graph stale
  const GraphStats s1 = tf.graph_stats();
  EXPECT_EQ(s1.replays, s0.replays);
  EXPECT_EQ(s1.captures, s0.captures + 2);
  EXPECT_EQ(s1.invalidations, s0.invalidations + 1);
  ASSERT_TRUE(both({{&b, &db}}, {15}));  // position 3: replayed
  const GraphStats s2 = tf.graph_stats();
  EXPECT_EQ(s2.replays, s1.replays + 1);

  // Another model on the same backend runs a larger pass: the backend's scratch grows.
  SequenceKV big(other_cache);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 60; ++i) prompt.push_back(token_of(3, i));
  Batch bb;
  bb.add(big, prompt);
  other.forward(bb, l);
  EXPECT_NE(gc->capture_epoch(), epoch);
  ASSERT_TRUE(both({{&c, &dc}}, {17}));  // c alone, position 1: the same bucket, its graph holds the old scratch
  const GraphStats s3 = tf.graph_stats();
  EXPECT_EQ(s3.replays, s2.replays);
  EXPECT_EQ(s3.captures, s2.captures + 1);
  EXPECT_EQ(s3.invalidations, s2.invalidations + 1);
}

// The draft of a speculative pair with graphs (the default on a CUDA backend), both models
// in one backend: greedy speculation gives the target-only tokens, and the draft's passes
// were replayed from graphs. With graphs off the draft proposes exactly the same tokens.
TEST(CudaGraphForward, GreedySpeculationWithAGraphedDraftEqualsTargetOnly) {
  const std::string dir = test::scratch_dir("cuda-graph-forward-pair");
  test::TinyModelSpec spec;
  spec.arch = "qwen2";
  const test::TinyPair pair = test::write_tiny_pair(dir, spec);
  const auto prompt = std::vector<int32_t>{5, 17, 99, 42, 7, 230, 11, 64};
  GenerateOptions g;
  g.max_tokens = 20;
  g.ignore_eos = true;
  g.sampling.temperature = 0.0f;
  std::vector<int32_t> want;
  struct Result {
    std::vector<int32_t> tokens;
    int64_t accepted = 0;
    GraphStats draft;
  };
  auto run = [&](bool speculate, bool graphs) {
    auto be = cuda_under_test();
    auto target = Model::load(pair.target, *be);
    auto draft = Model::load(pair.close_draft, *be);
    KVCacheOptions o;
    o.block_size = 4;
    o.max_tokens = 96;
    KVCache tcache(*be, target->config(), o), dcache(*be, draft->config(), o);
    Transformer ttf(*target, tcache), dtf(*draft, dcache);
    dtf.set_graphs(graphs);
    const auto tok = Tokenizer::from_gguf(target->file());
    GenerateOptions opts = g;
    ModelProposer proposer(dtf);
    FixedPolicy policy;
    if (speculate) {
      opts.speculative.mode = DraftMode::Model;
      opts.speculative.draft_max = 3;
      // Model drafts only: prompt lookup is taken or not by measured time (lookup_choice),
      // which would make the runs' accepted counts differ on a loaded machine.
      opts.speculative.lookup = false;
    }
    SequenceRun r(ttf, *tok, prompt, opts, {}, 96, target->config().n_vocab, speculate ? &proposer : nullptr,
                  speculate ? &policy : nullptr);
    test::drive_to_end(r, ttf);
    return Result{r.result().tokens, r.result().speculative.accepted_tokens, dtf.graph_stats()};
  };
  const Result plain = run(false, true);
  const Result graphed = run(true, true);
  const Result direct = run(true, false);
  EXPECT_EQ(graphed.tokens, plain.tokens);
  EXPECT_EQ(direct.tokens, plain.tokens);
  EXPECT_EQ(graphed.accepted, direct.accepted) << "the same draft logits give the same proposals";
  EXPECT_GT(graphed.accepted, 0);
  EXPECT_GT(graphed.draft.replays, 0) << "the draft's decode passes should come from graphs";
  EXPECT_EQ(direct.draft.captures, 0);
}

// Several sequences drafting together (the scheduler's batched drafting): the same
// proposals with the draft's passes graphed as without.
TEST(CudaGraphForward, BatchedDraftingProposesTheSameTokensWithGraphs) {
  test::TinyModelSpec spec;
  spec.arch = "qwen2";
  spec.weight_type = DType::Q8_0;
  const std::string path = model_path("batched-draft", spec);
  SamplingParams sp;
  sp.temperature = 0.0f;
  std::vector<std::vector<int32_t>> contexts;
  for (int lane = 0; lane < 5; ++lane) {
    contexts.emplace_back();
    for (int i = 0; i < 4 + 3 * lane; ++i) contexts.back().push_back(token_of(lane, i));
  }
  auto propose = [&](bool graphs, GraphStats* stats) {
    ModelRun r(path, graphs, 256);
    std::vector<std::unique_ptr<ModelProposer>> ps;
    std::vector<Rng> rngs;
    for (size_t i = 0; i < contexts.size(); ++i) {
      ps.push_back(std::make_unique<ModelProposer>(*r.tf));
      rngs.emplace_back(1);
    }
    std::vector<std::vector<int32_t>> out;
    for (int round = 0; round < 3; ++round) {
      std::vector<ProposeJob> jobs;
      for (size_t i = 0; i < contexts.size(); ++i) {
        ProposeOptions o;
        o.max_tokens = 4;
        o.sampling = &sp;
        jobs.push_back({ps[i].get(), contexts[i], o, &rngs[i], {}});
      }
      propose_all(jobs);
      for (auto& j : jobs) out.push_back(j.out.tokens);
      // The target "accepts" the first two drafts and corrects the third.
      for (size_t i = 0; i < contexts.size(); ++i) {
        const auto& t = jobs[i].out.tokens;
        for (size_t k = 0; k < std::min<size_t>(2, t.size()); ++k) contexts[i].push_back(t[k]);
        contexts[i].push_back(static_cast<int32_t>((round * 7 + i * 13) % 300));
      }
    }
    *stats = r.tf->graph_stats();
    return out;
  };
  const auto saved = contexts;
  GraphStats on{}, off{};
  const auto want = propose(false, &off);
  contexts = saved;
  const auto got = propose(true, &on);
  EXPECT_EQ(got, want);
  EXPECT_GT(on.replays, 0);
  EXPECT_EQ(off.captures, 0);
}

TEST(CudaGraphForward, TheEnvironmentCanTurnGraphsOff) {
  test::TinyModelSpec spec;
  const std::string path = model_path("env", spec);
  ::setenv("TANDEM_CUDA_GRAPHS", "0", 1);
  {
    ModelRun r(path, true);  // set_graphs(true) still turns them on explicitly
    Transformer other(*r.model, *r.cache);
    EXPECT_FALSE(other.graphs_on());
  }
  ::unsetenv("TANDEM_CUDA_GRAPHS");
  {
    ModelRun r(path, true);
    Transformer other(*r.model, *r.cache);
    EXPECT_TRUE(other.graphs_on());
  }
  auto cpu = kernels::make_cpu_backend(1);
  auto model = Model::load(path, *cpu);
  KVCache cache(*cpu, model->config(), KVCacheOptions{});
  Transformer tf(*model, cache);
  EXPECT_FALSE(tf.graphs_on()) << "the CPU backend has nothing to capture";
  tf.set_graphs(true);
  EXPECT_FALSE(tf.graphs_on());
}

}  // namespace
}  // namespace tandem
