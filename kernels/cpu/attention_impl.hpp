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
// The cache index of token t's logical key j: j itself, or a tree node's ancestor
// (kernels/tree_keys.hpp; -1: the token has no key j).
static inline int32_t attn_key(const AttnArgs& a, int64_t t, int32_t j) {
  if (!a.tree) return j;
  const int32_t* f = a.tree + t * kTreeFields;
  return tree_key_index(j, f[0], tree_mask_of(f));
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
    const size_t off = attn_kv_offset(a, bt, attn_key(a, t, j), kvh);
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

// The most tokens one walk takes (the driver's groups).
constexpr int kMaxWalkTokens = 16;

// The walk the vector spans share (attention_span_avx2_multi: tiles of 8; the AVX-512
// span: 16): n_tok tokens of one sequence over the positions from lo, each to his[m]. Per
// tile of kTile positions the rows up to the last token's end are loaded (F16 converted)
// into kt/vt once, the rest zeroed; then for each token still in range, with n of the
// tile's rows its own: tile(kt, V rows, n, token's q heads, token's state). In a token's last
// tile the rows past its end are zero, as a lone token's tile has them: K past n is masked
// by the tile function whatever it holds, V comes from vz, a copy with those rows zeroed,
// where another token's rows were loaded (0 * V could otherwise turn a -0 sum into +0).
// The shared rows are those of the token that reaches furthest; a tree node whose own keys
// differ in a tile (its ancestors are not that token's) gets the tile again with its own
// rows, after the others. So a token's arithmetic is its own, whatever tokens share the walk.
template <int kTile, class TileFn>
__attribute__((always_inline)) static inline void walk_tiles(const AttnArgs& a, const int64_t* ts, const int32_t* his,
                                                             int n_tok, int kvh, int32_t lo, AttnState* sts,
                                                             float (*kt)[kMaxHeadDim], float (*vt)[kMaxHeadDim],
                                                             float (*vz)[kMaxHeadDim], TileFn&& tile) {
  const int hd = a.head_dim, group = attn_group(a);
  const int32_t* bt = attn_table(a, ts[0]);  // every token is of this sequence
  int32_t hi_max = lo;
  int64_t ref = ts[0];  // the token whose keys fill the shared rows
  for (int m = 0; m < n_tok; ++m) {
    if (m == 0 || his[m] > hi_max) hi_max = his[m], ref = ts[m];
    fill(sts[m].acc, static_cast<size_t>(group) * hd, 0.0f);
    fill(sts[m].m, static_cast<size_t>(group), -INFINITY);
    fill(sts[m].l, static_cast<size_t>(group), 0.0f);
  }
  auto load = [&](int64_t t, int32_t j0, int n_rows) {
    for (int j = 0; j < n_rows; ++j) {
      const size_t off = attn_kv_offset(a, bt, attn_key(a, t, j0 + j), kvh);
      load_row(a.k + off, a.kv_f16, kt[j], hd);
      load_row(a.v + off, a.kv_f16, vt[j], hd);
    }
    for (int j = n_rows; j < kTile; ++j) {
      fill(kt[j], static_cast<size_t>(hd), 0.0f);
      fill(vt[j], static_cast<size_t>(hd), 0.0f);
    }
  };
  for (int32_t j0 = lo; j0 <= hi_max; j0 += kTile) {
    const int n_rows = hi_max - j0 + 1 < kTile ? hi_max - j0 + 1 : kTile;
    load(ref, j0, n_rows);
    bool own[kMaxWalkTokens] = {};  // tokens whose keys differ from ref's in this tile
    bool any_own = false;
    for (int m = 0; m < n_tok; ++m) {
      if (his[m] < j0) continue;
      const int n = his[m] - j0 + 1 < kTile ? his[m] - j0 + 1 : kTile;
      if (a.tree && ts[m] != ref) {
        for (int j = 0; j < n && !own[m]; ++j) own[m] = attn_key(a, ts[m], j0 + j) != attn_key(a, ref, j0 + j);
        if (own[m]) {
          any_own = true;
          continue;
        }
      }
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
    if (!any_own) continue;
    for (int m = 0; m < n_tok; ++m) {
      if (!own[m]) continue;
      const int n = his[m] - j0 + 1 < kTile ? his[m] - j0 + 1 : kTile;
      load(ts[m], j0, n);  // rows past n zero, as in a lone token's last tile
      tile(static_cast<const float(*)[kMaxHeadDim]>(kt), static_cast<const float(*)[kMaxHeadDim]>(vt), n,
           a.q + ts[m] * a.ldq + static_cast<int64_t>(kvh) * group * hd, sts[m]);
    }
  }
}

}  // namespace attn_detail
}  // namespace tandem::kernels::cpu
