// The whole forward pass of tiny fixture models on the CUDA backend under the SIMT
// emulator: the same logits as the CPU backend (within a bound for the op differences),
// and the losslessness property greedy speculation rests on: a token's logits are the same
// bits whether it is decoded alone or verified among k+1 tokens of a ragged batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <span>

#include "tests/support/cuda_under_test.hpp"
#include "draft/model_proposer.hpp"
#include "draft/ngram_proposer.hpp"
#include "engine/model/transformer.hpp"
#include "engine/kv/kv_cache.hpp"
#include "engine/model/model.hpp"
#include "engine/runtime/sequence_run.hpp"
#include "engine/text/tokenizer.hpp"
#include "kernels/backend_factory.hpp"
#include "policies/policy.hpp"
#include "tests/support/drive.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/tiny_model.hpp"

namespace tandem {
namespace {

using Case = test::CudaModelCase;

std::unique_ptr<kernels::Backend> cuda_under_test() { return test::cuda_under_test(size_t{128} << 20); }

std::vector<Case> cases() { return test::cuda_model_cases(); }

struct ModelRun {
  std::unique_ptr<kernels::Backend> be;
  std::unique_ptr<Model> model;
  std::unique_ptr<KVCache> cache;
  std::unique_ptr<Transformer> tf;
  ModelRun(std::unique_ptr<kernels::Backend> b, const std::string& path) : be(std::move(b)) {
    model = Model::load(path, *be);
    KVCacheOptions o;
    o.block_size = 4;
    o.max_tokens = 128;
    cache = std::make_unique<KVCache>(*be, model->config(), o);
    tf = std::make_unique<Transformer>(*model, *cache);
  }
  ~ModelRun() {
    tf.reset();
    cache.reset();
    model.reset();
  }
};

std::string model_path(const Case& c) {
  const std::string path = test::scratch_dir(std::string("cuda-forward-") + c.name) + "/m.gguf";
  test::write_tiny_model(path, c.spec);
  return path;
}

std::vector<int32_t> tokens(int n, int salt) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 37 + salt * 11 + 5) % 300);
  return t;
}

// Prompt + decode on both backends. Not bit-identical: the matmuls sum their blocks in
// another order (bounded per op in test_cuda_ops) and a quantized model's activations can
// then round to a neighbouring int8 code. The bound (1e-4 of the logits' range, 1e-6 for
// F32 weights, which the GPU multiplies as split TF32 parts; measured: 1e-7 to 3e-7) is far
// below what a wrong op or layout gives (order 1).
TEST(CudaForward, LogitsMatchTheCpuBackend) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const std::string path = model_path(c);
    ModelRun cpu(kernels::make_cpu_backend(1), path), gpu(cuda_under_test(), path);
    SequenceKV sc(*cpu.cache), sg(*gpu.cache);
    const auto prompt = tokens(9, 1), more = tokens(3, 2);
    std::vector<float> lc, lg;
    for (int step = 0; step < 2; ++step) {
      Batch bc, bg;
      const auto& t = step == 0 ? prompt : more;
      bc.add_all_logits(sc, t);
      bg.add_all_logits(sg, t);
      cpu.tf->forward(bc, lc);
      gpu.tf->forward(bg, lg);
      ASSERT_EQ(lc.size(), lg.size());
      float range = 0;
      for (float x : lc) range = std::max(range, std::fabs(x));
      const double tol = (c.spec.weight_type == DType::F32 ? 1e-6 : 1e-4) * range;
      double worst = 0;
      for (size_t i = 0; i < lc.size(); ++i) worst = std::max(worst, double(std::fabs(lc[i] - lg[i])));
      EXPECT_LE(worst, tol) << "step " << step << " (logit range " << range << ")";
    }
  }
}

// Target-only greedy decoding (one token per pass, alongside another sequence's prefill)
// against verification (the k+1 tokens in one pass): identical logits bit for bit.
TEST(CudaForward, VerifyingKPlus1TokensGivesTheDecodeLogitsBitForBit) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const std::string path = model_path(c);
    ModelRun gpu(cuda_under_test(), path);
    const auto prompt = tokens(7, 3), drafted = tokens(5, 4), other = tokens(6, 5);
    const size_t nv = static_cast<size_t>(gpu.model->config().n_vocab);
    std::vector<float> decode, l;
    {
      SequenceKV s(*gpu.cache), o(*gpu.cache);
      Batch b;
      b.add(s, prompt);
      gpu.tf->forward(b, l);
      decode.insert(decode.end(), l.end() - nv, l.end());
      for (size_t i = 0; i < drafted.size(); ++i) {
        b.clear();
        b.add(s, std::span(drafted).subspan(i, 1));
        if (i == 1) b.add(o, other);  // someone else's prefill in the same pass
        gpu.tf->forward(b, l);
        decode.insert(decode.end(), l.begin(), l.begin() + static_cast<long>(nv));
      }
    }
    SequenceKV s(*gpu.cache), o(*gpu.cache), o2(*gpu.cache);
    Batch b;
    b.add(s, prompt);
    gpu.tf->forward(b, l);
    std::vector<float> verify(l.end() - nv, l.end());
    b.clear();
    b.add(o2, tokens(2, 9));  // a different neighbour this time
    b.add_all_logits(s, drafted);
    gpu.tf->forward(b, l);
    // o2's output row comes first (requested first), then the 5 verified rows.
    verify.insert(verify.end(), l.begin() + static_cast<long>(nv), l.end());
    ASSERT_EQ(verify.size(), decode.size());
    for (size_t i = 0; i < decode.size(); ++i)
      ASSERT_EQ(std::memcmp(&decode[i], &verify[i], 4), 0) << "row " << i / nv << " logit " << i % nv;
  }
}

// A decoding sequence keeps its logits bit for bit when another sequence's long prompt
// chunk shares its pass (90 tokens: the tensor-core matmuls, which the lone token never
// takes), as the server's mixed steps need for greedy and coupled output to be independent
// of the load.
TEST(CudaForward, ADecodeTokenBesideALongPromptChunkKeepsItsLogits) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    ModelRun gpu(cuda_under_test(), model_path(c));
    const auto prompt = tokens(6, 11), next = tokens(1, 12), chunk = tokens(90, 13);
    const size_t nv = static_cast<size_t>(gpu.model->config().n_vocab);
    std::vector<float> l, alone;
    {
      SequenceKV s(*gpu.cache);
      Batch b;
      b.add(s, prompt);
      gpu.tf->forward(b, l);
      b.clear();
      b.add(s, next);
      gpu.tf->forward(b, l);
      alone = l;
    }
    SequenceKV s(*gpu.cache), o(*gpu.cache);
    Batch b;
    b.add(s, prompt);
    gpu.tf->forward(b, l);
    b.clear();
    b.add(o, chunk);
    b.add(s, next);
    gpu.tf->forward(b, l);
    ASSERT_EQ(l.size(), 2 * nv);  // the chunk's last row, then s's
    for (size_t i = 0; i < nv; ++i)
      ASSERT_EQ(std::memcmp(&alone[i], &l[nv + i], 4), 0) << "logit " << i;
  }
}

// Kernel launches a layer costs (the difference between 3 and 2 layers of the same model) in
// a decode pass (1 token), a verification pass (5) and a prompt chunk on tensor cores (40):
// the fused steps at work. Qwen2 (biases, Q8_0): the input norm with the quantization its
// projections read (1); q/k/v in one launch whose epilogue adds the biases, rotates q and k
// and stores k and v (1); attention in one span, quantizing its output (1); the output
// projection with the residual in its epilogue (1); the FFN norm and gate/up (2); the
// activation with its quantization and the down projection with the residual (2): 8. Llama in
// F32 quantizes nothing but takes the activation apart: 8 as well. Gemma 3: its per-head norms
// are finished by the q/k/v launch's warps that complete a head, and each post-norm's residual
// is added to the stream by the next pre-norm's kernel: 8 too.
TEST(CudaForward, KernelLaunchesPerLayer) {
  const std::map<std::string, int64_t> expected = {{"llama_f32", 8}, {"qwen2_q8_0", 8}, {"gemma3_q4_k", 8}};
  for (const Case& c : cases()) {
    for (int n_tokens : {1, 5, 40}) {
      SCOPED_TRACE(std::string(c.name) + " tokens " + std::to_string(n_tokens));
      int64_t launches[2];
      for (int i = 0; i < 2; ++i) {
        Case ci = c;
        ci.spec.n_layer = 2 + i;
        const std::string name = std::string(c.name) + "_" + std::to_string(ci.spec.n_layer) + "l";
        ci.name = name.c_str();
        ModelRun gpu(cuda_under_test(), model_path(ci));
        gpu.tf->set_graphs(false);  // the launches themselves (a graph's capture counts them too)
        SequenceKV s(*gpu.cache);
        Batch b;
        b.add(s, tokens(8, 3));
        std::vector<float> l;
        gpu.tf->forward(b, l);  // the context the measured pass extends
        b.clear();
        b.add(s, tokens(n_tokens, 5));
        const int64_t before = kernels::cuda_launch_count(*gpu.be);
        gpu.tf->forward(b, l);
        launches[i] = kernels::cuda_launch_count(*gpu.be) - before;
      }
      const int64_t per_layer = launches[1] - launches[0];
      RecordProperty(std::string(c.name) + "_" + std::to_string(n_tokens) + "_launches_per_layer",
                     std::to_string(per_layer));
      EXPECT_EQ(per_layer, expected.at(c.name));
    }
  }
}

// Q4_K_M's layers mix types: half of them hold attn_v and ffn_down in Q6_K beside Q4_K
// (Qwen2.5 1.5B), or in Q8_0 beside Q5_0 (the 0.5B). Their q/k/v still go out in one launch,
// each matrix computed with its own type's code, so a mixed layer costs the 8 launches of a
// plain one in decode, verification and prompt passes (the ops tests check the bits of such
// launches); and the weight planes change no bit of the logits.
TEST(CudaForward, MixedQuantizationLayersTakeEightLaunches) {
  for (auto [w, mixed] : {std::pair{DType::Q4_K, DType::Q6_K}, {DType::Q5_0, DType::Q8_0}}) {
    SCOPED_TRACE(std::string(dtype_name(w)) + " with " + dtype_name(mixed));
    test::TinyModelSpec spec;
    spec.arch = "qwen2";
    // A KV head's query group 256 wide (4 heads of 64), whole Q4_K activation blocks: the
    // attention quantizes its output for the output projection, as Qwen2.5's groups allow.
    spec.n_embd = 256, spec.n_ff = 512, spec.n_head = 4, spec.n_head_kv = 1;
    spec.weight_type = w, spec.mixed_type = mixed;
    spec.tied_embeddings = false;
    const std::string dir = test::scratch_dir(std::string("cuda-forward-mixed-") + dtype_name(w));
    int64_t launches[2][3];
    for (int i = 0; i < 2; ++i) {
      spec.n_layer = 2 + 2 * i;  // layers 2 and 3: one plain, one mixed
      const std::string path = dir + "/m" + std::to_string(spec.n_layer) + ".gguf";
      test::write_tiny_model(path, spec);
      ModelRun gpu(cuda_under_test(), path);
      gpu.tf->set_graphs(false);
      SequenceKV s(*gpu.cache);
      Batch b;
      std::vector<float> l;
      b.add(s, tokens(8, 3));
      gpu.tf->forward(b, l);
      const int counts[] = {1, 5, 40};
      for (int k = 0; k < 3; ++k) {
        b.clear();
        b.add(s, tokens(counts[k], 5 + k));
        const int64_t before = kernels::cuda_launch_count(*gpu.be);
        gpu.tf->forward(b, l);
        launches[i][k] = kernels::cuda_launch_count(*gpu.be) - before;
      }
      if (i == 0) continue;
      // The logits of a prompt, and the same bits with the weights as stored (TANDEM_PACK=0:
      // no planes; the pairs still share launches).
      std::vector<float> logits[2];
      for (int stored = 0; stored < 2; ++stored) {
        if (stored) setenv("TANDEM_PACK", "0", 1);
        ModelRun run(cuda_under_test(), path);
        if (stored) unsetenv("TANDEM_PACK");
        EXPECT_EQ(run.model->layers[1].wv.layout == kernels::RowLayout::File, stored == 1);
        SequenceKV sq(*run.cache);
        Batch bb;
        bb.add_all_logits(sq, tokens(9, 1));
        run.tf->forward(bb, logits[stored]);
      }
      ASSERT_EQ(logits[0].size(), logits[1].size());
      EXPECT_EQ(0, std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)));
    }
    for (int k = 0; k < 3; ++k) EXPECT_EQ(launches[1][k] - launches[0][k], 2 * 8) << "pass " << k;
  }
}

// Greedy speculative decoding (n-gram drafts, k = 4, verified in one target pass) gives
// exactly the tokens of plain greedy decoding, on the CUDA backend: what batch invariance
// is for. The prompt repeats itself so that the n-gram proposer has drafts to offer.
TEST(CudaForward, GreedySpeculativeEqualsTargetOnly) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const std::string path = model_path(c);
    ModelRun gpu(cuda_under_test(), path);
    const auto tok = Tokenizer::from_gguf(gpu.model->file());
    std::vector<int32_t> prompt;
    for (int rep = 0; rep < 3; ++rep)
      for (int32_t t : tokens(6, 7)) prompt.push_back(t);
    GenerateOptions g;
    g.max_tokens = 24;
    g.ignore_eos = true;
    g.sampling.temperature = 0.0f;
    const int32_t n_vocab = gpu.model->config().n_vocab;
    SequenceRun plain(*gpu.tf, *tok, prompt, g, {}, 128, n_vocab, nullptr, nullptr);
    test::drive_to_end(plain, *gpu.tf);
    const std::vector<int32_t> want = plain.result().tokens;
    plain.kv().clear();
    g.speculative.mode = DraftMode::Ngram;
    g.speculative.draft_max = 4;
    NgramProposer proposer(1, 4);
    FixedPolicy policy;
    SequenceRun spec(*gpu.tf, *tok, prompt, g, {}, 128, n_vocab, &proposer, &policy);
    test::drive_to_end(spec, *gpu.tf);
    EXPECT_EQ(spec.result().tokens, want);
    EXPECT_GT(spec.result().speculative.drafted_tokens, 0) << "no drafts: the test would not test anything";
    EXPECT_LT(spec.result().speculative.target_passes, plain.result().speculative.target_passes + 1);
  }
}

// What the Coordinator does for one sequence with a draft model: prefill the target, let
// the draft read its context when it has to, then step.

// Both models of a speculative pair in one CUDA backend (one arena): the target (F32) and
// a close draft (the same weights in F16), each with its own paged cache. Greedy decoding
// with the draft model proposing 3 tokens per step gives the tokens of plain decoding.
TEST(CudaForward, DraftAndTargetShareOneArenaAndGreedySpeculationIsLossless) {
  const std::string dir = test::scratch_dir("cuda-forward-pair");
  test::TinyModelSpec spec;
  spec.arch = "qwen2";  // F32 weights: the close draft holds the same values in F16
  const test::TinyPair pair = test::write_tiny_pair(dir, spec);
  auto be = cuda_under_test();
  auto target = Model::load(pair.target, *be);
  auto draft = Model::load(pair.close_draft, *be);
  KVCacheOptions o;
  o.block_size = 4;
  o.max_tokens = 96;
  KVCache tcache(*be, target->config(), o), dcache(*be, draft->config(), o);
  Transformer ttf(*target, tcache), dtf(*draft, dcache);
  EXPECT_NE(be->description().find("arena"), std::string::npos);
  const auto tok = Tokenizer::from_gguf(target->file());
  const auto prompt = tokens(8, 11);
  GenerateOptions g;
  g.max_tokens = 16;
  g.ignore_eos = true;
  g.sampling.temperature = 0.0f;
  const int32_t n_vocab = target->config().n_vocab;
  std::vector<int32_t> want;
  {
    SequenceRun plain(ttf, *tok, prompt, g, {}, 96, n_vocab, nullptr, nullptr);
    test::drive_to_end(plain, ttf);
    want = plain.result().tokens;
  }
  g.speculative.mode = DraftMode::Model;
  g.speculative.draft_max = 3;
  ModelProposer proposer(dtf);
  FixedPolicy policy;
  SequenceRun spec_run(ttf, *tok, prompt, g, {}, 96, n_vocab, &proposer, &policy);
  test::drive_to_end(spec_run, ttf);  // the draft reads its context when the run needs it
  EXPECT_EQ(spec_run.result().tokens, want);
  EXPECT_GT(spec_run.result().speculative.accepted_tokens, 0)
      << "the close draft should agree sometimes; drafted " << spec_run.result().speculative.drafted_tokens
      << " passes " << spec_run.result().speculative.target_passes;
}

}  // namespace
}  // namespace tandem
