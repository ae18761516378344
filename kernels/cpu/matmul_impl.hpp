// Internals shared by the matmul driver (matmul.cpp) and the per-ISA kernels
// (matmul_scalar.cpp, *_avx2.cpp, *_avx512.cpp). Not part of the public API.
// Included by SIMD files, so it holds no non-static inline code (see quant_blocks.hpp).
//
// A quantized-weight matmul first quantizes each activation row (token) to int8 blocks
// that line up with the weight blocks, then each kernel computes whole weight rows against
// a range of tokens. Activation row layout (one per token, `row_bytes` apart, 64-aligned):
//   q   int8[C]      codes; x[c] ~= d[c / block] * q[c]. Within a block a kernel set may
//                    store them in another order that its decoded weights match
//                    (d, s, bsums, fsum always refer to the natural order)
//   d   float[nb]    per-block scale
//   aux Q32: float s[nb] = d * sum(q of the block)   (applies the weight's offset/min)
//       QK:  int16 bsums[nb*16] = sums of q over each 16 elements (applies K-quant mins)
//   fsum QK: float[nb*8] = d * sums of q over each 32 elements (mins of Q4_K/Q5_K in float)
//   bs32 QK: int16[nb*8] = sums of q over each 32 elements (|sum| <= 4064): two groups'
//            sums as one 32-bit word meet two groups' Q4_K mins in one vpdpwssd
//   off8 QK: int32[nb*32] = -32 * sums of q over each 8 elements: the start of a Q6_K
//            8-code sum, which then equals the sum over codes - 32 (|.| <= 32512, an int16)
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/dtype.hpp"
#include "kernels/paged_attn_args.hpp"

namespace tandem::kernels::cpu::mm {

enum class Family {
  Float,  // F32, F16, BF16: float dot products, x kept in f32
  Q32,    // Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: 32-element blocks, activations in 32-blocks
  QK,     // Q2_K..Q6_K: 256-element blocks, activations in 256-blocks with 16-sums
  None,   // not a weight type
};
Family family(DType t);

// Largest token range a kernel call gets; the driver walks longer batches in chunks of
// this many tokens so that their activations stay in L2 while a row tile is reused.
constexpr int64_t kMaxTokens = 32;
// Passes of at least this many tokens multiply tiled weights with AMX where the CPU has it
// (matmul_tiles_amx_impl.hpp says why not fewer).
constexpr int64_t kAmxMinTokens = 4;
// The AMX kernels take up to this many tokens a call (the others kMaxTokens): what they build
// per weight group for a call is shared by more tokens.
constexpr int64_t kAmxMaxTokens = 64;

struct ActLayout {
  int64_t C = 0;
  int64_t nb = 0;  // blocks per row
  int block = 0;   // 32 or 256
  size_t d_off = 0, aux_off = 0, fsum_off = 0, bs32_off = 0, off8_off = 0, row_bytes = 0;
};
ActLayout act_layout(Family f, int64_t C);

static inline const int8_t* act_q(const uint8_t* row) { return reinterpret_cast<const int8_t*>(row); }
static inline const float* act_d(const uint8_t* row, const ActLayout& l) {
  return reinterpret_cast<const float*>(row + l.d_off);
}
static inline const float* act_s(const uint8_t* row, const ActLayout& l) {
  return reinterpret_cast<const float*>(row + l.aux_off);
}
static inline const int16_t* act_bsums(const uint8_t* row, const ActLayout& l) {
  return reinterpret_cast<const int16_t*>(row + l.aux_off);
}
static inline const float* act_fsum(const uint8_t* row, const ActLayout& l) {
  return reinterpret_cast<const float*>(row + l.fsum_off);
}
static inline const int16_t* act_bsums32(const uint8_t* row, const ActLayout& l) {
  return reinterpret_cast<const int16_t*>(row + l.bs32_off);
}
static inline const int32_t* act_off8(const uint8_t* row, const ActLayout& l) {
  return reinterpret_cast<const int32_t*>(row + l.off8_off);
}

// Everything a kernel needs for one matmul call.
struct Args {
  DType wt = DType::F32;
  const uint8_t* w = nullptr;
  size_t w_stride = 0;
  int64_t R = 0;  // rows of the whole matrix (the interleaved layout groups them from row 0)
  int64_t C = 0;
  const float* x = nullptr;  // Float family: activations as given
  int64_t ldx = 0;
  const uint8_t* xq = nullptr;  // quantized families: token t's row at xq + t*xl.row_bytes
  ActLayout xl;
  float* y = nullptr;
  int64_t ldy = 0;
};

// Computes y[t*ldy + r] for r in [r0, r1), t in [t0, t1) with t1 - t0 <= kMaxTokens
// (kAmxMaxTokens for the AMX kernels).
// Every (r, t) result must be the same bits whatever the ranges are.
using RowsFn = void (*)(const Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
// Quantizes one activation row of l.C floats into the layout above. A kernel may want the
// codes of each block in its own order (see matmul_qk_avx2.cpp), so the quantizer always
// comes from the same kernel set as the rows function.
using QuantFn = void (*)(const float* x, const ActLayout& l, uint8_t* row);
// Dequantizes n elements; returns false when this ISA has no fast path for the type.
using DequantFn = bool (*)(DType t, const void* src, float* dst, int64_t n);
// Quantizes n floats to weight blocks as quantize_row_ref does, bit for bit; returns false
// when this ISA has no fast path for the type.
using QuantizeFn = bool (*)(DType t, const float* src, void* dst, int64_t n);

}  // namespace tandem::kernels::cpu::mm
namespace tandem::kernels::cpu {
using AttnArgs = PagedAttnArgs;  // attention_impl.hpp
struct AttnState;
// attention_span_avx2_multi's contract (attention_impl.hpp), at a kernel level of its own.
using AttnMultiFn = void (*)(const AttnArgs& a, const int64_t* ts, const int32_t* his, int n_tok, int kvh, int32_t lo,
                             AttnState* sts);
}  // namespace tandem::kernels::cpu
namespace tandem::kernels::cpu::mm {

struct IsaKernels {
  RowsFn (*rows)(DType t) = nullptr;    // nullptr result: type not handled at this level
  QuantFn (*quant)(DType t) = nullptr;  // for every type `rows` or `rows_packed` handles (Float: unused)
  DequantFn dequant = nullptr;
  // Kernels for weights in the backend's packed row layout (pack_q32.hpp) and its 16-row
  // tiles (pack_tiles.hpp); nullptr: none here.
  RowsFn (*rows_packed)(DType t) = nullptr;
  RowsFn (*rows_tiled)(DType t) = nullptr;
  QuantizeFn quantize = nullptr;  // weights (re-quantized at load), not activations
  AttnMultiFn attn_multi = nullptr;  // attention spans (nullptr: the AVX2 or portable ones)
};

// The kernel set of the active level (force_isa; the tests' emulated AVX-512 set when
// installed), or nullptr where this binary has none for it.
const IsaKernels* active_kernels();

// Kernel sets; levels above Scalar return nullptr when the binary was built without them.
const IsaKernels& scalar_kernels();
const IsaKernels* avx2_kernels();
const IsaKernels* avx512_kernels();
// The AVX-512 kernels compiled against SIMDe (tests only: the tandem_avx512_emulated
// library), and the hook that makes the Avx512 level use them on any CPU. Tests install
// them to check the AVX-512 arithmetic where the machine has no AVX-512.
const IsaKernels* avx512_emulated_kernels();
void install_avx512_kernels_for_testing(const IsaKernels* k);
const IsaKernels* avx512_kernels_for_testing();

// Per-ISA entry points, defined in the files of that ISA.
RowsFn scalar_rows(DType t);
// Packed rows and tiled rows by unpacking each into the file layout for the scalar kernel:
// the fallback (and reference) for every packed or tiled type at every level.
void scalar_rows_packed(const Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
void scalar_rows_tiled(const Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
void scalar_quant_q32(const float* x, const ActLayout& l, uint8_t* row);
void scalar_quant_qk(const float* x, const ActLayout& l, uint8_t* row);

RowsFn avx2_rows_float(DType t);
RowsFn avx2_rows_q32(DType t);
RowsFn avx2_rows_q32_packed(DType t);
RowsFn avx2_rows_qk(DType t);
RowsFn avx2_rows_qk_tiles(DType t);   // Q4_K in 16-row tiles
RowsFn avx2_rows_q32_tiles(DType t);  // Q4_0, Q4_1 in 16-row tiles
QuantFn avx2_quant_qk_for(DType t);  // K-quant activations in the order each kernel reads
QuantFn avx2_quant_q32_for(DType t);  // 32-block activations in the order each kernel reads
void avx2_quant_q32(const float* x, const ActLayout& l, uint8_t* row);
void avx2_quant_qk(const float* x, const ActLayout& l, uint8_t* row);  // natural order
bool avx2_dequant(DType t, const void* src, float* dst, int64_t n);
bool avx2_quantize(DType t, const float* src, void* dst, int64_t n);  // Q4_0

// AMX-INT8 kernels for tiled weights (matmul_tiles_amx_impl.hpp), their results the AVX-512
// VNNI tiled kernels' bits, on the CPU's tile instructions. nullptr for a type without tiles.
RowsFn amx_rows_hardware(DType t);
// The same kernels on the exact model of the tile instructions (amx_tiles.hpp), which runs
// wherever AVX-512 does, or its SIMDe emulation: the tests install them
// (tests/support/amx_model.hpp) as the Model path's, compiled for the AVX-512 set in use
// (the native one, or the one install_avx512_kernels_for_testing installed).
void install_amx_model_for_testing(RowsFn (*kernels)(DType));
// The kernels of the AMX path in use (amx_path(), quant.hpp); nullptr when it is off.
RowsFn amx_rows(DType t);
// Whether two kernel sets for tiled weights give the same bits on small problems of every
// tiled type (token counts for the plain and the folded AMX kernels, rows after the last
// whole group), on activations quantized by `acts` (an AVX-512 set: the native one, or the
// tests' emulated one): amx.cpp checks the CPU's tiles against the VNNI kernels so before
// using them.
bool tiled_kernels_agree(RowsFn (*a)(DType), RowsFn (*b)(DType), const IsaKernels* acts);

}  // namespace tandem::kernels::cpu::mm
