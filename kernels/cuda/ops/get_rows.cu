// get_rows: dst[i, :] = dequant(table[ids[i], :]). One block per id, threads over columns.
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

template <int T>
__global__ void get_rows_kernel(const uint8_t* table, size_t stride, int64_t table_rows, int64_t cols,
                                const int32_t* ids, float* dst, int64_t ldd, int* err) {
  TANDEM_GRID_DEPENDENCY();
  const int64_t i = blockIdx.x;
  const int32_t id = ids[i];
  float* out = dst + i * ldd;
  if (id < 0 || id >= table_rows) {
    if (threadIdx.x == 0) atomicOr(err, static_cast<int>(dev::kErrTokenId));
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[c] = 0.0f;
    return;
  }
  const uint8_t* row = table + static_cast<size_t>(id) * stride;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[c] = dev::dequant_row_elem<T>(row, c);
}

}  // namespace

namespace ops {

bool weight_type_supported(DType t) {
  return dev::dispatch_wtype(t, [](auto) {});
}

void get_rows(Stream s, DType t, const uint8_t* table, size_t table_stride, int64_t table_rows, int64_t cols,
              const int32_t* ids, int64_t n, F32Rows dst, int* err) {
  if (n == 0) return;
  dev::dispatch_wtype(t, [&](auto wt) {
    TANDEM_LAUNCH(get_rows_kernel<decltype(wt)::value>, static_cast<unsigned>(n), 128, 0, static_cast<cudaStream_t>(s))
    (table, table_stride, table_rows, cols, ids, dst.p, dst.ld, err);
  });
}

}  // namespace ops
}  // namespace tandem::kernels::TANDEM_CUDA_NS
