// Re-quantizing a model's matrix weights while it loads: what `--draft-type` asks of the
// draft (issue 16: the draft's Q5_0 layers decode slowly; a cheaper type may cost little
// acceptance). The target is never re-quantized: its output is the reference.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/dtype.hpp"

namespace tandem {

// "keep" (or empty) → nullopt: weights as the file stores them; else one of q4_0, q4_1,
// q5_0, q5_1, q8_0 (any case). Throws std::invalid_argument naming the choices.
std::optional<DType> parse_weight_type(const std::string& s);
std::string weight_type_name(std::optional<DType> t);  // "keep" or "q4_0", ...

// Whether a matrix of rows of `cols` elements stored as `from` is re-quantized to `to`:
// a type is asked for, it differs, and the rows are whole 32-element blocks (else the
// matrix keeps its type).
inline bool requantizes(std::optional<DType> to, DType from, int64_t cols) {
  return to && *to != from && cols % 32 == 0;
}

// Rows x cols weights of type `from` (any weight type; cols a multiple of 32) as `to`
// (kernels::cpu::can_quantize_to): dequantized row by row, quantized again. Rows are
// split over `threads` threads (0: the hardware's).
std::vector<uint8_t> requantize_rows(DType from, const void* src, int64_t rows, int64_t cols, DType to,
                                     int threads = 0);

}  // namespace tandem
