// Weight dequantization and the CPU matrix multiply for every weight type the engine runs
// (F32, F16, BF16 and the GGUF block quantizations Q4_0..Q8_0, Q2_K..Q6_K).
//
// The matmul quantizes the activations to int8 once per call and computes integer dot
// products against each weight block; every weight row is read from memory once for all
// N tokens of the call. Results do not depend on N or on the thread count: token t of an
// N-token call is bit-identical to the same token computed alone, which speculative
// decoding relies on (a verified draft must reproduce plain decoding exactly).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/cpu/thread_pool.hpp"
#include "kernels/dtype.hpp"

namespace tandem::kernels::cpu {

// Plain scalar reference: obviously correct, used to test everything else. n must be a
// multiple of the type's block size. Matches gguf-py's numpy dequantization bit for bit.
void dequantize_row_ref(DType t, const void* src, float* dst, int64_t n);
// The inverse for the simple block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): the formats'
// reference quantization, bit for bit gguf-py's. n a multiple of 32; throws for other types.
bool can_quantize_to(DType t);
void quantize_row_ref(DType t, const float* src, void* dst, int64_t n);
// Fastest available (dispatched) quantization, the reference's bits: re-quantizing a draft
// at load (Q4_0 vectorised; the other types are the reference).
void quantize_row(DType t, const float* src, void* dst, int64_t n);
// Fastest available (dispatched) dequantization; same results as the reference. Used for
// embedding lookups.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// y[i*ldy + r] = sum_c x[i*ldx + c] * W[r, c]  for i < N, r < R.
// W row r starts at w + r*w_stride bytes and holds C elements of type wt (C a multiple of
// the block size). Threads split the rows; each weight row is read once for all N tokens.
void matmul(ThreadPool& pool, DType wt, const void* w, size_t w_stride, int64_t R, int64_t C,
            const float* x, int64_t ldx, int64_t N, float* y, int64_t ldy);
// Several weight matrices of the same C applied to the same activations (q/k/v, gate/up of
// a layer): y_j[i*ldy_j + r] = sum_c x[i*ldx + c] * W_j[r, c]. The activations are quantized
// once per distinct kernel layout and all matrices' rows are split over one pool job, so
// the threads meet once instead of once per matrix. Each result has the same bits as the
// single matmul gives. At most kMaxMatmulJobs matrices.
constexpr int kMaxMatmulJobs = 8;
struct MatmulJob {
  DType wt;
  const void* w;
  size_t w_stride;
  int64_t R;
  float* y;
  int64_t ldy;
  bool packed = false;  // rows in the packed layout (pack_rows), not the file's
  bool tiled = false;   // rows in 16-row tiles (tile_rows)
};
void matmul_multi(ThreadPool& pool, const MatmulJob* jobs, int n_jobs, int64_t C, const float* x, int64_t ldx,
                  int64_t N);
// Weights in the backend's own layouts, which the matrix keeps its size in:
// - packed rows (kernels/cpu/pack_q32.hpp), the 32-element types: the same bytes per row,
//   re-ordered so that the kernels load each field of 16 blocks at once;
// - 16-row tiles (kernels/cpu/pack_tiles.hpp), Q4_K, Q6_K and the 32-element types: groups
//   of 16 rows interleaved, the same bytes per group, the last R % 16 rows as stored.
// packs_rows / tiles_rows say whether the active kernel level has kernels of its own for
// type t in that layout (at other levels such a matrix still multiplies, each row unpacked
// first: correct but slow, so the backend converts only where this is true, tiles first;
// never with TANDEM_PACK=0). pack_rows / tile_rows convert `rows` rows of `cols` elements
// (src rows src_stride bytes apart), split over the pool's threads.
bool packs_rows(DType t);
bool tiles_rows(DType t);
void pack_rows(ThreadPool& pool, DType t, const void* src, size_t src_stride, void* dst, int64_t rows,
               int64_t cols);
void tile_rows(ThreadPool& pool, DType t, const void* src, size_t src_stride, void* dst, int64_t rows,
               int64_t cols);
// Reference: dequantize each row, then a double-accumulated dot product with exact x.
void matmul_ref(DType wt, const void* w, size_t w_stride, int64_t R, int64_t C, const float* x,
                int64_t ldx, int64_t N, float* y, int64_t ldy);

// Instruction-set level of the kernels. Ordered: a CPU that supports one supports those below.
enum class Isa { Scalar, Avx2, Avx512 };
Isa detected_isa();  // best level this CPU supports and this binary has kernels for
// Selects the kernels dequantize_row and matmul use from now on (process-wide). Throws
// std::invalid_argument for a level above detected_isa(). Tests use it to run every path.
void force_isa(Isa isa);
Isa active_isa();  // what dequantize_row and matmul use now
std::string isa_name(Isa isa);  // "scalar", "avx2", "avx512"

// AMX tiles (Intel Xeons from Sapphire Rapids on) multiply tiled weights in passes of
// several tokens (mm::kAmxMinTokens or more) at the AVX-512 level, with the VNNI kernels'
// bits, so every batch-invariance guarantee holds whichever path runs.
//  - Hardware: the CPU has AMX-TILE and AMX-INT8, the OS saves the tile state, Linux granted
//    this process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM), and the tile kernels gave
//    the VNNI kernels' results on a check before first use; the default there.
//  - Model: the same kernels on an exact C++ model of the tile instructions (tests: the
//    AMX arithmetic checked on machines without AMX; needs the AVX-512 level).
//  - Off: the VNNI kernels (no AMX, TANDEM_AMX=0, or a level below AVX-512).
enum class AmxPath { Off, Hardware, Model };
bool amx_available();   // Hardware can run here (detected once)
AmxPath detected_amx(); // the default: Hardware where available, unless TANDEM_AMX=0
AmxPath amx_path();     // what matmul uses now
// Selects the path (process-wide); throws std::invalid_argument for Hardware where
// amx_available() is false and for Model where the CPU has no AVX-512 level.
void force_amx(AmxPath p);
std::string amx_name(AmxPath p);  // "off", "amx", "amx-model"

}  // namespace tandem::kernels::cpu
