// The best w tokens of chosen rows, best first: the children of token-tree nodes drafted on
// the device (draft/tree_rows.hpp), so that only w ids and values per node cross to the
// host instead of the draft's whole row of logits.
//   * by value over a logits row (greedy trees: the draft's most likely tokens), with the
//     row's log-sum-exp for the nodes' path probabilities;
//   * by Gumbel key -log u(position, v) / p_v over a probs row (coupled trees: gumbel_top's
//     order, engine/sampling/gumbel.hpp).
// One block per row. Round j takes the best token strictly after round j - 1's in the order
// (a total order: value or key, then the tie rules), so w rounds give the host's top w in
// its order, with no list of the chosen ones. A round reads the row again; tree widths are
// small (2 to 4 in practice).
#include "kernels/cuda/block_best.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/noise.cuh"
#include "kernels/cuda/ops.hpp"
#include "kernels/device_decode.hpp"
#include "kernels/exp_nonpos.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kT = 256;
constexpr int32_t kNoId = 0x7fffffff;

// By value: larger key first, then the lower id (the host's scan keeps the first of equal
// values). key kNegInfKey (-inf, NaN) never counts.
struct ByValue {
  int32_t key, id;
  __device__ bool valid() const { return id != kNoId; }
};
__device__ __forceinline__ bool before(ByValue a, ByValue b) {  // a ranks before b
  return a.key > b.key || (a.key == b.key && a.id < b.id);
}
// By Gumbel key: smaller key first, then the larger p, then the lower id (gumbel_top keeps
// the earlier entry of a distribution sorted by p, then id).
struct ByGumbel {
  double key;
  float p;
  int32_t id;
  __device__ bool valid() const { return id != kNoId; }
};
__device__ __forceinline__ bool before(ByGumbel a, ByGumbel b) {
  if (a.key != b.key) return a.key < b.key;
  if (a.p != b.p) return a.p > b.p;
  return a.id < b.id;
}

__device__ __forceinline__ ByValue shfl(ByValue v, int o) {
  return {__shfl_xor_sync(0xffffffffu, v.key, o), __shfl_xor_sync(0xffffffffu, v.id, o)};
}
__device__ __forceinline__ ByGumbel shfl(ByGumbel v, int o) {
  return {__shfl_xor_sync(0xffffffffu, v.key, o), __shfl_xor_sync(0xffffffffu, v.p, o),
          __shfl_xor_sync(0xffffffffu, v.id, o)};
}
__global__ void top_rows_kernel(const float* src, int64_t lds, int64_t src_rows, int64_t n, const int32_t* rows,
                                const NoiseKey* keys, int w, int32_t* ids, float* vals, float* lse, int* err) {
  TANDEM_GRID_DEPENDENCY();
  const int64_t i = blockIdx.x;
  int32_t* out_id = ids + i * w;
  float* out_val = vals + i * w;
  const int32_t r = rows[i];
  if (r < 0 || r >= src_rows) {  // the caller's bug: reported, nothing read
    if (threadIdx.x == 0) {
      atomicOr(err, static_cast<int>(dev::kErrVerify));
      for (int j = 0; j < w; ++j) out_id[j] = -1, out_val[j] = 0.0f;
      lse[2 * i] = lse[2 * i + 1] = 0.0f;
    }
    return;
  }
  const float* x = src + static_cast<int64_t>(r) * lds;
  int found = 0;
  if (!keys) {
    ByValue prev{0, kNoId};
    float mx = 0.0f;  // the row's largest value (every thread has it)
    for (; found < w; ++found) {
      ByValue best{0, kNoId};
      for (int64_t v = threadIdx.x; v < n; v += kT) {
        const ByValue e{dev::rank_key(x[v]), static_cast<int32_t>(v)};
        if (e.key == dev::kNegInfKey || (prev.valid() && !before(prev, e))) continue;
        best = dev::pick(best, e);
      }
      best = dev::block_best<kT>(best);
      // Nothing possible, or a +inf logit: no children (the host's rule).
      if (!best.valid() || (found == 0 && x[best.id] == INFINITY)) break;
      if (found == 0) mx = x[best.id];
      if (threadIdx.x == 0) out_id[found] = best.id, out_val[found] = x[best.id];
      prev = best;
    }
    // log Σ exp(x - max) over the possible values: exp_nonpos's terms summed in double.
    double z = 0.0;
    if (found > 0)
      for (int64_t v = threadIdx.x; v < n; v += kT)
        if (x[v] > -INFINITY) z += static_cast<double>(exp_nonpos(x[v] - mx));
    z = dev::block_sum_double<kT>(z);
    if (threadIdx.x == 0) {
      // As two floats (hi + lo): the host's scores keep double precision.
      const double l = found > 0 ? log(z) : 0.0;
      const float hi = static_cast<float>(l);
      lse[2 * i] = hi;
      lse[2 * i + 1] = static_cast<float>(l - static_cast<double>(hi));
    }
  } else {
    const NoiseKey k = keys[i];
    const uint64_t seed = static_cast<uint64_t>(k.seed_lo) | (static_cast<uint64_t>(k.seed_hi) << 32);
    const auto position = static_cast<int64_t>(static_cast<uint64_t>(k.pos_lo) | (static_cast<uint64_t>(k.pos_hi) << 32));
    ByGumbel prev{0.0, 0.0f, kNoId};
    for (; found < w; ++found) {
      ByGumbel best{INFINITY, 0.0f, kNoId};
      for (int64_t v = threadIdx.x; v < n; v += kT) {
        const float p = x[v];
        if (!(p > 0.0f)) continue;
        const double u = dev::noise_uniform(seed, position, static_cast<int32_t>(v));
        // E = -log u >= 1 - u: a token whose lower bound already loses to this thread's
        // best needs no logarithm.
        if (best.valid() && 1.0 - u > best.key * static_cast<double>(p)) continue;
        const ByGumbel e{-dev::portable_log(u) / static_cast<double>(p), p, static_cast<int32_t>(v)};
        if (prev.valid() && !before(prev, e)) continue;
        best = dev::pick(best, e);
      }
      best = dev::block_best<kT>(best);
      if (!best.valid()) break;
      if (threadIdx.x == 0) out_id[found] = best.id, out_val[found] = best.p;
      prev = best;
    }
    if (threadIdx.x == 0) lse[2 * i] = lse[2 * i + 1] = 0.0f;
  }
  if (threadIdx.x == 0)
    for (int j = found; j < w; ++j) out_id[j] = -1, out_val[j] = 0.0f;
}

}  // namespace

void ops::top_rows(Stream s, const float* src, int64_t lds, int64_t src_rows, int64_t vocab, const int32_t* rows,
                   int64_t n_rows, const NoiseKey* keys, int w, int32_t* ids, float* vals, float* lse, int* err) {
  if (n_rows == 0 || w <= 0) return;
  TANDEM_LAUNCH(top_rows_kernel, static_cast<unsigned>(n_rows), kT, 0, static_cast<cudaStream_t>(s))
  (src, lds, src_rows, vocab, rows, keys, w, ids, vals, lse, err);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
