// Re-quantizing a model's matrix weights while it loads: what `--draft-type` asks of the
// draft (the draft's Q5_0 layers decode slowly; a cheaper type may cost little acceptance),
// and what `--weight-type` asks of a target stored in floats (a Hugging Face folder's bf16
// matrices quantized to run at GGUF speed). A target is only quantized when asked.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/dtype.hpp"

namespace tandem {

// How a model's matrix weights go onto the backend: as stored, or re-quantized as they load
// (attention, feed-forward, the output head; the embedding too when it is the head).
struct WeightOptions {
  std::optional<DType> matmul_type;  // nullopt: every matrix as stored
  // Only the matrices stored in a quantized type wider than 5 bits per weight (Q5_0, Q5_1,
  // Q5_K, Q6_K, Q8_0) take matmul_type: what "auto" asks of a draft. They decode slowest per
  // weight; 4-bit matrices gain nothing from re-quantizing and would only lose precision,
  // and float matrices (F32, F16, BF16) were chosen to stay exact (a draft made to agree).
  bool wide_only = false;
};

// "keep" (or empty) → as stored; "auto" → Q4_0 for the wide matrices only; q4_0, q4_1,
// q5_0, q5_1, q8_0, q4_k (any case) → every matrix of another type whose rows are whole
// blocks of it (Q4_K's are 256 elements: a matrix of other rows keeps its type). Throws std::invalid_argument
// naming the choices.
WeightOptions parse_weight_options(const std::string& s);
std::string weight_options_name(const WeightOptions& w);  // "keep", "auto", "q4_0", ...

// The target's: "keep" (or empty) or one of the types, for every matrix (no "auto": the
// target's types are the user's choice). Throws std::invalid_argument naming the choices.
WeightOptions parse_target_weight_options(const std::string& s);

// Whether the string names a re-quantization other than the default "auto": "keep" and
// "auto" do not (a load with no draft model accepts them). Throws for unknown names.
bool names_explicit_weight_type(const std::string& s);

// Whether `t` is a quantized type of more than 5 bits per weight (what "auto" re-quantizes).
bool wide_quantized(DType t);

// Whether a matrix of rows of `cols` elements stored as `from` is re-quantized: a type is
// asked for, it differs, the rows are whole blocks of it (else the matrix keeps its type),
// and under wide_only `from` is a wide quantized type.
inline bool requantizes(const WeightOptions& w, DType from, int64_t cols) {
  return w.matmul_type && *w.matmul_type != from && cols % dtype_info(*w.matmul_type).block_size == 0 &&
         (!w.wide_only || wide_quantized(from));
}

// Rows x cols weights of type `from` (any weight type; cols whole blocks of both) as `to`
// (kernels::cpu::can_quantize_to): dequantized row by row, quantized again. Rows are
// split over `threads` threads (0: the hardware's).
std::vector<uint8_t> requantize_rows(DType from, const void* src, int64_t rows, int64_t cols, DType to,
                                     int threads = 0);

}  // namespace tandem
