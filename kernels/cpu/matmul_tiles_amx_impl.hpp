// AMX-INT8 kernels for weights in 16-row tiles (pack_tiles.hpp), for passes of several
// tokens (verification, batched decode, prefill). A template over the tile instructions
// (amx_tiles.hpp): matmul_tiles_amx_avx512.cpp instantiates it with the CPU's, the tests
// (tests/support/amx_model_kernels.cpp) with the model's, which runs on every machine.
//
// One tdpb*d multiplies up to 16 tokens (A: a token a row) by the 16 rows of a weight group
// (B: K/4 rows of the 16 rows' 4-byte code groups, the tiles' own interleaving) into a
// 16 × 16 int32 tile C (row t: token t's sums for the group's 16 rows, the lanes of the VNNI
// kernels' vectors). A tile product gives one integer sum per output, so where each scale
// unit needs its own sum its K is one unit: a 32-element block (Q4_0..Q8_0), a Q4_K group of
// 32, a Q6_K group of 16 (the folded K-quant kernels below put the scales into B instead).
//
// The results are the VNNI kernels' bits (matmul_q32_tiles_avx512.cpp,
// matmul_qk_tiles_avx512.cpp), whatever the number of tokens: each unit's integer sum is
// exact and equal to theirs, and everything after it (group scales in int32, then the
// block's float fold) is their code in their order:
//  - Q4_0, Q4_1, Q5_0, Q5_1: unsigned codes (as the VNNI kernels decode them) times signed
//    activations, tdpbsud.
//  - Q8_0: the signed codes straight from the tile, tdpbssd; the VNNI kernels multiply
//    code + 128, so the sum gains 128 * (the block's activation sum) in int32.
//  - Q4_K: unsigned 4-bit codes, tdpbsud; sum * group scale added in int32 (theirs:
//    vpdpwssd of the same product); the mins as theirs.
//  - Q6_K: code - 32 as signed bytes, tdpbssd (theirs: unsigned codes from -32 * sum(q)).
// Activations are copied per call into panels the tiles load (16 rows × K bytes a unit, in
// the weights' element order; the activation rows keep each kernel's order, which the
// VNNI kernels and the row kernels share).
//
// Passes of fewer than kAmxMinTokens tokens go to the VNNI kernels: a B tile is built per
// block and call (unpacking the codes costs about what a token's 8 vpdpbusd a block do), and
// what each token then saves does not repay it for one to three tokens. Rows after the last
// whole group go to the row kernels.
//
// Everything is `static` or in an unnamed namespace: both instantiating files include it.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <utility>

#include "kernels/cpu/act_order.hpp"
#include "kernels/cpu/amx_tiles.hpp"
#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/pack_tiles.hpp"
#include "kernels/cpu/simd_avx512.hpp"
#include "kernels/cpu/tiles_kquant_avx512.hpp"

// Float rounding exactly as written (-ffp-contract=off, kernels/CMakeLists.txt).

namespace tandem::kernels::cpu::mm::TANDEM_AVX512_NS {
RowsFn rows_q32(DType t);        // matmul_q32_avx512.cpp
RowsFn rows_qk(DType t);         // matmul_qk_avx512.cpp
RowsFn rows_q32_tiles(DType t);  // matmul_q32_tiles_avx512.cpp
RowsFn rows_qk_tiles(DType t);   // matmul_qk_tiles_avx512.cpp

namespace {

using namespace avx512;
using u8 = uint8_t;
using amx::TileConfig;

// Tokens of one A tile.
constexpr int kChunk = 16;
// Calls from which Q4_K and Q6_K fold their group scales into B (below): where building the
// planes, once per call, costs less than the per-token scale arithmetic it saves (counting
// instructions: about 9 tokens for Q4_K's 2 planes, 22 for Q6_K's 4).
constexpr int64_t kAmxFoldQ4K = 12, kAmxFoldQ6K = 24;

// A thread's buffers: the activation panels and, for Q8_0, their blocks' code sums; the B
// tiles built from the weights; the C tiles read back.
struct AmxScratch {
  struct Free {
    void operator()(u8* p) const { ::operator delete(p, std::align_val_t{64}); }
  };
  struct Buffer {
    std::unique_ptr<u8, Free> p;
    size_t cap = 0;
    u8* get(size_t n) {
      if (n > cap) {
        p.reset(static_cast<u8*>(::operator new(n, std::align_val_t{64})));
        cap = n;
      }
      return p.get();
    }
  };
  Buffer panel, group_b;  // the activation panels; a weight group's B tiles (folded kernels)
  alignas(64) u8 b[2][16 * 64];
  alignas(64) int32_t c[4][16][16] = {};  // C tiles read back (rows past a call's tokens: unused)
  u8* panels(size_t n) { return panel.get(n); }
};
static AmxScratch& amx_scratch() {
  thread_local AmxScratch s;
  return s;
}

// The first m of TN tokens' results for the rows of group g that `keep` marks.
template <int TN>
static inline void store_tokens(const Args& a, int64_t g, __mmask16 keep, int64_t t0, int m, const __m512* acc) {
  #pragma GCC unroll 16
  for (int t = 0; t < TN; ++t)
    if (t < m) _mm512_mask_storeu_ps(a.y + (t0 + t) * a.ldy + g, keep, acc[t]);
}

// What the K-quant kernels leave to others: passes of few tokens (the VNNI tiled kernels) and
// the rows after the last whole group (the row kernels).
struct QkFallbacks {
  static RowsFn vnni(DType t) { return rows_qk_tiles(t); }
  static RowsFn rows_after(DType t) { return rows_qk(t); }
};

// ---- the 32-element block types ---------------------------------------------------------
template <DType T>
struct AmxQ32 {
  static constexpr bool kSigned = T == DType::Q8_0;
  static constexpr bool kMin = T == DType::Q4_1 || T == DType::Q5_1;
  static constexpr bool kFifth = T == DType::Q5_0 || T == DType::Q5_1;
  static constexpr float kOffset = kSigned ? 128.0f : kFifth ? 16.0f : 8.0f;  // as the VNNI kernel's
  static constexpr int kK = 32;  // bytes of a unit's A row
  static int64_t units(const ActLayout& l) { return l.nb; }
  static RowsFn vnni(DType t) { return rows_q32_tiles(t); }
  static RowsFn rows_after(DType t) { return rows_q32(t); }
  static void prepare(const Args&, const u8*, AmxScratch&) {}  // B tiles are built per block

  // C: tiles 0, 1; A: 2, 3; B: 4, 5 (8 rows of the 16 rows' 4-byte groups).
  static TileConfig config(int rows) {
    TileConfig c;
    for (int s = 0; s < 2; ++s) {
      amx::set_tile(c, s, rows, 64);
      amx::set_tile(c, 2 + s, rows, kK);
      amx::set_tile(c, 4 + s, 8, 64);
    }
    return c;
  }

  // Token row `q` into unit rows (block b at dst + b * 16 * kK), elements in natural order;
  // sums[b * 16] the block's code sum (Q8_0).
  static void panel_row(const int8_t* q, const ActLayout& l, u8* dst, int32_t* sums) {
    for (int64_t b = 0; b < l.nb; ++b) {
      u8* d = dst + static_cast<size_t>(b) * 16 * kK;
      // Elements 0-15 and 16-31 each lie in one run in every order act_order::q32 has.
      std::memcpy(d, q + act_order::q32(T, b, 0, l.nb), 16);
      std::memcpy(d + 16, q + act_order::q32(T, b, 16, l.nb), 16);
      if constexpr (kSigned) {
        int32_t s = 0;
        for (int e = 0; e < 32; ++e) s += static_cast<int8_t>(d[e]);
        sums[b * 16] = s;
      }
    }
  }

  template <class Tiles, int TN>
  static void group(const Args& a, const u8* gw, int64_t g, __mmask16 keep, int64_t t0, int m, const u8* panel,
                    const int32_t* sums, AmxScratch& s) {
    const Q32Tile p = q32_tile(T);
    const ActLayout& l = a.xl;
    const float* xd[TN];
    const float* xs[TN];
    #pragma GCC unroll 16
    for (int t = 0; t < TN; ++t) {
      const u8* row = a.xq + static_cast<size_t>(t0 + std::min(t, m - 1)) * l.row_bytes;
      xd[t] = act_d(row, l);
      xs[t] = act_s(row, l);
    }
    __m512 acc[TN];
    #pragma GCC unroll 16
    for (int t = 0; t < TN; ++t) acc[t] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    // Block b's tile product into C tile S (read back into s.c[S]).
    auto product = [&](auto slot, int64_t b) {
      constexpr int S = decltype(slot)::value;
      const u8* w = gw + static_cast<size_t>(b) * static_cast<size_t>(p.size);
      avx2::prefetch_ahead(w + 2048, p.size);
      if constexpr (kSigned) {
        Tiles::template load<4 + S>(w + p.codes, 64);  // [8 g][16 r][4 i]: B as stored
      } else {
        // B row k: elements 4k..4k+3 of the 16 rows, as the VNNI kernel's code vector k.
        uint64_t masks[8] = {};
        if constexpr (kFifth) std::memcpy(masks, w + p.qh, sizeof masks);
        for (int v = 0; v < 4; ++v) {
          const __m512i z = loadu512(w + p.codes + 64 * v);
          __m512i lo = _mm512_and_si512(z, m4), hi = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
          if constexpr (kFifth) {
            lo = _mm512_mask_add_epi8(lo, static_cast<__mmask64>(masks[v]), lo, _mm512_set1_epi8(0x10));
            hi = _mm512_mask_add_epi8(hi, static_cast<__mmask64>(masks[4 + v]), hi, _mm512_set1_epi8(0x10));
          }
          _mm512_store_si512(s.b[S] + 64 * v, lo);
          _mm512_store_si512(s.b[S] + 64 * (4 + v), hi);
        }
        Tiles::template load<4 + S>(s.b[S], 64);
      }
      Tiles::template load<2 + S>(panel + static_cast<size_t>(b) * 16 * kK, kK);
      Tiles::template zero<S>();
      if constexpr (kSigned) Tiles::template dpbssd<S, 2 + S, 4 + S>();
      else Tiles::template dpbsud<S, 2 + S, 4 + S>();
      Tiles::template store<S>(s.c[S], 64);
    };
    // Block b's sums into the accumulators: the VNNI kernel's fold.
    auto fold = [&](auto slot, int64_t b) {
      constexpr int S = decltype(slot)::value;
      const u8* w = gw + static_cast<size_t>(b) * static_cast<size_t>(p.size);
      const __m512 dw = f16x16(w + p.d);
      __m512 mw = _mm512_setzero_ps();
      if constexpr (kMin) mw = f16x16(w + p.m);
      #pragma GCC unroll 16
      for (int t = 0; t < TN; ++t) {
        __m512i is = _mm512_load_si512(s.c[S][t]);
        if constexpr (kSigned) is = _mm512_add_epi32(is, _mm512_set1_epi32(128 * sums[b * 16 + t]));
        const __m512 f = _mm512_cvtepi32_ps(is);
        const float dx = xd[t][b], sx = xs[t][b];
        if constexpr (kMin) {
          acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(f, _mm512_set1_ps(dx)), dw, acc[t]);
          acc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(sx), acc[t]);
        } else {
          const __m512 v = _mm512_fmadd_ps(f, _mm512_set1_ps(dx), _mm512_set1_ps(-kOffset * sx));
          acc[t] = _mm512_fmadd_ps(v, dw, acc[t]);
        }
      }
    };
    const std::integral_constant<int, 0> s0;
    const std::integral_constant<int, 1> s1;
    int64_t b = 0;
    for (; b + 2 <= l.nb; b += 2) {  // two products in flight, folded in block order
      product(s0, b);
      product(s1, b + 1);
      fold(s0, b);
      fold(s1, b + 1);
    }
    if (b < l.nb) {
      product(s0, b);
      fold(s0, b);
    }
    store_tokens<TN>(a, g, keep, t0, m, acc);
  }
};

// ---- Q4_K and Q6_K ----------------------------------------------------------------------

// A Q4_K block's contribution to a token's accumulator: its mins against the activations'
// 32-element sums (bs32, the block's 8), then the VNNI kernel's float fold, in its order.
static inline __m512 q4k_fold(__m512i isum, const __m512i* mp, const int16_t* bs32, __m512 d, __m512 dmin, float dx,
                              __m512 acc) {
  __m512i imin = _mm512_setzero_si512();
  imin = dpwssd_bcast(dpwssd_bcast(imin, mp[0], bs32), mp[1], bs32 + 2);
  imin = dpwssd_bcast(dpwssd_bcast(imin, mp[2], bs32 + 4), mp[3], bs32 + 6);
  const __m512 vx = _mm512_set1_ps(dx);
  const __m512 av = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, vx), acc);
  return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(dmin, vx), av);
}

struct AmxQ4K : QkFallbacks {
  static constexpr int kK = 32, kGroups = 8;
  static int64_t units(const ActLayout& l) { return l.nb * kGroups; }
  static void prepare(const Args&, const u8*, AmxScratch&) {}  // B tiles are built per group
  static TileConfig config(int rows) { return AmxQ32<DType::Q4_0>::config(rows); }  // the same shapes

  static void panel_row(const int8_t* q, const ActLayout& l, u8* dst, int32_t*) {
    for (int64_t bi = 0; bi < l.nb; ++bi)
      for (int j = 0; j < kGroups; ++j)
        std::memcpy(dst + static_cast<size_t>(bi * kGroups + j) * 16 * kK, q + 256 * bi + 32 * kQ4kPos.v[j], kK);
  }

  template <class Tiles, int TN>
  static void group(const Args& a, const u8* gw, int64_t g, __mmask16 keep, int64_t t0, int m, const u8* panel,
                    const int32_t*, AmxScratch& s) {
    const ActLayout& l = a.xl;
    const int16_t* bs32[TN];
    const float* xd[TN];
    #pragma GCC unroll 16
    for (int t = 0; t < TN; ++t) {
      const u8* row = a.xq + static_cast<size_t>(t0 + std::min(t, m - 1)) * l.row_bytes;
      bs32[t] = act_bsums32(row, l);
      xd[t] = act_d(row, l);
    }
    __m512 acc[TN];
    #pragma GCC unroll 16
    for (int t = 0; t < TN; ++t) acc[t] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int64_t bi = 0; bi < l.nb; ++bi) {
      const u8* w = gw + static_cast<size_t>(bi) * tile_q4k::size;
      avx2::prefetch_ahead(w + 2048, tile_q4k::size);
      const Q4kScales sc8 = q4k_scales(w);  // the 16 rows' scales and mins
      __m512i iacc[TN];
      #pragma GCC unroll 16
      for (int t = 0; t < TN; ++t) iacc[t] = _mm512_setzero_si512();
      // Group j's tile product into C tile S.
      auto product = [&](auto slot, auto jc) {
        constexpr int S = decltype(slot)::value, j = decltype(jc)::value;
        const u8* c = w + tile_q4k::codes + 256 * j;
        for (int v = 0; v < 4; ++v) {  // B rows v and 4 + v: elements 4v.. and 16 + 4v.. of the group
          const __m512i z = loadu512(c + 64 * v);
          _mm512_store_si512(s.b[S] + 64 * v, _mm512_and_si512(z, m4));
          _mm512_store_si512(s.b[S] + 64 * (4 + v), _mm512_and_si512(_mm512_srli_epi16(z, 4), m4));
        }
        Tiles::template load<4 + S>(s.b[S], 64);
        Tiles::template load<2 + S>(panel + static_cast<size_t>(bi * kGroups + j) * 16 * kK, kK);
        Tiles::template zero<S>();
        Tiles::template dpbsud<S, 2 + S, 4 + S>();
        Tiles::template store<S>(s.c[S], 64);
      };
      auto fold = [&](auto slot, auto jc) {
        constexpr int S = decltype(slot)::value, j = decltype(jc)::value;
        const __m512i sc = q4k_scale<j>(sc8);
        #pragma GCC unroll 16
        for (int t = 0; t < TN; ++t)
          iacc[t] = _mm512_add_epi32(iacc[t], _mm512_mullo_epi32(_mm512_load_si512(s.c[S][t]), sc));
      };
      each(std::make_integer_sequence<int, kGroups / 2>{}, [&](auto pc) {
        constexpr int j = 2 * decltype(pc)::value;
        product(std::integral_constant<int, 0>{}, std::integral_constant<int, j>{});
        product(std::integral_constant<int, 1>{}, std::integral_constant<int, j + 1>{});
        fold(std::integral_constant<int, 0>{}, std::integral_constant<int, j>{});
        fold(std::integral_constant<int, 1>{}, std::integral_constant<int, j + 1>{});
      });
      // The mins against the activations' 32-element sums: the VNNI kernel's code.
      __m512i mp[4];
      q4k_min_pairs(sc8, mp);
      const __m512 d = f16x16(w + tile_q4k::d), dmin = f16x16(w + tile_q4k::dmin);
      #pragma GCC unroll 16
      for (int t = 0; t < TN; ++t) {
        acc[t] = q4k_fold(iacc[t], mp, bs32[t] + 8 * bi, d, dmin, xd[t][bi], acc[t]);
      }
    }
    store_tokens<TN>(a, g, keep, t0, m, acc);
  }
};

struct AmxQ6K : QkFallbacks {
  static constexpr int kK = 16, kGroups = 16;
  static int64_t units(const ActLayout& l) { return l.nb * kGroups; }
  static void prepare(const Args&, const u8*, AmxScratch&) {}  // B tiles are built per group
  // C: tiles 0, 1; A: 2, 3 (16 bytes a token); B: 4, 5 (4 rows).
  static TileConfig config(int rows) {
    TileConfig c;
    for (int s = 0; s < 2; ++s) {
      amx::set_tile(c, s, rows, 64);
      amx::set_tile(c, 2 + s, rows, kK);
      amx::set_tile(c, 4 + s, kK / 4, 64);
    }
    return c;
  }
  // Group j's 16 activations lie in one run (the Q6_K order keeps 16-element runs).
  static void panel_row(const int8_t* q, const ActLayout& l, u8* dst, int32_t*) {
    for (int64_t bi = 0; bi < l.nb; ++bi)
      for (int j = 0; j < kGroups; ++j)
        std::memcpy(dst + static_cast<size_t>(bi * kGroups + j) * 16 * kK, q + 256 * bi + 16 * j, kK);
  }

  template <class Tiles, int TN>
  static void group(const Args& a, const u8* gw, int64_t g, __mmask16 keep, int64_t t0, int m, const u8* panel,
                    const int32_t*, AmxScratch& s) {
    const ActLayout& l = a.xl;
    const float* xd[TN];
    #pragma GCC unroll 16
    for (int t = 0; t < TN; ++t) xd[t] = act_d(a.xq + static_cast<size_t>(t0 + std::min(t, m - 1)) * l.row_bytes, l);
    __m512 acc[TN];
    #pragma GCC unroll 16
    for (int t = 0; t < TN; ++t) acc[t] = _mm512_setzero_ps();
    const __m512i k32 = _mm512_set1_epi8(32);
    for (int64_t bi = 0; bi < l.nb; ++bi) {
      const u8* w = gw + static_cast<size_t>(bi) * tile_q6k::size;
      avx2::prefetch_ahead(w + 2048, tile_q6k::size);
      __m512i iacc[TN];
      #pragma GCC unroll 16
      for (int t = 0; t < TN; ++t) iacc[t] = _mm512_setzero_si512();
      auto product = [&](auto slot, int j) {
        constexpr int S = decltype(slot)::value;
        // The VNNI kernel's codes, less 32: B row u holds elements 4u..4u+3.
        __m512i c[4];
        q6k_codes(w + tile_q6k::codes + tile_q6k::group_bytes * j, c);
        for (int u = 0; u < 4; ++u) _mm512_store_si512(s.b[S] + 64 * u, _mm512_sub_epi8(c[u], k32));
        Tiles::template load<4 + S>(s.b[S], 64);
        Tiles::template load<2 + S>(panel + static_cast<size_t>(bi * kGroups + j) * 16 * kK, kK);
        Tiles::template zero<S>();
        Tiles::template dpbssd<S, 2 + S, 4 + S>();
        Tiles::template store<S>(s.c[S], 64);
      };
      for (int pp = 0; pp < kGroups / 2; ++pp) {
        // Scales 2pp, 2pp + 1 of the 16 rows as int16 pairs, each sign-extended to a lane.
        const __m512i pair =
            _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + tile_q6k::scales + 32 * pp)));
        const __m512i sc[2] = {_mm512_srai_epi32(_mm512_slli_epi32(pair, 16), 16), _mm512_srai_epi32(pair, 16)};
        product(std::integral_constant<int, 0>{}, 2 * pp);
        product(std::integral_constant<int, 1>{}, 2 * pp + 1);
        #pragma GCC unroll 16
        for (int t = 0; t < TN; ++t) {
          iacc[t] = _mm512_add_epi32(iacc[t], _mm512_mullo_epi32(_mm512_load_si512(s.c[0][t]), sc[0]));
          iacc[t] = _mm512_add_epi32(iacc[t], _mm512_mullo_epi32(_mm512_load_si512(s.c[1][t]), sc[1]));
        }
      }
      const __m512 d = f16x16(w + tile_q6k::d);
      #pragma GCC unroll 16
      for (int t = 0; t < TN; ++t)
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[t]), _mm512_mul_ps(d, _mm512_set1_ps(xd[t][bi])), acc[t]);
    }
    store_tokens<TN>(a, g, keep, t0, m, acc);
  }
};

// ---- Q4_K and Q6_K with their group scales in the B tiles (passes of many tokens) ------
// Above, every token pays an int32 multiply and add per scale group to apply the group
// scales to the tile sums. Here the scales go into B instead, a few bits at a time so that
// each product still fits a byte: scale = sum_p base^p * digit_p, plane p of B holding
// code * digit_p, and one tile product per plane over K = 64 elements (2 Q4_K groups, 4 Q6_K
// groups) accumulates the digit-weighted sums of a whole super-block in C. A token then
// pays one shift and add per plane a super-block:
//   sum_j scale_j * (sum over group j of q * code) = sum_p base^p * C_p
// exactly (integers), so the result is the kernels' above, and the VNNI ones', bit for bit.
// Building the planes costs more per weight group than the plain B tiles, paid once per
// call for all its tokens: these kernels take calls of kAmxFoldQ4K / kAmxFoldQ6K tokens or more.
//  - Q4_K: scale (6 bits) = 8 h + l, codes 0..15, products <= 105: vpmullw by the digit
//    (no byte's product reaches the next byte). tdpbsud.
//  - Q6_K: scale (int8) = 64 d3 + 16 d2 + 4 d1 + d0, d0..d2 in 0..3, d3 in -2..1 (two's
//    complement); codes - 32 in -32..31, products in -96..93: code * digit as
//    (code & bit 0) + (2 code & bit 1), the top digit's bit 1 subtracted. tdpbssd.
// B of a weight group (16 rows) for every super-block is built once per call
// (AmxScratch::group_b) and reused by every token chunk.

struct AmxQ4KFold : QkFallbacks {
  static constexpr int kK = 64, kUnits = 4, kPlanes = 2;
  static int64_t units(const ActLayout& l) { return l.nb * kUnits; }
  // C: tiles 0 (h plane), 1 (l plane); A: 2; B: 4, 5.
  static TileConfig config(int rows) {
    TileConfig c;
    amx::set_tile(c, 0, rows, 64);
    amx::set_tile(c, 1, rows, 64);
    amx::set_tile(c, 2, rows, kK);
    amx::set_tile(c, 4, 16, 64);
    amx::set_tile(c, 5, 16, 64);
    return c;
  }
  // Unit u of a block: natural groups 2u and 2u + 1 side by side.
  static void panel_row(const int8_t* q, const ActLayout& l, u8* dst, int32_t*) {
    for (int64_t bi = 0; bi < l.nb; ++bi)
      for (int u = 0; u < kUnits; ++u) {
        u8* d = dst + static_cast<size_t>(bi * kUnits + u) * 16 * kK;
        std::memcpy(d, q + 256 * bi + 32 * kQ4kPos.v[2 * u], 32);
        std::memcpy(d + 32, q + 256 * bi + 32 * kQ4kPos.v[2 * u + 1], 32);
      }
  }
  // B of unit u, plane p of block bi: 16 rows of 64 bytes (rows 0-7 group 2u, 8-15 group 2u + 1).
  static u8* plane(u8* base, int64_t bi, int u, int p) {
    return base + (static_cast<size_t>(bi * kUnits + u) * kPlanes + static_cast<size_t>(p)) * 1024;
  }
  static void prepare(const Args& a, const u8* gw, AmxScratch& s) {
    const int64_t nb = a.xl.nb;
    u8* base = s.group_b.get(static_cast<size_t>(nb) * kUnits * kPlanes * 1024);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int64_t bi = 0; bi < nb; ++bi) {
      const u8* w = gw + static_cast<size_t>(bi) * tile_q4k::size;
      avx2::prefetch_ahead(w + 2048, tile_q4k::size);
      const Q4kScales sc8 = q4k_scales(w);
      each(std::make_integer_sequence<int, 8>{}, [&](auto jc) {
        constexpr int j = decltype(jc)::value;
        const __m512i sc = q4k_scale<j>(sc8);
        const __m512i h = _mm512_srli_epi32(sc, 3), lo3 = _mm512_and_si512(sc, _mm512_set1_epi32(7));
        // Each row's digit in both 16-bit halves of its lane: vpmullw multiplies its 4 bytes.
        const __m512i fh = _mm512_or_si512(h, _mm512_slli_epi32(h, 16)),
                      fl = _mm512_or_si512(lo3, _mm512_slli_epi32(lo3, 16));
        u8* bh = plane(base, bi, j / 2, 0) + 512 * (j % 2);
        u8* bl = plane(base, bi, j / 2, 1) + 512 * (j % 2);
        const u8* c = w + tile_q4k::codes + 256 * j;
        for (int v = 0; v < 4; ++v) {
          const __m512i z = loadu512(c + 64 * v);
          const __m512i lo = _mm512_and_si512(z, m4), hi = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
          _mm512_store_si512(bh + 64 * v, _mm512_mullo_epi16(lo, fh));
          _mm512_store_si512(bh + 64 * (4 + v), _mm512_mullo_epi16(hi, fh));
          _mm512_store_si512(bl + 64 * v, _mm512_mullo_epi16(lo, fl));
          _mm512_store_si512(bl + 64 * (4 + v), _mm512_mullo_epi16(hi, fl));
        }
      });
    }
  }

  template <class Tiles, int TN>
  static void group(const Args& a, const u8* gw, int64_t g, __mmask16 keep, int64_t t0, int m, const u8* panel,
                    const int32_t*, AmxScratch& s) {
    const ActLayout& l = a.xl;
    const int16_t* bs32[TN];
    const float* xd[TN];
    #pragma GCC unroll 16
    for (int t = 0; t < TN; ++t) {
      const u8* row = a.xq + static_cast<size_t>(t0 + std::min(t, m - 1)) * l.row_bytes;
      bs32[t] = act_bsums32(row, l);
      xd[t] = act_d(row, l);
    }
    __m512 acc[TN];
    #pragma GCC unroll 16
    for (int t = 0; t < TN; ++t) acc[t] = _mm512_setzero_ps();
    u8* base = s.group_b.p.get();
    for (int64_t bi = 0; bi < l.nb; ++bi) {
      const u8* w = gw + static_cast<size_t>(bi) * tile_q4k::size;
      Tiles::template zero<0>();
      Tiles::template zero<1>();
      for (int u = 0; u < kUnits; ++u) {
        Tiles::template load<2>(panel + static_cast<size_t>(bi * kUnits + u) * 16 * kK, kK);
        Tiles::template load<4>(plane(base, bi, u, 0), 64);
        Tiles::template load<5>(plane(base, bi, u, 1), 64);
        Tiles::template dpbsud<0, 2, 4>();
        Tiles::template dpbsud<1, 2, 5>();
      }
      Tiles::template store<0>(s.c[0], 64);
      Tiles::template store<1>(s.c[1], 64);
      // The mins and the block's fold: AmxQ4K's (the VNNI kernel's) code.
      const Q4kScales sc8 = q4k_scales(w);
      __m512i mp[4];
      q4k_min_pairs(sc8, mp);
      const __m512 d = f16x16(w + tile_q4k::d), dmin = f16x16(w + tile_q4k::dmin);
      #pragma GCC unroll 16
      for (int t = 0; t < TN; ++t) {
        const __m512i iacc =
            _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(s.c[0][t]), 3), _mm512_load_si512(s.c[1][t]));
        acc[t] = q4k_fold(iacc, mp, bs32[t] + 8 * bi, d, dmin, xd[t][bi], acc[t]);
      }
    }
    store_tokens<TN>(a, g, keep, t0, m, acc);
  }
};

struct AmxQ6KFold : QkFallbacks {
  static constexpr int kK = 64, kUnits = 4, kPlanes = 4;
  static int64_t units(const ActLayout& l) { return l.nb * kUnits; }
  // C: tiles 0-3 (a plane each); A: 4; B: 5 (the planes in turn).
  static TileConfig config(int rows) {
    TileConfig c;
    for (int p = 0; p < kPlanes; ++p) amx::set_tile(c, p, rows, 64);
    amx::set_tile(c, 4, rows, kK);
    amx::set_tile(c, 5, 16, 64);
    return c;
  }
  // Unit u of a block: groups 4u..4u+3, one run of 64 activations.
  static void panel_row(const int8_t* q, const ActLayout& l, u8* dst, int32_t*) {
    for (int64_t bi = 0; bi < l.nb; ++bi)
      for (int u = 0; u < kUnits; ++u)
        std::memcpy(dst + static_cast<size_t>(bi * kUnits + u) * 16 * kK, q + 256 * bi + 64 * u, kK);
  }
  static u8* plane(u8* base, int64_t bi, int u, int p) {
    return base + (static_cast<size_t>(bi * kUnits + u) * kPlanes + static_cast<size_t>(p)) * 1024;
  }
  static void prepare(const Args& a, const u8* gw, AmxScratch& s) {
    const int64_t nb = a.xl.nb;
    u8* base = s.group_b.get(static_cast<size_t>(nb) * kUnits * kPlanes * 1024);
    const __m512i k32 = _mm512_set1_epi8(32);
    for (int64_t bi = 0; bi < nb; ++bi) {
      const u8* w = gw + static_cast<size_t>(bi) * tile_q6k::size;
      avx2::prefetch_ahead(w + 2048, tile_q6k::size);
      for (int pp = 0; pp < 8; ++pp) {
        const __m512i pair =
            _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + tile_q6k::scales + 32 * pp)));
        const __m512i scs[2] = {_mm512_srai_epi32(_mm512_slli_epi32(pair, 16), 16), _mm512_srai_epi32(pair, 16)};
        for (int h = 0; h < 2; ++h) {
          const int j = 2 * pp + h;
          const __m512i sc = scs[h];
          __m512i c[4];
          q6k_codes(w + tile_q6k::codes + tile_q6k::group_bytes * j, c);
          for (int p = 0; p < kPlanes; ++p) {
            // All bytes of row r's lane set where bit 2p (bit 2p + 1) of its scale is.
            const __m512i b0 = _mm512_movm_epi32(_mm512_test_epi32_mask(sc, _mm512_set1_epi32(1 << (2 * p)))),
                          b1 = _mm512_movm_epi32(_mm512_test_epi32_mask(sc, _mm512_set1_epi32(2 << (2 * p))));
            u8* dst = plane(base, bi, j / 4, p) + 256 * (j % 4);
            for (int uu = 0; uu < 4; ++uu) {
              const __m512i cs = _mm512_sub_epi8(c[uu], k32), c2 = _mm512_add_epi8(cs, cs);
              const __m512i one = _mm512_and_si512(cs, b0), two = _mm512_and_si512(c2, b1);
              // The top digit's bit 1 weighs -2 (two's complement), the others +2.
              _mm512_store_si512(dst + 64 * uu, p == 3 ? _mm512_sub_epi8(one, two) : _mm512_add_epi8(one, two));
            }
          }
        }
      }
    }
  }

  template <class Tiles, int TN>
  static void group(const Args& a, const u8* gw, int64_t g, __mmask16 keep, int64_t t0, int m, const u8* panel,
                    const int32_t*, AmxScratch& s) {
    const ActLayout& l = a.xl;
    const float* xd[TN];
    #pragma GCC unroll 16
    for (int t = 0; t < TN; ++t) xd[t] = act_d(a.xq + static_cast<size_t>(t0 + std::min(t, m - 1)) * l.row_bytes, l);
    __m512 acc[TN];
    #pragma GCC unroll 16
    for (int t = 0; t < TN; ++t) acc[t] = _mm512_setzero_ps();
    u8* base = s.group_b.p.get();
    int32_t(&cs)[kPlanes][16][16] = s.c;
    for (int64_t bi = 0; bi < l.nb; ++bi) {
      Tiles::template zero<0>();
      Tiles::template zero<1>();
      Tiles::template zero<2>();
      Tiles::template zero<3>();
      for (int u = 0; u < kUnits; ++u) {
        Tiles::template load<4>(panel + static_cast<size_t>(bi * kUnits + u) * 16 * kK, kK);
        Tiles::template load<5>(plane(base, bi, u, 0), 64);
        Tiles::template dpbssd<0, 4, 5>();
        Tiles::template load<5>(plane(base, bi, u, 1), 64);
        Tiles::template dpbssd<1, 4, 5>();
        Tiles::template load<5>(plane(base, bi, u, 2), 64);
        Tiles::template dpbssd<2, 4, 5>();
        Tiles::template load<5>(plane(base, bi, u, 3), 64);
        Tiles::template dpbssd<3, 4, 5>();
      }
      Tiles::template store<0>(cs[0], 64);
      Tiles::template store<1>(cs[1], 64);
      Tiles::template store<2>(cs[2], 64);
      Tiles::template store<3>(cs[3], 64);
      const __m512 d = f16x16(gw + static_cast<size_t>(bi) * tile_q6k::size + tile_q6k::d);
      #pragma GCC unroll 16
      for (int t = 0; t < TN; ++t) {
        __m512i iacc = _mm512_slli_epi32(_mm512_load_si512(cs[3][t]), 2);
        iacc = _mm512_slli_epi32(_mm512_add_epi32(iacc, _mm512_load_si512(cs[2][t])), 2);
        iacc = _mm512_slli_epi32(_mm512_add_epi32(iacc, _mm512_load_si512(cs[1][t])), 2);
        iacc = _mm512_add_epi32(iacc, _mm512_load_si512(cs[0][t]));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc), _mm512_mul_ps(d, _mm512_set1_ps(xd[t][bi])), acc[t]);
      }
    }
    store_tokens<TN>(a, g, keep, t0, m, acc);
  }
};

// ---- the walk ---------------------------------------------------------------------------
// m tokens (1..16) by the kernel compiled for the fewest tokens TN >= m: each TN is a kernel
// of its own (its accumulators in registers), so only the sizes that matter have one: 4-8
// (verification), 12 and 16 (batches, prefill). Tokens m..TN-1 read token m - 1's
// activations and are not stored.
template <class K, class Tiles>
static void group_tokens(const Args& a, const u8* gw, int64_t g, __mmask16 keep, int64_t t0, int m, const u8* panel,
                         const int32_t* sums, AmxScratch& s) {
  switch (m <= 4 ? 4 : m <= 8 ? m : m <= 12 ? 12 : 16) {
    case 4: return K::template group<Tiles, 4>(a, gw, g, keep, t0, m, panel, sums, s);
    case 5: return K::template group<Tiles, 5>(a, gw, g, keep, t0, m, panel, sums, s);
    case 6: return K::template group<Tiles, 6>(a, gw, g, keep, t0, m, panel, sums, s);
    case 7: return K::template group<Tiles, 7>(a, gw, g, keep, t0, m, panel, sums, s);
    case 8: return K::template group<Tiles, 8>(a, gw, g, keep, t0, m, panel, sums, s);
    case 12: return K::template group<Tiles, 12>(a, gw, g, keep, t0, m, panel, sums, s);
    default: return K::template group<Tiles, 16>(a, gw, g, keep, t0, m, panel, sums, s);
  }
}

// A RowsFn: tokens t0..t1 in chunks of 16 (one A tile each), every chunk's panel built
// first; then each 16-row group against every chunk, so a group's weights come from memory
// once. One chunk configures its tiles with exactly its tokens; several configure 16 rows
// and a short last chunk's panel holds zero rows.
template <class K, class Tiles>
void rows_amx(const Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const int64_t n = t1 - t0;
  if (n < kAmxMinTokens) return K::vnni(a.wt)(a, r0, r1, t0, t1);
  const int64_t full = tiled_rows(a.R), end = std::min(r1, full);
  if (r0 < end) {
    const ActLayout& l = a.xl;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    const int rows = chunks == 1 ? static_cast<int>(n) : kChunk;
    const size_t panel_bytes = static_cast<size_t>(K::units(l)) * kChunk * K::kK;
    const size_t sum_bytes = (static_cast<size_t>(l.nb) * kChunk * sizeof(int32_t) + 63) / 64 * 64;
    AmxScratch& s = amx_scratch();
    u8* buf = s.panels(static_cast<size_t>(chunks) * (panel_bytes + sum_bytes));
    for (int64_t c = 0; c < chunks; ++c) {
      u8* panel = buf + static_cast<size_t>(c) * (panel_bytes + sum_bytes);
      auto* sums = reinterpret_cast<int32_t*>(panel + panel_bytes);
      const int64_t m = std::min<int64_t>(kChunk, n - c * kChunk);
      for (int64_t t = 0; t < m; ++t)
        K::panel_row(act_q(a.xq + static_cast<size_t>(t0 + c * kChunk + t) * l.row_bytes), l,
                     panel + static_cast<size_t>(t) * K::kK, sums + t);
      for (int64_t t = m; t < rows; ++t)
        for (int64_t u = 0; u < K::units(l); ++u)
          std::memset(panel + (static_cast<size_t>(u) * kChunk + static_cast<size_t>(t)) * K::kK, 0, K::kK);
      for (int64_t b = 0; b < l.nb; ++b)  // Q8_0's block sums of the tokens past m (read, not stored)
        for (int64_t t = m; t < kChunk; ++t) sums[b * kChunk + t] = 0;
    }
    Tiles::config(K::config(rows));
    for (int64_t g = r0 / kTileRows * kTileRows; g < end; g += kTileRows) {
      const u8* gw = a.w + static_cast<size_t>(g) * a.w_stride;
      const int lo = static_cast<int>(std::max(r0, g) - g), hi = static_cast<int>(std::min(end, g + kTileRows) - g);
      const auto keep = static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
      K::prepare(a, gw, s);
      for (int64_t c = 0; c < chunks; ++c) {
        const u8* panel = buf + static_cast<size_t>(c) * (panel_bytes + sum_bytes);
        const auto* sums = reinterpret_cast<const int32_t*>(panel + panel_bytes);
        const int m = static_cast<int>(std::min<int64_t>(kChunk, n - c * kChunk));
        group_tokens<K, Tiles>(a, gw, g, keep, t0 + c * kChunk, m, panel, sums, s);
      }
    }
    Tiles::release();
  }
  if (r1 > full)  // the row kernels take at most kMaxTokens a call
    for (int64_t t = t0; t < t1; t += kMaxTokens)
      K::rows_after(a.wt)(a, std::max(r0, full), r1, t, std::min(t1, t + kMaxTokens));
}

// Q4_K, Q6_K: the folded kernels from kFold tokens a call on.
template <class Plain, class Fold, int64_t kFold, class Tiles>
void rows_amx_qk(const Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  if (t1 - t0 >= kFold) return rows_amx<Fold, Tiles>(a, r0, r1, t0, t1);
  rows_amx<Plain, Tiles>(a, r0, r1, t0, t1);
}

template <class Tiles>
RowsFn amx_rows_for(DType t) {
  switch (t) {
    case DType::Q4_0: return rows_amx<AmxQ32<DType::Q4_0>, Tiles>;
    case DType::Q4_1: return rows_amx<AmxQ32<DType::Q4_1>, Tiles>;
    case DType::Q5_0: return rows_amx<AmxQ32<DType::Q5_0>, Tiles>;
    case DType::Q5_1: return rows_amx<AmxQ32<DType::Q5_1>, Tiles>;
    case DType::Q8_0: return rows_amx<AmxQ32<DType::Q8_0>, Tiles>;
    case DType::Q4_K: return rows_amx_qk<AmxQ4K, AmxQ4KFold, kAmxFoldQ4K, Tiles>;
    case DType::Q6_K: return rows_amx_qk<AmxQ6K, AmxQ6KFold, kAmxFoldQ6K, Tiles>;
    default: return nullptr;
  }
}

}  // namespace
}  // namespace tandem::kernels::cpu::mm::TANDEM_AVX512_NS
