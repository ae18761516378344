// Greedy decoding on the CUDA backend (kernels/device_decode.hpp) under the SIMT emulator:
// the argmax of each logits row is the engine's argmax (engine/sampler.hpp), and the batch
// verifier accepts exactly the leading drafts equal to the target's tokens. (Sampled
// decoding: test_cuda_sampling.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>

#include "tests/support/cuda_under_test.hpp"
#include "engine/sampling/sampler.hpp"
#include "kernels/backend_factory.hpp"
#include "kernels/device_decode.hpp"
#include "verify/tree_verifier.hpp"

namespace tandem::kernels {
namespace {

std::unique_ptr<Backend> cuda_under_test() { return test::cuda_under_test(size_t{16} << 20); }

struct Dev {
  std::unique_ptr<Backend> be = cuda_under_test();
  std::vector<std::unique_ptr<Buffer>> bufs;
  template <typename T>
  Tensor put(DType t, const std::vector<T>& v, int64_t cols) {
    bufs.push_back(be->alloc(std::max<size_t>(v.size(), 1) * 4));
    Tensor x = make_tensor(bufs.back().get(), t, cols, static_cast<int64_t>(v.size()) / cols);
    if (!v.empty()) be->upload(x, v.data(), v.size() * 4);
    return x;
  }
  std::vector<int32_t> get(const Tensor& t) {
    std::vector<int32_t> v(static_cast<size_t>(t.numel()));
    be->download(v.data(), t, v.size() * 4);
    return v;
  }
};

TEST(CudaGreedy, BackendsSayWhetherTheyHaveIt) {
  EXPECT_EQ(device_decode(*make_cpu_backend(1)), nullptr);
  Dev d;
  EXPECT_NE(device_decode(*d.be), nullptr);
}

TEST(CudaGreedy, ArgmaxIsTheEnginesArgmax) {
  const int vocab = 1000;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::mt19937 g(3);
  std::vector<std::vector<float>> rows;
  for (int r = 0; r < 4; ++r) {
    std::vector<float> v(vocab);
    for (auto& x : v) x = std::normal_distribution<float>(0, 3)(g);
    rows.push_back(v);
  }
  rows[1][917] = rows[1][12] = 50.0f;         // a tie: the lower id wins
  rows[2][5] = nan, rows[2][600] = nan;       // NaN is -inf
  rows[3][999] = inf, rows[3][400] = inf;     // +inf ties
  rows.push_back(std::vector<float>(vocab, -0.0f));
  rows.back()[700] = 0.0f;                    // -0 == +0: id 0
  rows.push_back(std::vector<float>(vocab, -inf));
  rows.back()[321] = nan;                     // nothing possible: -1
  std::vector<float> flat;
  for (auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  Dev d;
  Tensor logits = d.put(DType::F32, flat, vocab);
  Tensor ids = d.put(DType::I32, std::vector<int32_t>(rows.size(), 7), 1);
  device_decode(*d.be)->argmax_rows(ids, logits);
  const auto got = d.get(ids);
  for (size_t r = 0; r + 1 < rows.size(); ++r) EXPECT_EQ(got[r], argmax(rows[r])) << "row " << r;
  EXPECT_EQ(got[1], 12);
  EXPECT_EQ(got[3], 400);
  EXPECT_EQ(got[4], 0);
  EXPECT_THROW(argmax(rows.back()), std::runtime_error);
  EXPECT_EQ(got.back(), -1);
}

// Host reference of the greedy verifier.
void verify_ref(const std::vector<int32_t>& am, const std::vector<int32_t>& first, const std::vector<int32_t>& drafts,
                const std::vector<int32_t>& nd, int kmax, std::vector<int32_t>& acc, std::vector<int32_t>& out) {
  const size_t n = first.size();
  acc.assign(n, 0);
  out.assign(n * (kmax + 1), -1);
  for (size_t s = 0; s < n; ++s) {
    int a = 0;
    while (a < nd[s] && drafts[s * kmax + a] == am[first[s] + a]) out[s * (kmax + 1) + a] = drafts[s * kmax + a], ++a;
    out[s * (kmax + 1) + a] = am[first[s] + a];
    acc[s] = a;
  }
}

TEST(CudaGreedy, VerifierAcceptsTheLeadingMatchingDrafts) {
  const int kmax = 4;
  // Rows of three sequences: 4 drafts all right (5 rows), 0 drafts (1 row), 3 drafts with
  // the second wrong (4 rows), 4 drafts with the first wrong (5 rows).
  const std::vector<int32_t> am = {5, 6, 7, 8, 9, /**/ 40, /**/ 11, 12, 13, 14, /**/ 20, 21, 22, 23, 24};
  const std::vector<int32_t> first = {0, 5, 6, 10};
  const std::vector<int32_t> nd = {4, 0, 3, 4};
  const std::vector<int32_t> drafts = {5, 6, 7, 8, /**/ 0, 0, 0, 0, /**/ 11, 99, 13, 0, /**/ 1, 21, 22, 23};
  Dev d;
  Tensor tam = d.put(DType::I32, am, 1), tf = d.put(DType::I32, first, 1), tnd = d.put(DType::I32, nd, 1);
  Tensor td = d.put(DType::I32, drafts, kmax);
  Tensor tacc = d.put(DType::I32, std::vector<int32_t>(first.size(), 0), 1);
  Tensor tout = d.put(DType::I32, std::vector<int32_t>(first.size() * (kmax + 1), 0), kmax + 1);
  device_decode(*d.be)->verify_greedy(tam, tf, td, tnd, tacc, tout);
  std::vector<int32_t> acc, out;
  verify_ref(am, first, drafts, nd, kmax, acc, out);
  EXPECT_EQ(d.get(tacc), acc);
  EXPECT_EQ(d.get(tout), out);
  EXPECT_EQ(acc, (std::vector<int32_t>{4, 0, 1, 0}));
  EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + 5), (std::vector<int32_t>{5, 6, 7, 8, 9}));
  // A sequence whose rows run past the argmax rows is refused, not read.
  Tensor bad = d.put(DType::I32, std::vector<int32_t>{0, 5, 6, 11}, 1);
  device_decode(*d.be)->verify_greedy(tam, bad, td, tnd, tacc, tout);
  EXPECT_THROW(d.be->synchronize(), std::out_of_range);
  EXPECT_EQ(d.get(tacc)[3], -1);
}

// Token trees walked on the device: from the root, the child whose token is its row's
// argmax (node i's row: first_row + 1 + i), against the host's tree verifier on random trees
// of 1..8 nodes (siblings distinct, tokens from a small alphabet so that walks go deep),
// chains among them; the walk's accepted tokens, then the argmax where it stopped.
TEST(CudaGreedy, VerifierWalksTokenTreesAsTheHostDoes) {
  const int kmax = 8, n = 60;
  std::mt19937 g(11);
  std::vector<int32_t> first, nd, drafts(size_t(n) * kmax, -1), parents(size_t(n) * kmax, -1), am;
  std::vector<TreeVerdict> want;
  for (int s = 0; s < n; ++s) {
    const int k = 1 + static_cast<int>(g() % kmax);
    std::vector<int32_t> tok, par;
    for (int i = 0; i < k; ++i) {
      const int32_t p = static_cast<int32_t>(g() % static_cast<uint32_t>(i + 1)) - 1;  // -1 .. i-1
      int32_t t = static_cast<int32_t>(g() % 4);
      for (int j = 0; j < i; ++j)  // siblings distinct
        if (par[size_t(j)] == p && tok[size_t(j)] == t) t = 4 + i, j = i;
      tok.push_back(t), par.push_back(p);
    }
    first.push_back(static_cast<int32_t>(am.size()));
    nd.push_back(k);
    for (int r = 0; r <= k; ++r) am.push_back(static_cast<int32_t>(g() % 4));
    std::copy(tok.begin(), tok.end(), drafts.begin() + s * kmax);
    std::copy(par.begin(), par.end(), parents.begin() + s * kmax);
    const size_t r0 = size_t(first.back());
    want.push_back(verify_tree_greedy(tok, par, [&](int32_t r) {
      Distribution d;
      d.ids = {am[r0 + size_t(r)]};
      d.probs = {1.0f};
      return d;
    }));
  }
  Dev d;
  Tensor tam = d.put(DType::I32, am, 1), tf = d.put(DType::I32, first, 1), tnd = d.put(DType::I32, nd, 1);
  Tensor td = d.put(DType::I32, drafts, kmax), tp = d.put(DType::I32, parents, kmax);
  Tensor tacc = d.put(DType::I32, std::vector<int32_t>(size_t(n), 0), 1);
  Tensor tout = d.put(DType::I32, std::vector<int32_t>(size_t(n) * (kmax + 1), 0), kmax + 1);
  device_decode(*d.be)->verify_greedy(tam, tf, td, tnd, tacc, tout, tp);
  const auto acc = d.get(tacc), out = d.get(tout);
  int deep = 0;
  for (int s = 0; s < n; ++s) {
    const TreeVerdict& w = want[size_t(s)];
    ASSERT_EQ(acc[size_t(s)], static_cast<int32_t>(w.path.size())) << "sequence " << s;
    for (size_t i = 0; i < w.path.size(); ++i)
      EXPECT_EQ(out[size_t(s) * (kmax + 1) + i], drafts[size_t(s) * kmax + size_t(w.path[i])]) << s;
    EXPECT_EQ(out[size_t(s) * (kmax + 1) + w.path.size()], w.next_token) << s;
    deep += w.path.size() >= 2;
  }
  EXPECT_GE(deep, 5) << "too few walks went two nodes deep to test anything";
}

}  // namespace
}  // namespace tandem::kernels
