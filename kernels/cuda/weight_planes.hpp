// The planes layout of quantized weight rows (the CUDA backend's RowLayout::Packed): Q4_0,
// Q5_0, Q8_0 and Q6_K blocks (18, 22, 34 and 210 bytes) keep their fields only 2-byte
// aligned in the file's layout, so the matmul kernels would read them two bytes at a time.
// At load each row's blocks are rewritten with each kind of field gathered in a plane of its
// own, the row padded to a multiple of 16 bytes: the codes' plane starts the row (16-byte
// aligned), and every plane starts at a multiple of 16 bytes but Q5_0's scales (of 4):
//   Q4_0: codes [nb][16] | d [nb][2]
//   Q5_0: codes [nb][16] | qh [nb][4] | d [nb][2]
//   Q8_0: codes [nb][32] | d [nb][2]
//   Q6_K: ql [nb][128] | qh [nb][64] | scales [nb][16] | d [nb][2]
// (nb blocks a row). The bytes are the file's, moved; the kernels read them with 16-byte or
// 4-byte loads and compute the same bits (kernels/cuda/qcodes.cuh, block_at and the field
// accessors). Only the quantized matmuls read planes; get_rows keeps the file's layout.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/ops.hpp"
#include "kernels/dtype.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {

// Whether type t has a planes layout (Q4_0, Q5_0, Q8_0, Q6_K).
bool planes_type(DType t);
// Bytes of a row of `cols` elements of type t in planes: the file's row rounded up to 16.
size_t planes_row_stride(DType t, int64_t cols);
// `rows` rows of `cols` elements of type t from the file's layout (src, packed rows) into
// planes at dst (rows of planes_row_stride bytes; the padding is zeroed).
void to_planes(DType t, const void* src, int64_t rows, int64_t cols, uint8_t* dst);

}  // namespace tandem::kernels::TANDEM_CUDA_NS
