// The AMX tile instructions the CPU matmul uses, twice over with one interface:
//  - AmxHardware: the instructions themselves (inline assembly: GCC's intrinsics are macros
//    that paste their tile numbers as text, which template parameters cannot be);
//  - AmxModel: an exact model in plain C++, so that the AMX kernels run, and are compared
//    bit for bit with the VNNI ones, on every machine (most have no AMX).
// A kernel is a template over one of them (matmul_tiles_amx_impl.hpp).
//
// Semantics, from Intel's instruction set reference (palette 1):
//  - 8 tiles of at most 16 rows of at most 64 bytes; `ldtilecfg` gives each its rows and
//    bytes per row (colsb). Rows and bytes beyond a tile's configured size read as zero.
//  - tdpb[su][su]d C, A, B: for m < C.rows, n < C.colsb / 4:
//      C[m][n] += sum over k < A.colsb / 4, i < 4 of A[m][4k + i] * B[k][4n + i]
//    with A's bytes signed (s) or unsigned (u) as the first letter says and B's as the
//    second, products and sums in 32-bit integers (wrapping; the kernels stay far inside).
//    The shapes must agree (A.rows = C.rows, A.colsb = 4 * B.rows, B.colsb = C.colsb);
//    the CPU faults otherwise, and so does the model (it aborts with the reason).
//  - tileloadd / tilestored move a tile's configured rows × colsb bytes to or from memory,
//    rows `stride` bytes apart; tilezero clears a tile.
// Everything here is `static` (see quant_blocks.hpp): SIMD kernel files include it.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tandem::kernels::cpu::amx {

constexpr int kTiles = 8, kMaxRows = 16, kMaxColsb = 64;

// The 64-byte operand of ldtilecfg.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads 64 bytes");

// Sets tile t to `rows` rows of `colsb` bytes.
static inline void set_tile(TileConfig& c, int t, int rows, int colsb) {
  c.rows[t] = static_cast<uint8_t>(rows);
  c.colsb[t] = static_cast<uint16_t>(colsb);
}

struct AmxModel {
  struct Tile {
    alignas(64) uint8_t b[kMaxRows][kMaxColsb];
  };
  struct State {
    bool configured = false;
    TileConfig cfg;
    Tile t[kTiles];
  };
  static State& state() {
    thread_local State s;
    return s;
  }
  // Tile products the model has run, all threads (tests check that a path took the tiles).
  static inline std::atomic<uint64_t> products{0};
  [[noreturn]] static void fault(const char* what) {
    std::fprintf(stderr, "AMX model: %s (the CPU would fault here)\n", what);
    std::abort();
  }
  static const Tile& checked(int t) {
    const State& s = state();
    if (!s.configured) fault("tile instruction before ldtilecfg");
    if (s.cfg.rows[t] == 0 || s.cfg.colsb[t] == 0) fault("tile used but not configured");
    return s.t[t];
  }

  static void config(const TileConfig& c) {
    if (c.palette != 1) fault("palette other than 1");
    if (c.start_row != 0) fault("start_row not 0");
    for (uint8_t r : c.reserved)
      if (r) fault("reserved bytes not 0");
    for (int t = 0; t < 16; ++t) {
      const bool used = t < kTiles;
      if (!used && (c.rows[t] || c.colsb[t])) fault("tiles 8-15 configured");
      if (c.rows[t] > kMaxRows || c.colsb[t] > kMaxColsb) fault("tile larger than 16 rows x 64 bytes");
      if ((c.rows[t] == 0) != (c.colsb[t] == 0)) fault("tile with rows but no bytes, or bytes but no rows");
    }
    State& s = state();
    s.cfg = c;
    s.configured = true;
    std::memset(s.t, 0, sizeof s.t);  // ldtilecfg zeroes every tile
  }
  static void release() {
    State& s = state();
    s.configured = false;
    std::memset(s.t, 0, sizeof s.t);
  }
  template <int T>
  static void zero() {
    static_assert(T >= 0 && T < kTiles);
    checked(T);
    std::memset(state().t[T].b, 0, sizeof(Tile));
  }
  template <int T>
  static void load(const void* base, size_t stride) {
    static_assert(T >= 0 && T < kTiles);
    checked(T);
    State& s = state();
    Tile& d = s.t[T];
    std::memset(d.b, 0, sizeof d.b);
    for (int r = 0; r < s.cfg.rows[T]; ++r)
      std::memcpy(d.b[r], static_cast<const uint8_t*>(base) + static_cast<size_t>(r) * stride, s.cfg.colsb[T]);
  }
  template <int T>
  static void store(void* base, size_t stride) {
    static_assert(T >= 0 && T < kTiles);
    const Tile& src = checked(T);
    const State& s = state();
    for (int r = 0; r < s.cfg.rows[T]; ++r)
      std::memcpy(static_cast<uint8_t*>(base) + static_cast<size_t>(r) * stride, src.b[r], s.cfg.colsb[T]);
  }
  // tdpb<SA><SB>d C, A, B (SA, SB: whether A's, B's bytes are signed).
  template <int C, int A, int B, bool SA, bool SB>
  static void dot() {
    static_assert(C != A && C != B && A != B, "tdpb*d needs three distinct tiles");
    checked(C), checked(A), checked(B);
    State& s = state();
    const int m_rows = s.cfg.rows[C], n = s.cfg.colsb[C] / 4, k = s.cfg.colsb[A] / 4;
    if (s.cfg.rows[A] != m_rows) fault("tdpb*d: A's rows differ from C's");
    if (s.cfg.rows[B] != k) fault("tdpb*d: B's rows differ from A's 4-byte columns");
    if (s.cfg.colsb[B] != s.cfg.colsb[C]) fault("tdpb*d: B's and C's bytes per row differ");
    if (s.cfg.colsb[A] % 4 || s.cfg.colsb[C] % 4) fault("tdpb*d: bytes per row not a multiple of 4");
    products.fetch_add(1, std::memory_order_relaxed);
    const Tile &a = s.t[A], &b = s.t[B];
    Tile& c = s.t[C];
    for (int m = 0; m < m_rows; ++m)
      for (int j = 0; j < n; ++j) {
        uint32_t acc;
        std::memcpy(&acc, c.b[m] + 4 * j, 4);
        for (int kk = 0; kk < k; ++kk)
          for (int i = 0; i < 4; ++i) {
            const uint8_t x = a.b[m][4 * kk + i], y = b.b[kk][4 * j + i];
            const int32_t xv = SA ? static_cast<int8_t>(x) : x, yv = SB ? static_cast<int8_t>(y) : y;
            acc += static_cast<uint32_t>(xv * yv);  // 32-bit wrap, as the CPU
          }
        std::memcpy(c.b[m] + 4 * j, &acc, 4);
      }
  }
  template <int C, int A, int B> static void dpbssd() { dot<C, A, B, true, true>(); }
  template <int C, int A, int B> static void dpbsud() { dot<C, A, B, true, false>(); }
  template <int C, int A, int B> static void dpbusd() { dot<C, A, B, false, true>(); }
  template <int C, int A, int B> static void dpbuud() { dot<C, A, B, false, false>(); }
};

#if defined(__x86_64__)
// The instructions (AT&T operand order: sources first). Their tile numbers are immediates;
// "memory" keeps the compiler from moving stores to a buffer past the tile load that reads it.
struct AmxHardware {
  static void config(const TileConfig& c) { __asm__ volatile("ldtilecfg %0" ::"m"(c)); }
  static void release() { __asm__ volatile("tilerelease" ::); }
  template <int T>
  static void zero() {
    __asm__ volatile("tilezero %%tmm%c0" ::"i"(T));
  }
  template <int T>
  static void load(const void* base, size_t stride) {
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(base), "r"(stride), "i"(T) : "memory");
  }
  template <int T>
  static void store(void* base, size_t stride) {
    __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(base), "r"(stride), "i"(T) : "memory");
  }
  template <int C, int A, int B>
  static void dpbssd() {
    __asm__ volatile("tdpbssd %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
  template <int C, int A, int B>
  static void dpbsud() {
    __asm__ volatile("tdpbsud %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
  template <int C, int A, int B>
  static void dpbusd() {
    __asm__ volatile("tdpbusd %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
  template <int C, int A, int B>
  static void dpbuud() {
    __asm__ volatile("tdpbuud %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
};
#endif

}  // namespace tandem::kernels::cpu::amx
