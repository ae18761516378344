// Helpers of CudaBackend's source files (cuda_backend.cpp, cuda_backend_matmul.cpp,
// cuda_backend_fused.cpp, cuda_backend_sampling.cpp): checks, views and the scratch
// formulas, one definition each. Not part of the backend's interface.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS::backend_detail {

inline constexpr const char* kKind = TANDEM_CUDA_EMULATED_BUILD ? "cuda-emulated" : "cuda";
inline constexpr size_t kGemmTileFloats = size_t{4} << 20;  // 16 MiB of dequantized weight rows per GEMM
// Scratch slots (kScratchActQ + 3: the 256-element blocks' activations).
enum { kScratchActQ = 0, kScratchTile = 1, kScratchAttn = 2, kScratchHeadCounts = 4 };

// The per-head norms' counters a pass of `tokens` needs: one per head (q and k) and token
// chunk of the q/k/v launch (matmul_small's, the smallest; ops::QkvEpilogue::head_counts).
inline int64_t head_counters(int64_t heads, int64_t tokens) {
  return heads * ((tokens + ops::kSmallMTokens - 1) / ops::kSmallMTokens);
}

// A call the backend refuses: std::logic_error naming the backend, the op and why.
inline void require(bool ok, const char* op, const std::string& what) {
  if (!ok) throw std::logic_error(std::string(kKind) + " backend: " + op + ": " + what);
}

inline ops::F32Rows rows_of(uint8_t* p, const Tensor& t) {
  return {reinterpret_cast<float*>(p), static_cast<int64_t>(t.row_stride() / sizeof(float))};
}
inline int64_t ld_of(const Tensor& t) { return static_cast<int64_t>(t.row_stride() / sizeof(float)); }

inline bool quantized(DType t) { return dtype_info(t).block_size > 1; }
// The block size of a quantized type's activations: 256 for the K-quants, else 32.
inline int act_block(DType t) { return dtype_info(t).block_size == 256 ? 256 : 32; }

inline void check_binary(const char* op, const Tensor& dst, const Tensor& a, const Tensor& b) {
  require(dst.type == DType::F32 && a.type == DType::F32 && b.type == DType::F32, op, "F32 only");
  require(dst.cols() == a.cols() && dst.rows() == a.rows(), op, "dst/a shape mismatch");
  require(b.cols() == a.cols() && (b.rows() == a.rows() || b.rows() == 1), op, "b must match a or be one row");
}

// The scratch each op takes, one formula for the op and for reserve_scratch.
// Q8 activations of N x C (ops::ActQuant): int8 values, a float scale per block, an int16
// sum per 16 values, each part padded to 256 bytes (where the next starts).
inline size_t pad256(size_t n) { return (n + 255) / 256 * 256; }
inline size_t act_quant_codes_bytes(int64_t N, int64_t C) { return pad256(static_cast<size_t>(N * C)); }
inline size_t act_quant_scales_bytes(int64_t N, int64_t C, int block) {
  return pad256(sizeof(float) * static_cast<size_t>(N * (C / block)));
}
inline size_t act_quant_bytes(int64_t N, int64_t C, int block) {
  return act_quant_codes_bytes(N, C) + act_quant_scales_bytes(N, C, block) +
         sizeof(int16_t) * static_cast<size_t>(N * (C / 16));
}
// Rows of an R x C weight dequantized per GEMM tile.
inline int64_t gemm_tile_rows(int64_t R, int64_t C) {
  return std::max<int64_t>(1, std::min<int64_t>(R, static_cast<int64_t>(kGemmTileFloats) / C));
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS::backend_detail

