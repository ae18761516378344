// attn_inputs: a layer's attention inputs after the q/k/v projections in one launch instead
// of up to eight: the biases added to q, k and v, each head of q and k RMS-normed (Gemma 3), q
// and k rotated, k and v stored into the paged cache at their slots. One block per token, the
// steps separated by barriers, each element computed with the operations of ops/binary.cu,
// ops/rms_norm.cu (dev::rms_norm_row, with its block of kNormThreads: the same sums),
// ops/rope.cu (dev::rope_pair) and ops/kv_store.cu: the bits of the separate ops.
#include "kernels/cuda/act_rows.cuh"
#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/rope.cuh"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kThreads = dev::kNormThreads;

__global__ void attn_inputs_kernel(ops::AttnInputsArgs a, int* err) {
  TANDEM_GRID_DEPENDENCY();
  __shared__ double partial[kThreads / dev::kWarp];  // the per-head norms' sums
  const int64_t t = blockIdx.x;
  float* q = a.q + t * a.ldq;
  float* k = a.k + t * a.ldk;
  float* v = a.v + t * a.ldv;
  const int nq = a.n_heads * a.head_dim, nkv = a.n_kv_heads * a.head_dim;
  if (a.bq)
    for (int i = threadIdx.x; i < nq; i += kThreads) q[i] = q[i] + a.bq[i];
  if (a.bk)
    for (int i = threadIdx.x; i < nkv; i += kThreads) k[i] = k[i] + a.bk[i];
  if (a.bv)
    for (int i = threadIdx.x; i < nkv; i += kThreads) v[i] = v[i] + a.bv[i];
  __syncthreads();
  for (int h = 0; h < (a.q_norm ? a.n_heads : 0) + (a.k_norm ? a.n_kv_heads : 0); ++h) {
    const bool is_q = a.q_norm && h < a.n_heads;
    float* head = is_q ? q + static_cast<int64_t>(h) * a.head_dim
                       : k + static_cast<int64_t>(h - (a.q_norm ? a.n_heads : 0)) * a.head_dim;
    dev::rms_norm_row(head, head, is_q ? a.q_norm : a.k_norm, a.head_dim, a.norm_eps, 0.0f, partial);
    __syncthreads();  // the head is written, and `partial` free for the next one
  }
  const int half = a.rope_dims / 2;
  const double pos = static_cast<double>(a.positions[t]);
  for (int idx = threadIdx.x; idx < half * (a.n_heads + a.n_kv_heads); idx += kThreads) {
    const int i = idx / (a.n_heads + a.n_kv_heads), h = idx % (a.n_heads + a.n_kv_heads);
    float* head = h < a.n_heads ? q + static_cast<int64_t>(h) * a.head_dim
                                : k + static_cast<int64_t>(h - a.n_heads) * a.head_dim;
    dev::rope_pair(head, i, pos, a.rope_dims, a.theta, a.neox);
  }
  __syncthreads();
  const int32_t slot = a.slots[t];
  if (slot == kNoKvSlot) return;
  if (slot < 0 || slot >= a.n_slots) {
    if (threadIdx.x == 0) atomicOr(err, static_cast<int>(dev::kErrKvSlot));
    return;
  }
  uint8_t* kd = a.k_cache + static_cast<size_t>(slot) * a.cache_stride;
  uint8_t* vd = a.v_cache + static_cast<size_t>(slot) * a.cache_stride;
  for (int i = threadIdx.x; i < nkv; i += kThreads) {
    if (a.f16) {
      reinterpret_cast<uint16_t*>(kd)[i] = dev::f32_to_f16(k[i]);
      reinterpret_cast<uint16_t*>(vd)[i] = dev::f32_to_f16(v[i]);
    } else {
      reinterpret_cast<float*>(kd)[i] = k[i];
      reinterpret_cast<float*>(vd)[i] = v[i];
    }
  }
}

}  // namespace

void ops::attn_inputs(Stream s, const AttnInputsArgs& a, int64_t n_tokens, int* err) {
  if (n_tokens == 0) return;
  TANDEM_LAUNCH(attn_inputs_kernel, static_cast<unsigned>(n_tokens), kThreads, 0, static_cast<cudaStream_t>(s))(a, err);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
