// Decoding on the device: the argmax of each logits row, coupled (Gumbel-max) sampling with
// the engine's counter-based noise, and the verifier of speculative decoding over a whole
// batch, so that only token ids and accepted counts cross to the host (not the
// n_rows x n_vocab logits).
//
// argmax semantics are the engine's (engine/sampler.hpp): ties go to the lowest id, NaN
// counts as -inf, -0 equals +0; a row with no finite or +inf value gives -1. The
// comparison is on an order-preserving integer key, so the block reduction is exact and
// its order does not matter.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kThreads = 256;

// (key, id) pairs: larger key wins, then lower id.
__device__ __forceinline__ void better(int32_t& k, int32_t& i, int32_t k2, int32_t i2) {
  if (k2 > k || (k2 == k && i2 < i)) k = k2, i = i2;
}

__global__ void argmax_kernel(const float* logits, int64_t ld, int64_t vocab, int32_t* out) {
  TANDEM_GRID_DEPENDENCY();
  __shared__ int32_t sk[kThreads / dev::kWarp], si[kThreads / dev::kWarp];
  const float* row = logits + blockIdx.x * ld;
  int32_t k = dev::kNegInfKey, id = 0x7fffffff;
  for (int64_t c = threadIdx.x; c < vocab; c += kThreads) better(k, id, dev::rank_key(row[c]), static_cast<int32_t>(c));
  for (int o = 16; o >= 1; o /= 2)
    better(k, id, __shfl_xor_sync(0xffffffffu, k, o), __shfl_xor_sync(0xffffffffu, id, o));
  const int warp = threadIdx.x / dev::kWarp;
  if (threadIdx.x % dev::kWarp == 0) sk[warp] = k, si[warp] = id;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / dev::kWarp; ++w) better(k, id, sk[w], si[w]);
    // Only -inf/NaN: no token (an all -inf row keeps the key of -inf with some id).
    out[blockIdx.x] = k == dev::kNegInfKey ? -1 : id;
  }
}

// One thread per sequence: accept drafts while they equal the target's argmax, then emit
// the argmax at the first mismatch (or after the last draft). A tree (parents) is walked
// from the root: node i's row is r0 + 1 + i, and the walk follows the first child whose
// token is its row's argmax (children come after their parent, so the walk only goes on).
__global__ void verify_greedy_kernel(const int32_t* argmax, int64_t n_rows, const int32_t* first_row,
                                     const int32_t* drafts, const int32_t* n_drafts, int max_drafts, int n_seqs,
                                     int32_t* n_accepted, int32_t* out_tokens, int* err, const int32_t* parents) {
  TANDEM_GRID_DEPENDENCY();
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= n_seqs) return;
  const int32_t* dr = drafts + static_cast<int64_t>(s) * max_drafts;
  int32_t* out = out_tokens + static_cast<int64_t>(s) * (max_drafts + 1);
  const int k = n_drafts[s];
  const int64_t r0 = first_row[s];
  if (k < 0 || k > max_drafts || r0 < 0 || r0 + k >= n_rows) {
    atomicOr(err, static_cast<int>(dev::kErrVerify));
    for (int i = 0; i <= max_drafts; ++i) out[i] = -1;
    n_accepted[s] = -1;
    return;
  }
  const int32_t* am = argmax + r0;
  int a = 0;
  if (!parents) {
    while (a < k && dr[a] == am[a]) out[a] = dr[a], ++a;
    out[a] = am[a];
  } else {
    const int32_t* pr = parents + static_cast<int64_t>(s) * max_drafts;
    for (int node = -1;;) {
      const int32_t want = am[node + 1];
      int child = -1;
      for (int c = node + 1; c < k && child < 0; ++c)
        if (pr[c] == node && dr[c] == want) child = c;
      if (child < 0) {
        out[a] = want;
        break;
      }
      out[a++] = dr[child];
      node = child;
    }
  }
  for (int i = a + 1; i <= max_drafts; ++i) out[i] = -1;
  n_accepted[s] = a;
}

}  // namespace

void ops::argmax_rows(Stream s, const float* logits, int64_t ld, int64_t n_rows, int64_t vocab, int32_t* out) {
  if (n_rows == 0) return;
  TANDEM_LAUNCH(argmax_kernel, static_cast<unsigned>(n_rows), kThreads, 0, static_cast<cudaStream_t>(s))
  (logits, ld, vocab, out);
}

void ops::verify_greedy(Stream s, const int32_t* argmax, int64_t n_rows, const int32_t* first_row,
                        const int32_t* drafts, const int32_t* n_drafts, int max_drafts, int n_seqs,
                        int32_t* n_accepted, int32_t* out_tokens, int* err, const int32_t* parents) {
  if (n_seqs == 0) return;
  TANDEM_LAUNCH(verify_greedy_kernel, static_cast<unsigned>((n_seqs + 127) / 128), 128, 0, static_cast<cudaStream_t>(s))
  (argmax, n_rows, first_row, drafts, n_drafts, max_drafts, n_seqs, n_accepted, out_tokens, err, parents);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
