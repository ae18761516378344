// CudaBackend's fused steps (kernels/backend.hpp: attention_inputs, norm_matmul_shared,
// norm_attention_inputs, attention_residual, attention_matmul, norm_residual,
// act_matmul_residual, act_matmul, matmul_residual): one kernel where the default takes
// several, built from the same device functions, so the same bits; the default where a case
// is not fused.
#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/cuda_backend_detail.hpp"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {

using namespace backend_detail;

void CudaBackend::matmul_residual(const Tensor& dst, const Tensor& w, const Tensor& x, const Tensor& tmp) {
  if (x.cols() == 0 || gemm_on(x.rows())) {
    Backend::matmul_residual(dst, w, x, tmp);
    return;
  }
  const ops::MatmulWeight mw = check_matmul(dst, w, x);
  if (mw.w) launch_matmul(w.type, &mw, 1, x, nullptr, /*accumulate=*/true);
}

ops::AttnInputsArgs CudaBackend::attn_inputs_args(const AttnInputs& a, const KVLayer& cache, const PagedAttnMeta& meta) {
  const char* op = "attention_inputs";
  const int64_t nq = static_cast<int64_t>(a.n_heads) * a.head_dim, nkv = static_cast<int64_t>(a.n_kv_heads) * a.head_dim;
  const int64_t n = a.q.rows();
  require(a.q.type == DType::F32 && a.k.type == DType::F32 && a.v.type == DType::F32, op, "q, k, v must be F32");
  require(a.k.rows() == n && a.v.rows() == n, op, "q, k, v must have the same rows");
  require(a.positions.type == DType::I32 && a.positions.numel() == n, op, "one I32 position per row");
  require(a.rope_dims > 0 && a.rope_dims <= a.head_dim && a.rope_dims % 2 == 0, op, "bad rope_dims");
  auto bias = [&](const Tensor& b, int64_t cols, const char* name) -> const float* {
    if (!b.buf) return nullptr;
    require(b.type == DType::F32 && b.numel() == cols, op,
            std::string(name) + " must be F32 with " + std::to_string(cols) + " values");
    return reinterpret_cast<const float*>(ptr(b, op));
  };
  require(cache.k.type == cache.v.type && (cache.k.type == DType::F16 || cache.k.type == DType::F32), op,
          "cache must be F16 or F32");
  require(cache.k.cols() == nkv && cache.v.cols() == nkv, op, "cache row width mismatch");
  require(cache.k.row_stride() == cache.v.row_stride() && cache.k.rows() == cache.v.rows(), op,
          "k and v caches must have the same layout");
  require(meta.slot_mapping.numel() == n, op, "one slot per token");
  ops::AttnInputsArgs g{};
  g.q = reinterpret_cast<float*>(ptr(a.q, op)), g.k = reinterpret_cast<float*>(ptr(a.k, op));
  g.v = reinterpret_cast<float*>(ptr(a.v, op));
  g.ldq = ld_of(a.q), g.ldk = ld_of(a.k), g.ldv = ld_of(a.v);
  g.bq = bias(a.bq, nq, "bq"), g.bk = bias(a.bk, nkv, "bk"), g.bv = bias(a.bv, nkv, "bv");
  g.q_norm = bias(a.q_norm, a.head_dim, "q_norm"), g.k_norm = bias(a.k_norm, a.head_dim, "k_norm");
  g.norm_eps = a.norm_eps;
  g.positions = reinterpret_cast<const int32_t*>(ptr(a.positions, op));
  g.n_heads = a.n_heads, g.n_kv_heads = a.n_kv_heads, g.head_dim = a.head_dim, g.rope_dims = a.rope_dims;
  g.theta = a.theta, g.neox = a.style == RopeStyle::NeoX;
  g.k_cache = ptr(cache.k, op), g.v_cache = ptr(cache.v, op);
  g.cache_stride = cache.k.row_stride(), g.f16 = cache.k.type == DType::F16, g.n_slots = cache.k.rows();
  g.slots = reinterpret_cast<const int32_t*>(ptr(meta.slot_mapping, op));
  return g;
}

namespace {
// Whether the fused kernels take these attention inputs: q, k, v packed rows of whole heads.
bool fusable_inputs(const Backend::AttnInputs& a) {
  const int64_t nq = static_cast<int64_t>(a.n_heads) * a.head_dim, nkv = static_cast<int64_t>(a.n_kv_heads) * a.head_dim;
  return a.q.cols() == nq && a.k.cols() == nkv && a.v.cols() == nkv;
}
}  // namespace

void CudaBackend::attention_inputs(const AttnInputs& a, const KVLayer& cache, const PagedAttnMeta& meta) {
  if (!fusable_inputs(a)) {
    Backend::attention_inputs(a, cache, meta);
    return;
  }
  const ops::AttnInputsArgs g = attn_inputs_args(a, cache, meta);
  ops::attn_inputs(rt_->stream(), g, a.q.rows(), err_);
  launched("attention_inputs");
}

void CudaBackend::norm_attention_inputs(const Tensor& h, const Tensor& x, const Tensor& norm_w, float eps,
                                        float w_offset, const Tensor& wq, const Tensor& wk, const Tensor& wv,
                                        const AttnInputs& a, const KVLayer& cache, const PagedAttnMeta& meta,
                                        const PendingResidual* pending) {
  const int64_t N = x.rows();
  // The epilogue keeps a rotated pair in one warp's 16 rows (ops::QkvEpilogue).
  if (!fusable_inputs(a) || a.head_dim % 16 || N == 0 || x.cols() == 0 || gemm_on(N) || a.q.rows() != N) {
    Backend::norm_attention_inputs(h, x, norm_w, eps, w_offset, wq, wk, wv, a, cache, meta, pending);
    return;
  }
  const ops::AttnInputsArgs g = attn_inputs_args(a, cache, meta);
  ops::QkvEpilogue e;
  e.bias[0] = g.bq, e.bias[1] = g.bk, e.bias[2] = g.bv;
  e.rotate[0] = e.rotate[1] = true;
  e.cache[1] = g.k_cache, e.cache[2] = g.v_cache;
  e.positions = g.positions;
  e.head_dim = g.head_dim, e.rope_dims = g.rope_dims, e.theta = g.theta, e.neox = g.neox;
  e.cache_stride = g.cache_stride, e.f16 = g.f16, e.n_slots = g.n_slots, e.slots = g.slots, e.err = err_;
  if (g.q_norm || g.k_norm) {
    // Per-head norms (Gemma 3): counters per head and token chunk of the launch find the
    // warp that completes a head.
    e.head_norm[0] = g.q_norm, e.head_norm[1] = g.k_norm, e.norm_eps = g.norm_eps;
    e.head_base[0] = 0, e.head_base[1] = g.n_heads;
    e.count_stride = g.n_heads + g.n_kv_heads;
    e.head_counts = head_counts(head_counters(g.n_heads + g.n_kv_heads, N));
  }
  const MatmulTarget qkv[] = {{a.q, wq}, {a.k, wk}, {a.v, wv}};
  QuantizedX q32, qk;
  norm_for_matmuls(h, x, norm_w, eps, w_offset, qkv, 3, q32, qk, pending);
  matmul_shared_cached(h, qkv, 3, q32, qk, &e);
}

void CudaBackend::attention_residual(const Tensor& dst, const Tensor& wo, const Tensor& tmp, const Tensor& out,
                                     const Tensor& q, const KVLayer& cache, const PagedAttnMeta& meta,
                                     const AttnShape& s) {
  attention_projection(dst, wo, tmp, out, q, cache, meta, s, /*accumulate=*/true);
}

void CudaBackend::attention_matmul(const Tensor& dst, const Tensor& wo, const Tensor& out, const Tensor& q,
                                   const KVLayer& cache, const PagedAttnMeta& meta, const AttnShape& s) {
  attention_projection(dst, wo, Tensor{}, out, q, cache, meta, s, /*accumulate=*/false);
}

void CudaBackend::attention_projection(const Tensor& dst, const Tensor& wo, const Tensor& tmp, const Tensor& out,
                                       const Tensor& q, const KVLayer& cache, const PagedAttnMeta& meta,
                                       const AttnShape& s, bool accumulate) {
  const int64_t N = q.rows(), C = out.cols();
  const int block = act_block(wo.type);
  // The quantization happens where a KV head's group is written: groups of whole blocks.
  const bool fused = quantized(wo.type) && !gemm_on(N) && N > 0 && s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0 &&
                     C == static_cast<int64_t>(s.n_heads) * s.head_dim &&
                     (s.n_heads / s.n_kv_heads) * s.head_dim % block == 0;
  if (!fused) {
    if (accumulate) Backend::attention_residual(dst, wo, tmp, out, q, cache, meta, s);
    else Backend::attention_matmul(dst, wo, out, q, cache, meta, s);
    return;
  }
  const ops::MatmulWeight mw = check_matmul(dst, wo, out);
  QuantizedX aq = act_scratch(N, C, block);
  attention(out, q, cache, meta, s, &aq);
  if (mw.w) launch_matmul(wo.type, &mw, 1, out, &aq, accumulate);
}

void CudaBackend::norm_residual(const Tensor& dst, const Tensor& x, const Tensor& w, float eps) {
  require(x.type == DType::F32 && w.type == DType::F32 && dst.type == DType::F32, "norm_residual", "F32 only");
  require(w.numel() == x.cols() && dst.cols() == x.cols() && dst.rows() == x.rows(), "norm_residual", "shape mismatch");
  ops::rms_norm_add(rt_->stream(), rows_of(ptr(x, "norm_residual"), x), reinterpret_cast<const float*>(ptr(w, "norm_residual")),
                    x.rows(), x.cols(), eps, rows_of(ptr(dst, "norm_residual"), dst));
  launched("rms_norm + add");
}

void CudaBackend::norm_for_matmuls(const Tensor& h, const Tensor& x, const Tensor& norm_w, float eps, float w_offset,
                                   const MatmulTarget* targets, int n, QuantizedX& q32, QuantizedX& qk,
                                   const PendingResidual* pending) {
  bool want32 = false, want256 = false;
  for (int i = 0; i < n; ++i)
    if (quantized(targets[i].w.type)) (act_block(targets[i].w.type) == 256 ? want256 : want32) = true;
  const int64_t N = x.rows(), C = x.cols();
  // Whether this kernel quantizes the row for the targets (else their matmuls do, or they
  // are float weights); with a pending residual the kernel is worth it either way.
  const bool quant = (want32 || want256) && !(want32 && C % 32) && !(want256 && C % 256);
  if (!quant && !pending) {
    rms_norm(h, x, norm_w, eps, w_offset);
    return;
  }
  require(x.type == DType::F32 && norm_w.type == DType::F32 && h.type == DType::F32, "rms_norm", "F32 only");
  require(norm_w.numel() == C && h.cols() == C && h.rows() == N, "rms_norm", "shape mismatch");
  ops::PendingAdd add;
  if (pending) {
    const Tensor& src = pending->src;
    require(src.type == DType::F32 && pending->w.type == DType::F32, "norm_residual", "F32 only");
    require(src.rows() == N && src.cols() == C && pending->w.numel() == C, "norm_residual", "shape mismatch");
    add.src = reinterpret_cast<float*>(ptr(src, "norm_residual")), add.ld = ld_of(src);
    add.w = reinterpret_cast<const float*>(ptr(pending->w, "norm_residual")), add.eps = pending->eps;
  }
  // The quantized activations the kernel writes are the matmuls' caches (q null: not wanted).
  for (QuantizedX* a : {quant && want32 ? &q32 : nullptr, quant && want256 ? &qk : nullptr}) {
    if (!a) continue;
    *a = act_scratch(N, C, a == &q32 ? 32 : 256);
  }
  ops::rms_norm_quant(rt_->stream(), rows_of(ptr(h, "rms_norm"), h), reinterpret_cast<float*>(ptr(x, "rms_norm")),
                      ld_of(x), reinterpret_cast<const float*>(ptr(norm_w, "rms_norm")), N, C, eps, w_offset, q32, qk,
                      add);
  launched(pending ? (quant ? "rms_norm + add + rms_norm + quantize" : "rms_norm + add + rms_norm") : "rms_norm + quantize");
}

void CudaBackend::norm_matmul_shared(const Tensor& h, const Tensor& x, const Tensor& norm_w, float eps, float w_offset,
                                     const MatmulTarget* targets, int n, const PendingResidual* pending) {
  if (gemm_on(x.rows()) || x.rows() == 0 || x.cols() == 0) {
    Backend::norm_matmul_shared(h, x, norm_w, eps, w_offset, targets, n, pending);
    return;
  }
  QuantizedX q32, qk;
  norm_for_matmuls(h, x, norm_w, eps, w_offset, targets, n, q32, qk, pending);
  matmul_shared_cached(h, targets, n, q32, qk);
}

void CudaBackend::act_matmul_residual(const Tensor& dst, const Tensor& gate, const Tensor& up, Activation act,
                                      const Tensor& w, const Tensor& tmp) {
  act_projection(dst, gate, up, act, w, tmp, /*accumulate=*/true);
}

void CudaBackend::act_matmul(const Tensor& dst, const Tensor& gate, const Tensor& up, Activation act, const Tensor& w) {
  act_projection(dst, gate, up, act, w, Tensor{}, /*accumulate=*/false);
}

void CudaBackend::act_projection(const Tensor& dst, const Tensor& gate, const Tensor& up, Activation act,
                                 const Tensor& w, const Tensor& tmp, bool accumulate) {
  const int64_t N = gate.rows(), C = gate.cols();
  const int block = act_block(w.type);
  if (!quantized(w.type) || gemm_on(N) || N == 0 || C == 0 || C % block) {
    if (accumulate) Backend::act_matmul_residual(dst, gate, up, act, w, tmp);
    else Backend::act_matmul(dst, gate, up, act, w);
    return;
  }
  check_binary("gated_act", gate, gate, up);
  require(up.rows() == gate.rows(), "gated_act", "gate/up rows differ");
  const ops::MatmulWeight mw = check_matmul(dst, w, gate);
  QuantizedX aq = act_scratch(N, C, block);
  ops::gated_act_quant(rt_->stream(), act, rows_of(ptr(gate, "gated_act"), gate),
                       reinterpret_cast<const float*>(ptr(gate, "gated_act")), ld_of(gate),
                       reinterpret_cast<const float*>(ptr(up, "gated_act")), ld_of(up), N, C, aq);
  launched("gated_act + quantize");
  if (mw.w) launch_matmul(w.type, &mw, 1, gate, &aq, accumulate);
}

int* CudaBackend::head_counts(int64_t n) {
  const size_t bytes = sizeof(int) * static_cast<size_t>(std::max<int64_t>(n, 1));
  const size_t before = scratch_[kScratchHeadCounts].size;
  uint8_t* p = scratch(kScratchHeadCounts, bytes);
  // New memory (which may start where the old did: the arena reuses a freed range) is zeroed
  // once; the kernels leave it zero.
  if (scratch_[kScratchHeadCounts].size != before) rt_->zero(p, scratch_[kScratchHeadCounts].size);
  return reinterpret_cast<int*>(p);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
