// Sampled decoding on the device: the engine's make_distribution row by row (make_probs),
// one draw per row (sample_probs) and speculative verification of a whole batch
// (verify_sampled), so that a sampled request's logits never leave the device: only token
// ids, accepted counts and a confidence per draft row cross to the host. Rejection-mode
// token trees too: a node's children drawn without replacement (draw_rows), and the walk
// with recursive rejection over each visited node's children (verify_sampled with parents).
//
// One block of kT threads per row (or per sequence). Everything a decision depends on is
// computed deterministically, whatever the order threads run in:
//   * maxima and argmaxes on order-preserving integer keys (ties to the lowest id);
//   * probability masses that select tokens (top-p, draws) in 2^-44 fixed point, summed
//     with integer atomics or in a fixed order: integer addition is associative, so the
//     sums are exact and the same on every run (a float atomicAdd would not be);
//   * the normaliser of the kept tokens in double, in a fixed tree order.
// The thresholds of top-k and top-p come from a radix select over the keys (4 passes of
// 8 bits, histograms in shared memory), not from a sort; ties at a threshold are settled
// in id order as the CPU's sort by (value desc, id asc) does.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/noise.cuh"
#include "kernels/exp_nonpos.hpp"
#include "kernels/cuda/ops.hpp"
#include "kernels/device_decode.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

using ull = unsigned long long;
constexpr int kT = 256;
constexpr int kWarps = kT / dev::kWarp;
// Fixed-point masses: a weight in [0, 1] times 2^44, so a vocabulary of up to 2^19 tokens
// sums below 2^63.
constexpr double kFxScale = 17592186044416.0;  // 2^44

__device__ __forceinline__ ull fx(double w) { return w > 0.0 ? static_cast<ull>(w * kFxScale) : 0ull; }

// The float of a rank key (dev::rank_key).
__device__ __forceinline__ float from_key(int32_t k) {
  return k >= 0 ? __int_as_float(k) : __uint_as_float(static_cast<uint32_t>(-k) | 0x80000000u);
}
// The same order as an unsigned key (for the radix select).
__device__ __forceinline__ uint32_t ukey(float f) { return static_cast<uint32_t>(dev::rank_key(f)) ^ 0x80000000u; }
__device__ __forceinline__ float scrub_nan(float x) {
  return (__float_as_uint(x) & 0x7FFFFFFFu) > 0x7F800000u ? -INFINITY : x;
}

// exp(x) for x <= 0, the host sampler's own definition (kernels/exp_nonpos.hpp): the CPU's
// weights, bit for bit.
using kernels::exp_nonpos;

// ---- block-wide reductions (every thread gets the result; fixed order) ------------------------

struct KeyId {
  int32_t key, id;
};
__device__ __forceinline__ KeyId better(KeyId a, KeyId b) {
  return (b.key > a.key || (b.key == a.key && b.id < a.id)) ? b : a;
}
__device__ KeyId block_argmax(KeyId v) {
  __shared__ KeyId sh[kWarps];
  for (int o = 16; o >= 1; o /= 2)
    v = better(v, KeyId{__shfl_xor_sync(0xffffffffu, v.key, o), __shfl_xor_sync(0xffffffffu, v.id, o)});
  if (threadIdx.x % dev::kWarp == 0) sh[threadIdx.x / dev::kWarp] = v;
  __syncthreads();
  KeyId r = sh[0];
  for (int w = 1; w < kWarps; ++w) r = better(r, sh[w]);
  __syncthreads();  // sh may be written again by the next call
  return r;
}
__device__ ull block_sum_ull(ull v) {
  __shared__ ull sh[kWarps];
  for (int o = 16; o >= 1; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % dev::kWarp == 0) sh[threadIdx.x / dev::kWarp] = v;
  __syncthreads();
  ull r = 0;
  for (int w = 0; w < kWarps; ++w) r += sh[w];
  __syncthreads();
  return r;
}

// ---- selection ----------------------------------------------------------------------------------

// The weights a selection runs over: key(v) (larger first) and the weight of token v.
// counts(v): whether the token takes part (may be kept); drop(v) cuts it.
struct ZCount {  // top-k over z = (x - m) / t: every possible token (z > -inf) weighs 1
  float* z;
  __device__ uint32_t key(int64_t v) const { return ukey(z[v]); }
  __device__ bool counts(int64_t v) const { return z[v] > -INFINITY; }
  __device__ ull weight(int64_t v) const { return counts(v) ? 1ull : 0ull; }
  __device__ void drop(int64_t v) const { z[v] = -INFINITY; }
};
struct EMass {  // top-p over the weights e = exp(z): a token weighs e in fixed point
  float* e;
  __device__ uint32_t key(int64_t v) const { return __float_as_uint(e[v]); }  // e >= 0: bits are monotone
  __device__ bool counts(int64_t v) const { return e[v] > 0.0f; }
  __device__ ull weight(int64_t v) const { return fx(e[v]); }
  __device__ void drop(int64_t v) const { e[v] = 0.0f; }
};

struct Selected {
  uint32_t key;  // the threshold key K
  ull above;     // the weight of the tokens with a key above K
};
// Radix select, largest keys first: the key K with weight(key > K) < target <= weight(key >= K)
// (target in 1..total weight).
template <class W>
__device__ Selected radix_select(int64_t n, const W& w, ull target) {
  __shared__ ull hist[256];
  __shared__ uint32_t s_prefix;
  __shared__ ull s_above;
  if (threadIdx.x == 0) s_prefix = 0, s_above = 0;
  uint32_t mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kT) hist[b] = 0;
    __syncthreads();
    const uint32_t prefix = s_prefix;
    for (int64_t v = threadIdx.x; v < n; v += kT) {
      const ull wt = w.weight(v);
      const uint32_t k = w.key(v);
      if (wt != 0 && (k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255u], wt);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      ull cum = s_above;
      int b = 255;
      for (; b > 0; --b) {
        if (cum + hist[b] >= target) break;
        cum += hist[b];
      }
      s_above = cum;
      s_prefix = prefix | (static_cast<uint32_t>(b) << shift);
    }
    mask |= 0xFFu << shift;
    __syncthreads();
  }
  const Selected r{s_prefix, s_above};
  __syncthreads();
  return r;
}

// The ids a thread walks when the order of ids matters (ties, draws): a contiguous range.
struct Range {
  int64_t lo, hi;
};
__device__ __forceinline__ Range my_range(int64_t n) {
  const int64_t chunk = (n + kT - 1) / kT;
  const int64_t lo = threadIdx.x * chunk;
  return {lo < n ? lo : n, lo + chunk < n ? lo + chunk : n};
}
// Each thread's c in thread order: the sum of the c of the threads before it (exact
// integers), and the block's total.
__device__ ull block_exclusive_scan(ull c, ull& total) {
  __shared__ ull cnt[kT];
  __shared__ ull s_total;
  cnt[threadIdx.x] = c;
  __syncthreads();
  if (threadIdx.x == 0) {
    ull run = 0;
    for (int t = 0; t < kT; ++t) {
      const ull x = cnt[t];
      cnt[t] = run;
      run += x;
    }
    s_total = run;
  }
  __syncthreads();
  const ull before = cnt[threadIdx.x];
  total = s_total;
  __syncthreads();  // cnt may be written again by the next call
  return before;
}

// After a selection: drops every counted token below K, and of those equal to K keeps the
// first `keep` in id order (each thread walks a contiguous range of ids, so the ranks are
// an exclusive scan of per-thread counts).
template <class W>
__device__ void cut_below(int64_t n, const W& w, uint32_t K, ull keep) {
  const Range r = my_range(n);
  ull c = 0;
  for (int64_t v = r.lo; v < r.hi; ++v) c += (w.counts(v) && w.key(v) == K) ? 1ull : 0ull;
  ull total;
  ull rank = block_exclusive_scan(c, total);
  for (int64_t v = r.lo; v < r.hi; ++v) {
    if (!w.counts(v)) continue;
    const uint32_t k = w.key(v);
    if (k < K) {
      w.drop(v);
    } else if (k == K) {
      if (rank >= keep) w.drop(v);
      ++rank;
    }
  }
  __syncthreads();
}

// A draw by inverse CDF in id order over fixed-point weights: the first token whose
// cumulative weight exceeds u·Z. -1 when Z == 0.
struct ProbWeight {
  const float* p;
  __device__ ull operator()(int64_t v) const { return fx(p[v]); }
};
struct ResidualWeight {  // max(0, p − q); q a row, or the point mass on `x`
  const float* p;
  const float* q;
  int64_t q_cols;
  int32_t x;
  __device__ ull operator()(int64_t v) const {
    const double qv = q ? (v < q_cols ? static_cast<double>(q[v]) : 0.0) : (v == x ? 1.0 : 0.0);
    return fx(static_cast<double>(p[v]) - qv);
  }
};
template <class W>
__device__ int32_t block_draw(int64_t n, const W& w, double u) {
  __shared__ int32_t s_id;
  const Range r = my_range(n);
  ull c = 0;
  for (int64_t v = r.lo; v < r.hi; ++v) c += w(v);
  if (threadIdx.x == 0) s_id = -1;  // ordered before the finder's write by the scan's barriers
  ull total;
  const ull start = block_exclusive_scan(c, total);
  if (total != 0) {
    ull target = static_cast<ull>(u * static_cast<double>(total));
    if (target >= total) target = total - 1;
    if (start <= target && target < start + c) {
      ull acc = start;
      for (int64_t v = r.lo; v < r.hi; ++v) {
        acc += w(v);
        if (acc > target) {
          s_id = static_cast<int32_t>(v);
          break;
        }
      }
    }
  }
  __syncthreads();
  const int32_t id = s_id;
  __syncthreads();
  return id;
}

// gumbel_argmax (engine/sampling/gumbel.cpp) over a probs row: argmin -log u(position, v) / p_v
// over p_v > 0; equal keys go to the larger p, then the lower id (the CPU's list order).
struct Gumbel {
  double key;
  float p;
  int32_t id;
};
__device__ __forceinline__ Gumbel gbetter(Gumbel a, Gumbel b) {
  if (b.key != a.key) return b.key < a.key ? b : a;
  if (b.p != a.p) return b.p > a.p ? b : a;
  return b.id < a.id ? b : a;
}
__device__ int32_t block_coupled(const float* p, int64_t n, uint64_t seed, int64_t position) {
  __shared__ Gumbel sh[kWarps];
  Gumbel best{INFINITY, 0.0f, 0x7fffffff};
  for (int64_t v = threadIdx.x; v < n; v += kT) {
    const float pv = p[v];
    if (!(pv > 0.0f)) continue;
    const double u = dev::noise_uniform(seed, position, static_cast<int32_t>(v));
    best = gbetter(best, Gumbel{-dev::portable_log(u) / static_cast<double>(pv), pv, static_cast<int32_t>(v)});
  }
  for (int o = 16; o >= 1; o /= 2)
    best = gbetter(best, Gumbel{__shfl_xor_sync(0xffffffffu, best.key, o), __shfl_xor_sync(0xffffffffu, best.p, o),
                                __shfl_xor_sync(0xffffffffu, best.id, o)});
  if (threadIdx.x % dev::kWarp == 0) sh[threadIdx.x / dev::kWarp] = best;
  __syncthreads();
  Gumbel r = sh[0];
  for (int w = 1; w < kWarps; ++w) r = gbetter(r, sh[w]);
  __syncthreads();
  return r.id == 0x7fffffff ? -1 : r.id;
}

__device__ __forceinline__ uint64_t seed_of(const NoiseKey& k) {
  return static_cast<uint64_t>(k.seed_lo) | (static_cast<uint64_t>(k.seed_hi) << 32);
}
__device__ __forceinline__ int64_t position_of(const NoiseKey& k) {
  return static_cast<int64_t>(static_cast<uint64_t>(k.pos_lo) | (static_cast<uint64_t>(k.pos_hi) << 32));
}

// ---- make_probs ---------------------------------------------------------------------------------

__global__ void make_probs_kernel(const float* logits, int64_t ldl, float* probs, int64_t ldp, int64_t n,
                                  const RowSampling* params, const int32_t* pen, int32_t* top, float* conf,
                                  const int32_t* row_of, int64_t logits_rows, int* err) {
  TANDEM_GRID_DEPENDENCY();
  const int64_t r = blockIdx.x;
  const RowSampling P = params[r];
  if (P.skip) {  // not this call's row
    if (threadIdx.x == 0) top[r] = -2;
    return;
  }
  const int64_t src = row_of ? row_of[r] : r;
  if (row_of && (src < 0 || src >= logits_rows)) {  // the caller's bug: reported, nothing read
    if (threadIdx.x == 0) top[r] = -1, conf[r] = 0.0f, atomicOr(err, static_cast<int>(dev::kErrVerify));
    return;
  }
  const float* x = logits + src * ldl;
  float* w = probs + r * ldp;

  // NaN → -inf, then the penalties and the logit bias (each entry a distinct token:
  // engine/sampling/sampler.cpp, device_rows.cpp).
  for (int64_t v = threadIdx.x; v < n; v += kT) w[v] = scrub_nan(x[v]);
  __syncthreads();
  for (int32_t e = P.pen_begin + static_cast<int32_t>(threadIdx.x); e < P.pen_end; e += kT) {
    const int32_t* entry = pen + static_cast<int64_t>(kPenaltyEntryWords) * e;
    const int32_t tok = entry[0];
    const uint32_t c = static_cast<uint32_t>(entry[1]);
    const float bias = __int_as_float(entry[2]);
    if (tok < 0 || tok >= n) continue;
    float y = w[tok];
    if (c & kPenaltyInWindow) y = y > 0.0f ? y / P.repetition_penalty : y * P.repetition_penalty;
    const uint32_t occurrences = c & ~kPenaltyInWindow;
    if (occurrences > 0) y -= static_cast<float>(occurrences) * P.frequency_penalty + P.presence_penalty;
    if (bias != 0.0f) y += bias;
    w[tok] = y;
  }
  __syncthreads();
  if (P.penalised_only) {  // the penalised logits are what is asked for (logprob_rows)
    if (threadIdx.x == 0) top[r] = -2, conf[r] = 0.0f;
    return;
  }

  KeyId mx{dev::kNegInfKey, 0x7fffffff};
  for (int64_t v = threadIdx.x; v < n; v += kT) mx = better(mx, KeyId{dev::rank_key(w[v]), static_cast<int32_t>(v)});
  mx = block_argmax(mx);
  if (mx.key == dev::kNegInfKey) {  // nothing possible
    for (int64_t v = threadIdx.x; v < n; v += kT) w[v] = 0.0f;
    if (threadIdx.x == 0) top[r] = -1, conf[r] = 0.0f;
    return;
  }
  if (P.temperature <= 0.0f) {
    // Greedy: a point mass on the penalised argmax; the confidence is the raw logits'
    // largest softmax probability at temperature 1 (the draft's p_min test).
    KeyId raw{dev::kNegInfKey, 0};
    for (int64_t v = threadIdx.x; v < n; v += kT) raw = better(raw, KeyId{dev::rank_key(x[v]), static_cast<int32_t>(v)});
    raw = block_argmax(raw);
    const float rm = from_key(raw.key);
    double z = 0.0;
    for (int64_t v = threadIdx.x; v < n; v += kT) z += exp(static_cast<double>(scrub_nan(x[v]) - rm));
    z = dev::block_sum_double<kT>(z);
    for (int64_t v = threadIdx.x; v < n; v += kT) w[v] = v == mx.id ? 1.0f : 0.0f;
    if (threadIdx.x == 0) top[r] = mx.id, conf[r] = static_cast<float>(1.0 / z);
    return;
  }

  // Temperature after subtracting the max: z = (x - m) / t in [-inf, 0]. +inf logits: the
  // softmax limit, uniform over them.
  float m = from_key(mx.key);
  const bool pos_inf = m == INFINITY;
  if (pos_inf) m = 0.0f;
  const float t = P.temperature;
  for (int64_t v = threadIdx.x; v < n; v += kT) {
    const float y = pos_inf ? (w[v] == INFINITY ? 0.0f : -INFINITY) : w[v];
    w[v] = (y - m) / t;
  }
  __syncthreads();

  // top-k over z: cuts only when more than k tokens are possible.
  if (P.top_k > 0 && P.top_k < n) {
    const ZCount zc{w};
    ull possible = 0;
    for (int64_t v = threadIdx.x; v < n; v += kT) possible += zc.weight(v);
    possible = block_sum_ull(possible);
    if (possible > static_cast<ull>(P.top_k)) {
      const Selected s = radix_select(n, zc, static_cast<ull>(P.top_k));
      cut_below(n, zc, s.key, static_cast<ull>(P.top_k) - s.above);
    }
  }

  // Softmax weights (the max gets exactly 1), then top-p over their fixed-point masses.
  for (int64_t v = threadIdx.x; v < n; v += kT) w[v] = exp_nonpos(w[v]);
  __syncthreads();
  const EMass em{w};
  if (P.top_p < 1.0f) {
    if (P.top_p <= 0.0f) {
      // Only the most likely token (the first of the CPU's order).
      KeyId b{dev::kNegInfKey, 0x7fffffff};
      for (int64_t v = threadIdx.x; v < n; v += kT) b = better(b, KeyId{dev::rank_key(w[v]), static_cast<int32_t>(v)});
      b = block_argmax(b);
      for (int64_t v = threadIdx.x; v < n; v += kT)
        if (v != b.id) w[v] = 0.0f;
      __syncthreads();
    } else {
      ull total = 0;
      for (int64_t v = threadIdx.x; v < n; v += kT) total += em.weight(v);
      total = block_sum_ull(total);
      double want = static_cast<double>(P.top_p) * static_cast<double>(total);
      ull target = static_cast<ull>(want);
      if (static_cast<double>(target) < want) ++target;  // the smallest prefix with mass >= top_p
      if (target < 1) target = 1;
      if (target > total) target = total;
      const Selected s = radix_select(n, em, target);
      const ull kmass = fx(__uint_as_float(s.key));
      const ull keep = kmass == 0 ? ~0ull : (target - s.above + kmass - 1) / kmass;
      cut_below(n, em, s.key, keep);
    }
  }
  // min-p: p >= min_p * p_max, i.e. e >= min_p (the max weight is 1).
  if (P.min_p > 0.0f) {
    const float thr = (P.min_p < 1.0f ? P.min_p : 1.0f) * 1.0f;
    for (int64_t v = threadIdx.x; v < n; v += kT)
      if (w[v] < thr) w[v] = 0.0f;
    __syncthreads();
  }

  // Renormalise the kept weights.
  double kept = 0.0;
  for (int64_t v = threadIdx.x; v < n; v += kT) kept += static_cast<double>(w[v]);
  kept = dev::block_sum_double<kT>(kept);
  for (int64_t v = threadIdx.x; v < n; v += kT) w[v] = static_cast<float>(static_cast<double>(w[v]) / kept);
  __syncthreads();
  KeyId b{dev::kNegInfKey, 0x7fffffff};
  for (int64_t v = threadIdx.x; v < n; v += kT) b = better(b, KeyId{dev::rank_key(w[v]), static_cast<int32_t>(v)});
  b = block_argmax(b);
  if (P.bias_mass > 0.0f) {
    // Tests: the verifier's fault injection (verify/verifier.hpp), on the device.
    KeyId s{dev::kNegInfKey, 0x7fffffff};
    for (int64_t v = threadIdx.x; v < n; v += kT)
      if (v != b.id && w[v] > 0.0f) s = better(s, KeyId{dev::rank_key(w[v]), static_cast<int32_t>(v)});
    s = block_argmax(s);
    if (threadIdx.x == 0 && s.key != dev::kNegInfKey) {
      const float moved = P.bias_mass < w[b.id] ? P.bias_mass : w[b.id];
      w[b.id] -= moved;
      w[s.id] += moved;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) top[r] = b.id, conf[r] = w[b.id];
}

__global__ void sample_probs_kernel(const float* probs, int64_t ldp, int64_t n, const int32_t* top,
                                    const NoiseKey* keys, int32_t tag, int coupled, int32_t* out) {
  TANDEM_GRID_DEPENDENCY();
  const int64_t r = blockIdx.x;
  if (top[r] < 0) {  // nothing possible, or a row make_probs skipped (its probs are stale)
    if (threadIdx.x == 0) out[r] = -1;
    return;
  }
  const float* p = probs + r * ldp;
  const NoiseKey k = keys[r];
  const int32_t id = coupled ? block_coupled(p, n, seed_of(k), position_of(k))
                             : block_draw(n, ProbWeight{p}, dev::noise_uniform(seed_of(k), position_of(k), tag));
  if (threadIdx.x == 0) out[r] = id;
}

// A sequence the verifier cannot take (rows, counts or drafts out of range: the caller's
// bug): no tokens, n_accepted -1, and the error bit unless it was set already (err null).
__device__ void refuse(int32_t* out, int max_drafts, int32_t* n_accepted, int* err) {
  if (threadIdx.x != 0) return;
  if (err) atomicOr(err, static_cast<int>(dev::kErrVerify));
  for (int i = 0; i <= max_drafts; ++i) out[i] = -1;
  *n_accepted = -1;
}

// One block per sequence: rejection sampling or coupled verification of its drafts.
__global__ void verify_sampled_kernel(const float* p, int64_t ldp, int64_t p_rows, int64_t n, const float* q,
                                      int64_t ldq, int64_t q_rows, int64_t q_cols, const SeqVerify* seqs,
                                      const int32_t* drafts, const int32_t* qr, int max_drafts, int32_t* n_accepted,
                                      int32_t* out_tokens, int* err) {
  TANDEM_GRID_DEPENDENCY();
  const int s = blockIdx.x;
  const SeqVerify S = seqs[s];
  const int32_t* dr = drafts + static_cast<int64_t>(s) * max_drafts;
  const int32_t* q_of = qr + static_cast<int64_t>(s) * max_drafts;
  int32_t* out = out_tokens + static_cast<int64_t>(s) * (max_drafts + 1);
  const int k = S.n_drafts;
  const bool with_q = S.with_q != 0 && !S.coupled;
  bool q_ok = !with_q || q != nullptr;
  if (with_q && q_ok && k >= 0 && k <= max_drafts)
    for (int i = 0; i < k; ++i) q_ok = q_ok && q_of[i] >= 0 && q_of[i] < q_rows;
  if (k < 0 || k > max_drafts || S.first_row < 0 || S.first_row + k >= p_rows || !q_ok) {
    refuse(out, max_drafts, n_accepted + s, err);
    return;
  }
  const uint64_t seed = seed_of(S.key);
  const int64_t pos0 = position_of(S.key);
  int a = 0;
  int32_t next = -1;
  for (; a <= k; ++a) {
    const float* prow = p + (S.first_row + a) * ldp;
    const int64_t pos = pos0 + a;
    if (a == k) {  // every draft accepted: the bonus token
      next = S.coupled ? block_coupled(prow, n, seed, pos)
                       : block_draw(n, ProbWeight{prow}, dev::noise_uniform(seed, pos, kTagSample));
      break;
    }
    const int32_t xd = dr[a];
    if (S.coupled) {
      const int32_t y = block_coupled(prow, n, seed, pos);
      if (y == xd) continue;
      next = y;
      break;
    }
    const float px = xd >= 0 && xd < n ? prow[xd] : 0.0f;
    const float* qrow = with_q ? q + q_of[a] * ldq : nullptr;
    const float qx = qrow ? (xd >= 0 && xd < q_cols ? qrow[xd] : 0.0f) : 1.0f;
    if (!(qx > 0.0f)) {  // a drafted token the draft could not have drawn: the caller's bug
      if (threadIdx.x == 0) atomicOr(err, static_cast<int>(dev::kErrVerify));
      next = -1;
      break;
    }
    const double u = dev::noise_uniform(seed, pos, kTagAccept);
    if (u * static_cast<double>(qx) < static_cast<double>(px)) continue;
    const double u2 = dev::noise_uniform(seed, pos, kTagSample);
    next = block_draw(n, ResidualWeight{prow, qrow, q_cols, xd}, u2);
    if (next < 0) next = block_draw(n, ProbWeight{prow}, u2);  // p == q: the residual has no mass
    break;
  }
  if (threadIdx.x == 0) {
    for (int i = 0; i < a && i < k; ++i) out[i] = dr[i];
    out[a < k ? a : k] = next;
    for (int i = (a < k ? a : k) + 1; i <= max_drafts; ++i) out[i] = -1;
    n_accepted[s] = a < k ? a : k;
  }
}

// ---- token trees, rejection mode ------------------------------------------------------------

constexpr int kMaxChildren = 64;  // kMaxTreeNodes: a node's children, a row's draws

// Whether v is one of the first `m` ids of `list` (shared memory; m is small).
__device__ __forceinline__ bool listed(const int32_t* list, int m, int64_t v) {
  for (int i = 0; i < m; ++i)
    if (list[i] == v) return true;
  return false;
}
struct LeftWeight {  // q's fixed-point weight, 0 for the m tokens drawn already
  const float* q;
  int64_t q_cols;
  const int32_t* taken;
  int m;
  __device__ ull operator()(int64_t v) const { return v < q_cols && !listed(taken, m, v) ? fx(q[v]) : 0ull; }
};

// One block per listed row: counts[i] draws without replacement from q's row.
__global__ void draw_rows_kernel(const float* q, int64_t ldq, int64_t q_rows, int64_t n, const int32_t* rows,
                                 const int32_t* counts, const NoiseKey* keys, const int32_t* tags, int w,
                                 int32_t* ids, float* vals, int* err) {
  TANDEM_GRID_DEPENDENCY();
  __shared__ int32_t drawn[kMaxChildren];
  const int64_t i = blockIdx.x;
  const int32_t r = rows[i];
  int m = counts[i] < w ? counts[i] : w;
  if (r < 0 || r >= q_rows || m < 0 || m > kMaxChildren) {
    if (threadIdx.x == 0) atomicOr(err, static_cast<int>(dev::kErrVerify));
    m = 0;
  }
  const float* qrow = q + static_cast<int64_t>(r < 0 ? 0 : r) * ldq;
  const NoiseKey k = keys[i];
  int j = 0;
  for (; j < m; ++j) {
    const int32_t id = block_draw(n, LeftWeight{qrow, n, drawn, j}, dev::noise_uniform(seed_of(k), position_of(k), tags[i] - j));
    if (id < 0) break;  // no weight left
    if (threadIdx.x == 0) drawn[j] = id, ids[i * w + j] = id, vals[i * w + j] = qrow[id];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    for (int c = j; c < w; ++c) ids[i * w + c] = -1, vals[i * w + c] = 0.0f;
}

// A row's weights W as a distribution: fx(W(v)) / S.
struct RowWeight {
  const float* w;
  __device__ ull operator()(int64_t v) const { return fx(w[v]); }
};
__device__ ull block_weight(const float* w, int64_t n) {
  ull t = 0;
  for (int64_t v = threadIdx.x; v < n; v += kT) t += fx(w[v]);
  return block_sum_ull(t);
}
// The residual after child x_j's rejection, max(0, W/S − q_j) rounded to float (q_j: q's
// weights but those of `tried`, over Qj), into W unless it has no mass. Returns its weight
// (S again when W stays).
__device__ ull residual_in_place(float* w, int64_t n, ull S, const float* q, int64_t q_cols, const int32_t* tried,
                                 int m, ull Qj) {
  auto value = [&](int64_t v) {
    const double pv = static_cast<double>(fx(w[v])) / static_cast<double>(S);
    const double qv = v < q_cols && !listed(tried, m, v) ? static_cast<double>(fx(q[v])) / static_cast<double>(Qj) : 0.0;
    return static_cast<float>(pv > qv ? pv - qv : 0.0);
  };
  ull t = 0;
  for (int64_t v = threadIdx.x; v < n; v += kT) t += fx(value(v));
  const ull S2 = block_sum_ull(t);
  if (S2 == 0) return S;
  // Each thread rewrites the ids it read: the new values are those just summed.
  for (int64_t v = threadIdx.x; v < n; v += kT) w[v] = value(v);
  __syncthreads();
  return S2;
}

// One block per sequence: its token tree walked from the root with recursive rejection over
// each visited node's children; p's rows of the visited nodes become the residuals.
__global__ void verify_tree_sampled_kernel(float* p, int64_t ldp, int64_t p_rows, int64_t n, const float* q, int64_t ldq,
                                           int64_t q_rows, int64_t q_cols, const SeqVerify* seqs, const int32_t* drafts,
                                           const int32_t* qr, const int32_t* parents, int max_drafts,
                                           int32_t* n_accepted, int32_t* out_tokens, int* err) {
  TANDEM_GRID_DEPENDENCY();
  __shared__ int32_t tried[kMaxChildren];
  const int s = blockIdx.x;
  const SeqVerify S = seqs[s];
  const int32_t* dr = drafts + static_cast<int64_t>(s) * max_drafts;
  const int32_t* q_of = qr + static_cast<int64_t>(s) * max_drafts;
  const int32_t* par = parents + static_cast<int64_t>(s) * max_drafts;
  int32_t* out = out_tokens + static_cast<int64_t>(s) * (max_drafts + 1);
  const int k = S.n_drafts;
  const bool with_q = S.with_q != 0;
  bool ok = k >= 0 && k <= max_drafts && S.first_row >= 0 && S.first_row + k < p_rows && !S.coupled &&
            (!with_q || q != nullptr);
  for (int c = 0; ok && c < k; ++c)
    ok = par[c] >= -1 && par[c] < c && (!with_q || (q_of[c] >= 0 && q_of[c] < q_rows));
  // Siblings share the q row they were drawn from.
  for (int c = 0; ok && with_q && c < k; ++c)
    for (int b = 0; b < c; ++b)
      if (par[b] == par[c] && q_of[b] != q_of[c]) ok = false;
  if (!ok) {
    refuse(out, max_drafts, n_accepted + s, err);
    return;
  }
  const uint64_t seed = seed_of(S.key);
  const int64_t pos0 = position_of(S.key);
  int node = -1, a = 0;
  int32_t next = -1;
  bool bad = false;
  for (;; ++a) {
    float* W = p + (S.first_row + node + 1) * ldp;
    const int64_t pos = pos0 + a;
    ull Sw = block_weight(W, n);
    int first = -1;
    for (int c = node + 1; c < k && first < 0; ++c)
      if (par[c] == node) first = c;
    if (first < 0) {  // a leaf: the bonus token
      next = block_draw(n, RowWeight{W}, dev::noise_uniform(seed, pos, kTagSample));
      break;
    }
    const float* qrow = with_q ? q + static_cast<int64_t>(q_of[first]) * ldq : nullptr;
    ull Qj = 0;
    if (with_q) {
      ull t = 0;
      for (int64_t v = threadIdx.x; v < q_cols && v < n; v += kT) t += fx(qrow[v]);
      Qj = block_sum_ull(t);
    }
    int chosen = -1, j = 0;
    for (int c = first; c < k; ++c) {
      if (par[c] != node) continue;
      const int32_t x = dr[c];
      const bool in_vocab = x >= 0 && x < n;
      const double px = in_vocab && Sw > 0 ? static_cast<double>(fx(W[x])) / static_cast<double>(Sw) : 0.0;
      double qx = 1.0;
      ull qx_fx = 0;
      if (with_q) {
        qx_fx = in_vocab && x < q_cols ? fx(qrow[x]) : 0ull;
        qx = Qj > 0 ? static_cast<double>(qx_fx) / static_cast<double>(Qj) : 0.0;
      }
      if (!(qx > 0.0) || j >= kMaxChildren) {  // a child the draft could not have drawn: the caller's bug
        if (threadIdx.x == 0) atomicOr(err, static_cast<int>(dev::kErrVerify));
        bad = true;
        break;
      }
      const double u = dev::noise_uniform(seed, pos, j == 0 ? kTagAccept : kTagSiblingAccept - j);
      if (u * qx < px) {
        chosen = c;
        break;
      }
      if (with_q) {
        Sw = residual_in_place(W, n, Sw, qrow, q_cols, tried, j, Qj);
        Qj -= qx_fx;
      } else if (in_vocab) {  // q_j = δ(x): x's weight dropped, unless nothing else is left
        const ull wx = fx(W[x]);
        __syncthreads();  // every thread has read W[x]
        if (wx > 0 && Sw > wx) {
          if (threadIdx.x == 0) W[x] = 0.0f;
          Sw -= wx;
        }
        __syncthreads();
      }
      if (threadIdx.x == 0) tried[j] = x;
      __syncthreads();
      ++j;
    }
    if (bad) break;
    if (chosen >= 0) {
      if (threadIdx.x == 0) out[a] = dr[chosen];
      node = chosen;
      continue;
    }
    next = block_draw(n, RowWeight{W}, dev::noise_uniform(seed, pos, kTagSample));
    break;
  }
  if (bad) {  // (its error bit is set)
    refuse(out, max_drafts, n_accepted + s, nullptr);
    return;
  }
  if (threadIdx.x == 0) {
    out[a] = next;
    for (int i = a + 1; i <= max_drafts; ++i) out[i] = -1;
    n_accepted[s] = a;
  }
}

}  // namespace

void ops::make_probs(Stream s, const float* logits, int64_t ldl, float* probs, int64_t ldp, int64_t n_rows,
                     int64_t vocab, const RowSampling* params, const int32_t* penalties, int32_t* top, float* conf,
                     const int32_t* row_of, int64_t logits_rows, int* err) {
  if (n_rows == 0) return;
  TANDEM_LAUNCH(make_probs_kernel, static_cast<unsigned>(n_rows), kT, 0, static_cast<cudaStream_t>(s))
  (logits, ldl, probs, ldp, vocab, params, penalties, top, conf, row_of, logits_rows, err);
}

void ops::sample_probs(Stream s, const float* probs, int64_t ldp, int64_t n_rows, int64_t vocab, const int32_t* top,
                       const NoiseKey* keys, int32_t tag, bool coupled, int32_t* out) {
  if (n_rows == 0) return;
  TANDEM_LAUNCH(sample_probs_kernel, static_cast<unsigned>(n_rows), kT, 0, static_cast<cudaStream_t>(s))
  (probs, ldp, vocab, top, keys, tag, coupled ? 1 : 0, out);
}

void ops::verify_sampled(Stream s, float* p, int64_t ldp, int64_t p_rows, int64_t vocab, const float* q,
                         int64_t ldq, int64_t q_rows, int64_t q_cols, const SeqVerify* seqs, const int32_t* drafts,
                         const int32_t* q_rows_of, int max_drafts, int n_seqs, int32_t* n_accepted,
                         int32_t* out_tokens, int* err, const int32_t* parents) {
  if (n_seqs == 0) return;
  if (parents) {
    TANDEM_LAUNCH(verify_tree_sampled_kernel, static_cast<unsigned>(n_seqs), kT, 0, static_cast<cudaStream_t>(s))
    (p, ldp, p_rows, vocab, q, ldq, q_rows, q_cols, seqs, drafts, q_rows_of, parents, max_drafts,
     n_accepted, out_tokens, err);
    return;
  }
  TANDEM_LAUNCH(verify_sampled_kernel, static_cast<unsigned>(n_seqs), kT, 0, static_cast<cudaStream_t>(s))
  (p, ldp, p_rows, vocab, q, ldq, q_rows, q_cols, seqs, drafts, q_rows_of, max_drafts, n_accepted, out_tokens, err);
}

void ops::draw_rows(Stream s, const float* q, int64_t ldq, int64_t q_rows, int64_t vocab, const int32_t* rows,
                    int64_t n_rows, const int32_t* counts, const NoiseKey* keys, const int32_t* tags, int w,
                    int32_t* ids, float* vals, int* err) {
  if (n_rows == 0 || w <= 0) return;
  TANDEM_LAUNCH(draw_rows_kernel, static_cast<unsigned>(n_rows), kT, 0, static_cast<cudaStream_t>(s))
  (q, ldq, q_rows, vocab, rows, counts, keys, tags, w, ids, vals, err);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
