// Tensor element types, numbered exactly as GGUF/GGML numbers them on disk, with the
// block geometry of each quantization. The ids are a file-format fact: never renumber.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace tandem {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
};

struct DTypeInfo {
  const char* name;     // GGML's name, e.g. "Q4_K"
  uint32_t block_size;  // elements per block (1 for plain types)
  uint32_t type_size;   // bytes per block
  bool weight_ok;       // the engine can compute with it as a weight
};

// Info for any GGML type id, including ones the engine does not support (weight_ok=false)
// and ids it has never heard of (nullopt). Used to give errors that name the type.
std::optional<DTypeInfo> dtype_info(uint32_t ggml_type_id);
const DTypeInfo& dtype_info(DType t);  // t must be a known enumerator
inline const char* dtype_name(DType t) { return dtype_info(t).name; }
// Human-readable name for any id: "Q4_K", "IQ2_XXS", or "unknown(77)".
std::string dtype_name_any(uint32_t ggml_type_id);

// Bytes needed for one row of n elements; n must be a multiple of the block size.
inline size_t row_bytes(DType t, int64_t n) {
  const auto& i = dtype_info(t);
  return static_cast<size_t>(n / i.block_size) * i.type_size;
}

}  // namespace tandem
