// Paged causal attention, split into spans: one span is one (query token, kv head) pair
// over a contiguous range of cached positions, and yields for each query head of the GQA
// group the *unnormalized* streaming-softmax state (running max m, sum l, weighted sum of
// V rows acc). The driver (cpu_backend_attention.cpp) cuts long contexts into several
// spans that threads run in parallel (flash-decoding), then merges their states.
//
// Span implementations: attention_span_generic (this header, plain C++, one position at a
// time; compiled into attention_generic.cpp), attention_span_avx2_multi (tiles of 8
// positions, vector exp; attention_avx2.cpp) and the AVX-512 level's (tiles of 16;
// attention_avx512.cpp). The vector ones run several tokens of a sequence at once
// (walk_tiles below). All read the paged cache through the block table and must be called
// with positions whose slots the driver has validated.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/convert_impl.hpp"
#include "kernels/paged_attn_args.hpp"

namespace tandem::kernels::cpu {

// One call's arguments (kernels/paged_attn_args.hpp: built the same way by every backend).
using AttnArgs = PagedAttnArgs;

// Helpers are `static` (see attn_detail below for why).
static inline int attn_group(const AttnArgs& a) { return a.n_heads / a.n_kv_heads; }
static inline const int32_t* attn_table(const AttnArgs& a, int64_t t) {
  return a.block_table + static_cast<int64_t>(a.seq[t]) * a.bt_cols;
}
// Byte offset of kv head `kvh` of cached position j, given the sequence's block table.
static inline size_t attn_kv_offset(const AttnArgs& a, const int32_t* bt, int32_t j, int kvh) {
  const int64_t slot = static_cast<int64_t>(bt[j / a.block_size]) * a.block_size + j % a.block_size;
  return static_cast<size_t>(slot) * a.kv_row_bytes + static_cast<size_t>(kvh) * a.head_dim * (a.kv_f16 ? 2 : 4);
}

// The streaming-softmax state of one span for the `group` query heads of a kv head:
// m[g], l[g] and acc[g*head_dim ...], all owned by the caller.
struct AttnState {
  float* m;
  float* l;
  float* acc;
};

// Runs token t, kv head kvh over cached positions [lo, hi] (inclusive, lo <= hi).
void attention_span_generic(const AttnArgs& a, int64_t t, int kvh, int32_t lo, int32_t hi, AttnState st);
// n_tok tokens ts[] of one sequence, kv head kvh, each over [lo, his[m]] into sts[m]: the
// same results, bit for bit, as one call per token (n_tok = 1), with the cached rows read
// once for all.
void attention_span_avx2_multi(const AttnArgs& a, const int64_t* ts, const int32_t* his, int n_tok, int kvh,
                               int32_t lo, AttnState* sts);

// Everything below is `static`: this header is compiled into files of different ISAs, and
// an inline function with external linkage (or a std:: template instance such as
// std::fill) could be merged with an AVX2 copy by the linker and then run on an older CPU.
namespace attn_detail {

static inline void fill(float* p, size_t n, float v) {
  for (size_t i = 0; i < n; ++i) p[i] = v;
}

// One cached row (F16 or F32) as n floats; vectorized in the files compiled with F16C.
static inline void load_row(const uint8_t* src, bool f16, float* dst, int n) {
  if (f16) convert_detail::to_f32(reinterpret_cast<const uint16_t*>(src), dst, n);
  else std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(n));
}

// The plain one-position-at-a-time span: the reference the vector path is tested against.
// Scratch rows live on the stack (head_dim <= kMaxHeadDim, checked by the driver).
constexpr int kMaxHeadDim = 512;

static inline void span_generic(const AttnArgs& a, int64_t t, int kvh, int32_t lo, int32_t hi, AttnState st) {
  const int hd = a.head_dim, group = attn_group(a);
  float krow[kMaxHeadDim], vrow[kMaxHeadDim];
  const int32_t* bt = attn_table(a, t);
  const float* qh = a.q + t * a.ldq + static_cast<int64_t>(kvh) * group * hd;
  fill(st.acc, static_cast<size_t>(group) * hd, 0.0f);
  fill(st.m, static_cast<size_t>(group), -INFINITY);
  fill(st.l, static_cast<size_t>(group), 0.0f);
  for (int32_t j = lo; j <= hi; ++j) {
    const size_t off = attn_kv_offset(a, bt, j, kvh);
    load_row(a.k + off, a.kv_f16, krow, hd);
    load_row(a.v + off, a.kv_f16, vrow, hd);
    for (int g = 0; g < group; ++g) {
      const float* qg = qh + static_cast<int64_t>(g) * hd;
      float x = 0.0f;
      for (int i = 0; i < hd; ++i) x += qg[i] * krow[i];
      x *= a.scale;
      if (a.softcap > 0.0f) x = a.softcap * std::tanh(x / a.softcap);
      float* ag = st.acc + static_cast<size_t>(g) * hd;
      if (x > st.m[g]) {  // new running max: rescale what was accumulated so far
        const float r = std::exp(st.m[g] - x);
        st.l[g] *= r;
        for (int i = 0; i < hd; ++i) ag[i] *= r;
        st.m[g] = x;
      }
      const float e = std::exp(x - st.m[g]);
      st.l[g] += e;
      for (int i = 0; i < hd; ++i) ag[i] += e * vrow[i];
    }
  }
}

// The walk the vector spans share (attention_span_avx2_multi: tiles of 8; the AVX-512
// span: 16): n_tok tokens of one sequence over the positions from lo, each to his[m]. Per
// tile of kTile positions the rows up to the last token's end are loaded (F16 converted)
// into kt/vt once, the rest zeroed; then for each token still in range, with n of the
// tile's rows its own: tile(kt, V rows, n, token's q heads, token's state). In a token's last
// tile the rows past its end are zero, as a lone token's tile has them: K past n is masked
// by the tile function whatever it holds, V comes from vz, a copy with those rows zeroed,
// where another token's rows were loaded (0 * V could otherwise turn a -0 sum into +0).
// So a token's arithmetic is its own, whatever tokens share the walk.
template <int kTile, class TileFn>
__attribute__((always_inline)) static inline void walk_tiles(const AttnArgs& a, const int64_t* ts, const int32_t* his,
                                                             int n_tok, int kvh, int32_t lo, AttnState* sts,
                                                             float (*kt)[kMaxHeadDim], float (*vt)[kMaxHeadDim],
                                                             float (*vz)[kMaxHeadDim], TileFn&& tile) {
  const int hd = a.head_dim, group = attn_group(a);
  const int32_t* bt = attn_table(a, ts[0]);  // every token is of this sequence
  int32_t hi_max = lo;
  for (int m = 0; m < n_tok; ++m) {
    hi_max = his[m] > hi_max ? his[m] : hi_max;
    fill(sts[m].acc, static_cast<size_t>(group) * hd, 0.0f);
    fill(sts[m].m, static_cast<size_t>(group), -INFINITY);
    fill(sts[m].l, static_cast<size_t>(group), 0.0f);
  }
  for (int32_t j0 = lo; j0 <= hi_max; j0 += kTile) {
    const int n_rows = hi_max - j0 + 1 < kTile ? hi_max - j0 + 1 : kTile;
    for (int j = 0; j < n_rows; ++j) {
      const size_t off = attn_kv_offset(a, bt, j0 + j, kvh);
      load_row(a.k + off, a.kv_f16, kt[j], hd);
      load_row(a.v + off, a.kv_f16, vt[j], hd);
    }
    for (int j = n_rows; j < kTile; ++j) {
      fill(kt[j], static_cast<size_t>(hd), 0.0f);
      fill(vt[j], static_cast<size_t>(hd), 0.0f);
    }
    for (int m = 0; m < n_tok; ++m) {
      if (his[m] < j0) continue;
      const int n = his[m] - j0 + 1 < kTile ? his[m] - j0 + 1 : kTile;
      const float(*vr)[kMaxHeadDim] = vt;
      if (n < n_rows) {
        for (int j = 0; j < kTile; ++j)
          if (j < n) std::memcpy(vz[j], vt[j], sizeof(float) * static_cast<size_t>(hd));
          else fill(vz[j], static_cast<size_t>(hd), 0.0f);
        vr = vz;
      }
      tile(static_cast<const float(*)[kMaxHeadDim]>(kt), vr, n,
           a.q + ts[m] * a.ldq + static_cast<int64_t>(kvh) * group * hd, sts[m]);
    }
  }
}

}  // namespace attn_detail
}  // namespace tandem::kernels::cpu
