// kv_store: k, v rows (F32) into the paged cache at slot_mapping (F32 or F16, round to
// nearest even). One block per token; kNoKvSlot and a slot outside the cache (an error) are
// not written.
// kv_move: cache rows moved within the cache (a token tree's accepted path).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kThreads = 128;

__global__ void kv_store_kernel(uint8_t* kc, uint8_t* vc, size_t stride, bool f16, int64_t n_slots, const float* k,
                                int64_t ldk, const float* v, int64_t ldv, int64_t width, const int32_t* slots,
                                int* err) {
  TANDEM_GRID_DEPENDENCY();
  const int64_t t = blockIdx.x;
  const int32_t slot = slots[t];
  if (slot == kNoKvSlot) return;
  if (slot < 0 || slot >= n_slots) {
    if (threadIdx.x == 0) atomicOr(err, static_cast<int>(dev::kErrKvSlot));
    return;
  }
  uint8_t* kd = kc + static_cast<size_t>(slot) * stride;
  uint8_t* vd = vc + static_cast<size_t>(slot) * stride;
  for (int64_t i = threadIdx.x; i < width; i += kThreads) {
    const float kx = k[t * ldk + i], vx = v[t * ldv + i];
    if (f16) {
      reinterpret_cast<uint16_t*>(kd)[i] = dev::f32_to_f16(kx);
      reinterpret_cast<uint16_t*>(vd)[i] = dev::f32_to_f16(vx);
    } else {
      reinterpret_cast<float*>(kd)[i] = kx;
      reinterpret_cast<float*>(vd)[i] = vx;
    }
  }
}

// kv_move: one block walks the moves in order (a later move may read a row an earlier one
// wrote), its threads copying each row's words.
__global__ void kv_move_kernel(uint8_t* kc, uint8_t* vc, size_t stride, int64_t n_slots, const int32_t* from,
                               const int32_t* to, int64_t n, int* err) {
  TANDEM_GRID_DEPENDENCY();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t f = from[i], t = to[i];
    if (f < 0 || f >= n_slots || t < 0 || t >= n_slots) {
      if (threadIdx.x == 0) atomicOr(err, static_cast<int>(dev::kErrKvSlot));
      continue;
    }
    if (f == t) continue;
    for (int which = 0; which < 2; ++which) {
      uint8_t* c = which == 0 ? kc : vc;
      for (size_t b = threadIdx.x; b < stride; b += kThreads)
        c[static_cast<size_t>(t) * stride + b] = c[static_cast<size_t>(f) * stride + b];
    }
    __syncthreads();
  }
}

}  // namespace

void ops::kv_move(Stream s, uint8_t* k_cache, uint8_t* v_cache, size_t cache_stride, int64_t n_slots,
                  const int32_t* from, const int32_t* to, int64_t n, int* err) {
  if (n == 0) return;
  TANDEM_LAUNCH(kv_move_kernel, 1, kThreads, 0, static_cast<cudaStream_t>(s))
  (k_cache, v_cache, cache_stride, n_slots, from, to, n, err);
}

void ops::kv_store(Stream s, uint8_t* k_cache, uint8_t* v_cache, size_t cache_stride, bool f16, int64_t n_slots,
                   const float* k, int64_t ldk, const float* v, int64_t ldv, int64_t n_tokens, int64_t width,
                   const int32_t* slots, int* err) {
  if (n_tokens == 0) return;
  TANDEM_LAUNCH(kv_store_kernel, static_cast<unsigned>(n_tokens), kThreads, 0, static_cast<cudaStream_t>(s))
  (k_cache, v_cache, cache_stride, f16, n_slots, k, ldk, v, ldv, width, slots, err);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
