// Logprobs of committed tokens on the device (engine/sampling/logprobs.hpp token_logprobs):
// for each listed row, the chosen token's logprob and the n_top most likely tokens with
// theirs, so that a request asking for logprobs is decoded on the device like any other and
// only 1 + 2·n_top numbers per token cross to the host, instead of its row of logits.
//   * greedy rows: the log-softmax of the penalised logits w at temperature 1, over the
//     whole vocabulary (x − max − log Σ exp_nonpos(x − max): the host's terms, summed in
//     double in another fixed order); +inf logits share the mass (the softmax's limit);
//   * sampled rows: log p of the final distribution p (make_probs), its tokens in p's order,
//     then what the cuts left out, in the order of w, at -inf.
// Both lists: larger first, ties to the lower id, exactly the host's lists.
//
// A row's vocabulary is cut into segments of kLogprobSegment tokens, each a block of its own
// (a 152k vocabulary: 38 blocks a row, instead of one block reading the row n_top times):
//   1. lp_segments: each segment's n_top best tokens and the largest w;
//   2. lp_sums (greedy rows): each segment's Σ exp_nonpos(w − max), the max over all segments;
//   3. lp_merge, one block a row: the n_top best of the segments' candidates, the segments'
//      sums added in segment order, the logprobs.
// Each candidate list comes from rounds that take the best token strictly after the last
// round's in a total order (no list of chosen ones to search), so the result is the same on
// every run, whatever order threads and blocks run in.
#include <cmath>

#include "kernels/cuda/block_best.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.hpp"
#include "kernels/device_decode.hpp"
#include "kernels/exp_nonpos.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kT = 256;
constexpr int kWarps = kT / dev::kWarp;
constexpr int32_t kNoId = 0x7fffffff;

// A token's place in a row's list: a sampled row lists the distribution's tokens (class 1,
// by p) before the others (class 0, by w); a greedy row has one class, by w. Larger key
// first, then the lower id.
struct Ranked {
  long long key;
  int32_t id;
  __device__ bool valid() const { return id != kNoId; }
};
__device__ __forceinline__ bool before(Ranked a, Ranked b) { return a.key > b.key || (a.key == b.key && a.id < b.id); }
__device__ __forceinline__ Ranked shfl(Ranked v, int o) {
  return {__shfl_xor_sync(0xffffffffu, v.key, o), __shfl_xor_sync(0xffffffffu, v.id, o)};
}
__device__ __forceinline__ Ranked rank_of(const float* w, const float* p, int32_t v) {
  if (p && p[v] > 0.0f) return {(1ll << 33) + dev::rank_key(p[v]), v};
  return {static_cast<long long>(dev::rank_key(w[v])), v};
}
__device__ float block_max(float v) {
  __shared__ float sh[kWarps];
  v = dev::warp_max(v);
  if (threadIdx.x % dev::kWarp == 0) sh[threadIdx.x / dev::kWarp] = v;
  __syncthreads();
  float r = sh[0];
  for (int i = 1; i < kWarps; ++i) r = dev::fmax2(r, sh[i]);
  __syncthreads();
  return r;
}

struct RowRefs {
  const float* w;
  const float* p;  // null: a greedy row
};
// The listed row's w and p, or false (and the error bit, once per row) when an index lies
// outside them: the caller's bug.
__device__ bool row_refs(const float* w, int64_t ldw, int64_t w_rows, const float* p, int64_t ldp, int64_t p_rows,
                         const int32_t* rows, int64_t i, bool report, int* err, RowRefs* out) {
  const int32_t wr = rows[2 * i], pr = rows[2 * i + 1];
  if (wr < 0 || wr >= w_rows || pr < -1 || pr >= p_rows || (pr >= 0 && !p)) {
    if (report && threadIdx.x == 0) atomicOr(err, static_cast<int>(dev::kErrVerify));
    return false;
  }
  out->w = w + wr * ldw;
  out->p = pr >= 0 ? p + pr * ldp : nullptr;
  return true;
}

// The largest of the segments' maxima (exact in any order).
__device__ float row_max(const float* seg_max, int64_t i, int S) {
  float m = -INFINITY;
  for (int s = 0; s < S; ++s) m = dev::fmax2(m, seg_max[i * S + s]);
  return m;
}

__global__ void lp_segments_kernel(const float* w, int64_t ldw, int64_t w_rows, const float* p, int64_t ldp,
                                   int64_t p_rows, int64_t n, const int32_t* rows, int n_top, int32_t* cand,
                                   float* seg_max, int* err) {
  TANDEM_GRID_DEPENDENCY();
  const int64_t i = blockIdx.y;
  const int s = static_cast<int>(blockIdx.x), S = static_cast<int>(gridDim.x);
  int32_t* out = cand + (i * S + s) * n_top;
  RowRefs r;
  if (!row_refs(w, ldw, w_rows, p, ldp, p_rows, rows, i, s == 0, err, &r)) {
    if (threadIdx.x == 0) {
      for (int j = 0; j < n_top; ++j) out[j] = -1;
      seg_max[i * S + s] = -INFINITY;
    }
    return;
  }
  const int64_t lo = static_cast<int64_t>(s) * kLogprobSegment;
  const int64_t hi = lo + kLogprobSegment < n ? lo + kLogprobSegment : n;
  float mx = -INFINITY;
  for (int64_t v = lo + threadIdx.x; v < hi; v += kT) mx = dev::fmax2(mx, r.w[v]);
  mx = block_max(mx);
  if (threadIdx.x == 0) seg_max[i * S + s] = mx;
  Ranked prev{0, kNoId};
  int j = 0;
  for (; j < n_top; ++j) {
    Ranked best{0, kNoId};
    for (int64_t v = lo + threadIdx.x; v < hi; v += kT) {
      const Ranked e = rank_of(r.w, r.p, static_cast<int32_t>(v));
      if (prev.valid() && !before(prev, e)) continue;
      best = dev::pick(best, e);
    }
    best = dev::block_best<kT>(best);
    if (!best.valid()) break;
    if (threadIdx.x == 0) out[j] = best.id;
    prev = best;
  }
  if (threadIdx.x == 0)
    for (; j < n_top; ++j) out[j] = -1;
}

// Greedy rows: the segment's share of the normaliser (+inf maxima: its count of +inf).
__global__ void lp_sums_kernel(const float* w, int64_t ldw, int64_t w_rows, const float* p, int64_t ldp,
                               int64_t p_rows, int64_t n, const int32_t* rows, const float* seg_max, double* sums,
                               int* err) {
  TANDEM_GRID_DEPENDENCY();
  const int64_t i = blockIdx.y;
  const int s = static_cast<int>(blockIdx.x), S = static_cast<int>(gridDim.x);
  RowRefs r;
  if (!row_refs(w, ldw, w_rows, p, ldp, p_rows, rows, i, false, err, &r) || r.p) {
    if (threadIdx.x == 0) sums[i * S + s] = 0.0;
    return;
  }
  const float m = row_max(seg_max, i, S);
  const int64_t lo = static_cast<int64_t>(s) * kLogprobSegment;
  const int64_t hi = lo + kLogprobSegment < n ? lo + kLogprobSegment : n;
  double z = 0.0;
  if (m == INFINITY) {
    for (int64_t v = lo + threadIdx.x; v < hi; v += kT) z += r.w[v] == INFINITY ? 1.0 : 0.0;
  } else if (m > -INFINITY) {
    for (int64_t v = lo + threadIdx.x; v < hi; v += kT) z += static_cast<double>(exp_nonpos(r.w[v] - m));
  }
  z = dev::block_sum_double<kT>(z);
  if (threadIdx.x == 0) sums[i * S + s] = z;
}

// A token's logprob in its row: log p (sampled), or w − lse (greedy; lse over the +inf
// logits when the max is +inf).
struct Lse {
  double lse;
  bool pos_inf;
};
__device__ __forceinline__ float logprob_of(const RowRefs& r, const Lse& l, int32_t v) {
  if (r.p) {
    const float q = r.p[v];
    return q > 0.0f ? static_cast<float>(log(static_cast<double>(q))) : -INFINITY;
  }
  const float x = r.w[v];
  if (l.pos_inf) return x == INFINITY ? static_cast<float>(-l.lse) : -INFINITY;
  return x == -INFINITY ? -INFINITY : static_cast<float>(static_cast<double>(x) - l.lse);
}

__global__ void lp_merge_kernel(const float* w, int64_t ldw, int64_t w_rows, const float* p, int64_t ldp,
                                int64_t p_rows, int64_t n, const int32_t* rows, const int32_t* chosen, int n_top,
                                int S, const int32_t* cand, const float* seg_max, const double* sums, float* chosen_lp,
                                int32_t* ids, float* lps, int* err) {
  TANDEM_GRID_DEPENDENCY();
  const int64_t i = blockIdx.x;
  RowRefs r;
  const int32_t c = chosen[i];
  const bool ok = row_refs(w, ldw, w_rows, p, ldp, p_rows, rows, i, false, err, &r);
  if (!ok || c < 0 || c >= n) {
    if (threadIdx.x == 0) {
      if (ok) atomicOr(err, static_cast<int>(dev::kErrVerify));
      chosen_lp[i] = NAN;
      for (int j = 0; j < n_top; ++j) ids[i * n_top + j] = -1, lps[i * n_top + j] = NAN;
    }
    return;
  }
  Lse l{0.0, false};
  if (!r.p) {
    const float m = row_max(seg_max, i, S);
    double z = 0.0;
    for (int s = 0; s < S; ++s) z += sums[i * S + s];  // segment order
    l.pos_inf = m == INFINITY;
    l.lse = l.pos_inf ? log(z) : static_cast<double>(m) + log(z);
  }
  if (threadIdx.x == 0) chosen_lp[i] = logprob_of(r, l, c);
  const int32_t* cs = cand + i * S * n_top;
  const int m_cand = S * n_top;
  Ranked prev{0, kNoId};
  for (int j = 0; j < n_top; ++j) {
    Ranked best{0, kNoId};
    // (Once the candidates run out, the rest of the list is empty.)
    for (int k = static_cast<int>(threadIdx.x); k < m_cand && (j == 0 || prev.valid()); k += kT) {
      const int32_t v = cs[k];
      if (v < 0) continue;
      const Ranked e = rank_of(r.w, r.p, v);
      if (prev.valid() && !before(prev, e)) continue;
      best = dev::pick(best, e);
    }
    best = dev::block_best<kT>(best);
    if (threadIdx.x == 0) {
      ids[i * n_top + j] = best.valid() ? best.id : -1;
      lps[i * n_top + j] = best.valid() ? logprob_of(r, l, best.id) : NAN;
    }
    prev = best;
  }
}

}  // namespace

void ops::logprob_rows(Stream s, const float* w, int64_t ldw, int64_t w_rows, const float* p, int64_t ldp,
                       int64_t p_rows, int64_t vocab, const int32_t* rows, const int32_t* chosen, int64_t m,
                       int n_top, int32_t* scratch, float* chosen_lp, int32_t* ids, float* lps, int* err) {
  if (m == 0 || vocab == 0) return;
  const int S = static_cast<int>((vocab + kLogprobSegment - 1) / kLogprobSegment);
  // scratch: candidates [m, S, n_top] | sums [m, S] (8-byte aligned) | segment maxima [m, S]
  const int64_t cand_words = m * S * n_top;
  int32_t* cand = scratch;
  double* sums = reinterpret_cast<double*>(scratch + cand_words + (cand_words & 1));
  float* seg_max = reinterpret_cast<float*>(sums + m * S);
  const auto st = static_cast<cudaStream_t>(s);
  const dim3 grid(static_cast<unsigned>(S), static_cast<unsigned>(m));
  TANDEM_LAUNCH(lp_segments_kernel, grid, kT, 0, st)(w, ldw, w_rows, p, ldp, p_rows, vocab, rows, n_top, cand, seg_max, err);
  TANDEM_LAUNCH(lp_sums_kernel, grid, kT, 0, st)(w, ldw, w_rows, p, ldp, p_rows, vocab, rows, seg_max, sums, err);
  TANDEM_LAUNCH(lp_merge_kernel, static_cast<unsigned>(m), kT, 0, st)
  (w, ldw, w_rows, p, ldp, p_rows, vocab, rows, chosen, n_top, S, cand, seg_max, sums, chosen_lp, ids, lps, err);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
