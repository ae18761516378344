#include "kernels/cuda/weight_planes.hpp"

#include <cstring>
#include <stdexcept>

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

// A block type's fields as (offset in the block, bytes), in plane order.
struct Field {
  size_t off, bytes;
};
constexpr Field kQ4_0Fields[] = {{2, 16}, {0, 2}};
constexpr Field kQ5_0Fields[] = {{6, 16}, {2, 4}, {0, 2}};
constexpr Field kQ8_0Fields[] = {{2, 32}, {0, 2}};
constexpr Field kQ6_KFields[] = {{0, 128}, {128, 64}, {192, 16}, {208, 2}};

struct Fields {
  const Field* f;
  int n;
};
Fields fields_of(DType t) {
  switch (t) {
    case DType::Q4_0: return {kQ4_0Fields, 2};
    case DType::Q5_0: return {kQ5_0Fields, 3};
    case DType::Q8_0: return {kQ8_0Fields, 2};
    case DType::Q6_K: return {kQ6_KFields, 4};
    default: return {nullptr, 0};
  }
}

}  // namespace

bool planes_type(DType t) { return fields_of(t).n > 0; }

size_t planes_row_stride(DType t, int64_t cols) { return (row_bytes(t, cols) + 15) / 16 * 16; }

void to_planes(DType t, const void* src, int64_t rows, int64_t cols, uint8_t* dst) {
  if (!planes_type(t)) throw std::invalid_argument(std::string("no planes layout for ") + dtype_name(t));
  const DTypeInfo& info = dtype_info(t);
  const int64_t nb = cols / info.block_size;
  const size_t block = info.type_size, in_row = row_bytes(t, cols), out_row = planes_row_stride(t, cols);
  const Field* fields = fields_of(t).f;
  const int n_fields = fields_of(t).n;
  const auto* in = static_cast<const uint8_t*>(src);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* ir = in + static_cast<size_t>(r) * in_row;
    uint8_t* orow = dst + static_cast<size_t>(r) * out_row;
    size_t plane = 0;  // the current plane's start in the row
    for (int f = 0; f < n_fields; ++f) {
      for (int64_t b = 0; b < nb; ++b)
        std::memcpy(orow + plane + static_cast<size_t>(b) * fields[f].bytes, ir + static_cast<size_t>(b) * block + fields[f].off,
                    fields[f].bytes);
      plane += static_cast<size_t>(nb) * fields[f].bytes;
    }
    std::memset(orow + plane, 0, out_row - plane);
  }
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
