// Tree attention (kernels/tree_keys.hpp, Batch::add_tree): every node of a token tree fed in
// one pass gets the logits, bit for bit, that the same tokens fed as a chain give its last
// token, on every CPU kernel level and on the CUDA kernels; and the accepted path's KV,
// moved down into chain order (Transformer::move_kv), decodes on exactly as the chain's.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/kv/kv_cache.hpp"
#include "engine/model/batch.hpp"
#include "engine/model/model.hpp"
#include "engine/model/transformer.hpp"
#include "kernels/backend.hpp"
#include "tests/support/cuda_under_test.hpp"
#include "tests/support/forward_check.hpp"
#include "tests/support/isa_levels.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/tiny_model.hpp"

namespace tandem {
namespace {

// A tree of 9 nodes under the root (-1), listed parents first, with two chains of depth 4.
const std::vector<int32_t> kParents = {-1, -1, 0, 0, 1, 2, 5, 3, -1};
const std::vector<int32_t> kTokens = {17, 40, 23, 99, 5, 61, 7, 150, 88};

int depth_of(int32_t node) { return node < 0 ? 0 : 1 + depth_of(kParents[static_cast<size_t>(node)]); }

std::vector<int32_t> path_to(int32_t node) {
  std::vector<int32_t> p;
  for (int32_t n = node; n >= 0; n = kParents[static_cast<size_t>(n)]) p.insert(p.begin(), n);
  return p;
}

struct Rig {
  std::unique_ptr<kernels::Backend> be;
  std::unique_ptr<Model> model;
  std::unique_ptr<KVCache> cache;
  std::unique_ptr<Transformer> tf;
  Rig(std::unique_ptr<kernels::Backend> backend, const std::string& path) : be(std::move(backend)) {
    model = Model::load(path, *be);
    KVCacheOptions o;
    o.block_size = 4;  // nodes and paths straddle blocks
    o.max_tokens = 1024;
    o.dtype = DType::F16;
    cache = std::make_unique<KVCache>(*be, model->config(), o);
    tf = std::make_unique<Transformer>(*model, *cache);
  }
};

std::vector<int32_t> context(int n) {
  std::vector<int32_t> c;
  for (int i = 0; i < n; ++i) c.push_back((i * 37 + 11) % 300);
  return c;
}

// One model on one backend: the tree pass (root + nodes, beside another sequence's chain)
// against each node's chain, then the accepted path moved and decoded one token further.
void check_tree_matches_chains(Rig& r, int ctx_len) {
  const size_t V = static_cast<size_t>(r.tf->n_logits());
  const std::vector<int32_t> ctx = context(ctx_len);
  const std::span<const int32_t> prefix(ctx.data(), ctx.size() - 1);
  const int32_t root = ctx.back();
  std::vector<float> logits;

  SequenceKV tree_seq(*r.cache), other(*r.cache);
  Batch b;
  b.add(tree_seq, prefix);
  b.add(other, prefix);
  r.tf->forward(b, logits);
  b.clear();

  const int32_t base_len = tree_seq.length();  // the root's index
  const int32_t tree_base = base_len + 1;
  std::vector<int32_t> tokens = {root}, positions = {base_len};
  std::vector<uint64_t> masks = {0};
  for (size_t i = 0; i < kParents.size(); ++i) {
    uint64_t m = 0;
    for (int32_t n : path_to(static_cast<int32_t>(i))) m |= uint64_t{1} << n;
    tokens.push_back(kTokens[i]);
    positions.push_back(base_len + depth_of(static_cast<int32_t>(i)));
    masks.push_back(m);
  }
  // Another sequence's chain in the same pass: tree tokens share the walk with nothing else.
  b.add_all_logits(other, std::vector<int32_t>{root, 3, 4});
  b.add_tree(tree_seq, tokens, positions, tree_base, masks);
  r.tf->forward(b, logits);
  b.clear();
  const std::vector<float> tree_logits(logits.begin() + static_cast<ptrdiff_t>(3 * V), logits.end());
  ASSERT_EQ(tree_logits.size(), tokens.size() * V);

  for (int32_t node = -1; node < static_cast<int32_t>(kParents.size()); ++node) {
    SequenceKV chain(*r.cache);
    b.add(chain, prefix);
    r.tf->forward(b, logits);
    b.clear();
    std::vector<int32_t> toks = {root};
    if (node >= 0)
      for (int32_t n : path_to(node)) toks.push_back(kTokens[static_cast<size_t>(n)]);
    b.add(chain, toks);
    r.tf->forward(b, logits);
    b.clear();
    const size_t row = static_cast<size_t>(node + 1);
    const auto at = tree_logits.begin() + static_cast<ptrdiff_t>(row * V);
    EXPECT_TRUE(test::same_bits(logits, std::vector<float>(at, at + static_cast<ptrdiff_t>(V)), static_cast<int64_t>(V)))
        << "node " << node;
  }

  // Accept the path 0 -> 2 -> 5 -> 6 (tree indices tree_base + {0, 2, 5, 6}).
  const std::vector<int32_t> path = path_to(6);
  std::vector<int32_t> from;
  for (int32_t n : path) from.push_back(tree_base + n);
  r.tf->move_kv(tree_seq, from, tree_base);
  tree_seq.truncate(tree_base + static_cast<int32_t>(path.size()));
  b.add(tree_seq, std::vector<int32_t>{77});
  r.tf->forward(b, logits);
  b.clear();
  const std::vector<float> after_move = logits;

  SequenceKV chain(*r.cache);
  std::vector<int32_t> toks(ctx.begin(), ctx.end());
  for (int32_t n : path) toks.push_back(kTokens[static_cast<size_t>(n)]);
  toks.push_back(77);
  b.add(chain, std::span<const int32_t>(toks).first(toks.size() - 1));
  r.tf->forward(b, logits);
  b.clear();
  b.add(chain, std::vector<int32_t>{77});
  r.tf->forward(b, logits);
  EXPECT_TRUE(test::same_bits(logits, after_move, static_cast<int64_t>(V))) << "decoding after the moved path";
}

std::vector<test::CudaModelCase> model_cases() { return test::cuda_model_cases(); }

std::string model_path(const test::CudaModelCase& c) {
  const std::string p = test::scratch_dir(std::string("tree-attn-") + c.name) + "/model.gguf";
  test::write_tiny_model(p, c.spec);
  return p;
}

TEST(TreeAttention, EveryNodeGetsItsChainsLogitsOnTheCpuAtEveryLevel) {
  test::IsaGuard guard;
  for (const auto& c : model_cases()) {
    const std::string path = model_path(c);
    for (auto isa : test::supported_isas()) {
      kernels::cpu::force_isa(isa);
      for (int ctx_len : {6, 30}) {  // the tree inside one tile, and past the first tiles
        SCOPED_TRACE(std::string(c.name) + " isa " + std::to_string(static_cast<int>(isa)) + " context " +
                     std::to_string(ctx_len));
        Rig r(kernels::make_cpu_backend(1), path);
        check_tree_matches_chains(r, ctx_len);
      }
    }
  }
}

TEST(TreeAttention, EveryNodeGetsItsChainsLogitsOnTheCudaKernels) {
  for (const auto& c : model_cases()) {
    SCOPED_TRACE(c.name);
    Rig r(test::cuda_under_test(size_t{128} << 20), model_path(c));
    check_tree_matches_chains(r, 30);
  }
}

TEST(TreeAttention, BadTreesAreRefused) {
  test::TinyModelSpec spec;
  const std::string path = test::scratch_dir("tree-attn-bad") + "/tiny.gguf";
  test::write_tiny_model(path, spec);
  Rig r(kernels::make_cpu_backend(1), path);
  SequenceKV seq(*r.cache);
  Batch b;
  b.add(seq, std::vector<int32_t>{1, 2, 3});
  std::vector<float> logits;
  r.tf->forward(b, logits);
  b.clear();
  const std::vector<int32_t> toks = {4, 5};
  // Node 1 claims depth 1 but reads node 0 as its ancestor (depth 2).
  EXPECT_THROW(b.add_tree(seq, toks, std::vector<int32_t>{3, 3}, 3, std::vector<uint64_t>{1, 3}),
               std::invalid_argument);
  // Node 1 reads a key fed after it.
  EXPECT_THROW(b.add_tree(seq, toks, std::vector<int32_t>{3, 4}, 3, std::vector<uint64_t>{3, 6}),
               std::invalid_argument);
  // A token outside the tree must sit at its index.
  EXPECT_THROW(b.add_tree(seq, toks, std::vector<int32_t>{2, 3}, 3, std::vector<uint64_t>{0, 2}),
               std::invalid_argument);
  EXPECT_TRUE(b.empty());
  // Moves must go down and in order.
  b.add_tree(seq, toks, std::vector<int32_t>{3, 4}, 3, std::vector<uint64_t>{1, 3});
  r.tf->forward(b, logits);
  EXPECT_THROW(r.tf->move_kv(seq, std::vector<int32_t>{4, 3}, 3), std::invalid_argument);
  EXPECT_THROW(r.tf->move_kv(seq, std::vector<int32_t>{3}, 4), std::invalid_argument);
  EXPECT_NO_THROW(r.tf->move_kv(seq, std::vector<int32_t>{4}, 3));
}

}  // namespace
}  // namespace tandem
