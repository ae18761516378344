// The fused steps of the backend seam (kernels/backend.hpp) written as the ops they fuse:
// what every backend computes unless it has a faster way to the same bits.
#include "kernels/backend.hpp"

namespace tandem::kernels {

namespace {
// x [n_tokens, heads * head_dim] viewed as [n_tokens * heads, head_dim] (packed rows).
Tensor per_head(const Tensor& x, int heads, int head_dim) {
  Tensor r = x;
  r.ne[0] = head_dim;
  r.ne[1] = x.rows() * heads;
  r.ne[2] = r.ne[3] = 1;
  return r;
}
}  // namespace

void Backend::attention_inputs(const AttnInputs& a, const KVLayer& cache, const PagedAttnMeta& meta) {
  if (a.bq.buf) add(a.q, a.q, a.bq);
  if (a.bk.buf) add(a.k, a.k, a.bk);
  if (a.bv.buf) add(a.v, a.v, a.bv);
  if (a.q_norm.buf) rms_norm(per_head(a.q, a.n_heads, a.head_dim), per_head(a.q, a.n_heads, a.head_dim), a.q_norm, a.norm_eps);
  if (a.k_norm.buf)
    rms_norm(per_head(a.k, a.n_kv_heads, a.head_dim), per_head(a.k, a.n_kv_heads, a.head_dim), a.k_norm, a.norm_eps);
  rope(a.q, a.positions, a.n_heads, a.head_dim, a.rope_dims, a.theta, a.style);
  rope(a.k, a.positions, a.n_kv_heads, a.head_dim, a.rope_dims, a.theta, a.style);
  kv_store(cache, a.k, a.v, meta);
}

void Backend::norm_matmul_shared(const Tensor& h, const Tensor& x, const Tensor& norm_w, float eps, float w_offset,
                                 const MatmulTarget* targets, int n, const PendingResidual* pending) {
  if (pending) norm_residual(x, pending->src, pending->w, pending->eps);
  rms_norm(h, x, norm_w, eps, w_offset);
  matmul_shared(h, targets, n);
}

void Backend::act_matmul_residual(const Tensor& dst, const Tensor& gate, const Tensor& up, Activation act,
                                  const Tensor& w, const Tensor& tmp) {
  gated_act(gate, gate, up, act);
  matmul_residual(dst, w, gate, tmp);
}

void Backend::act_matmul(const Tensor& dst, const Tensor& gate, const Tensor& up, Activation act, const Tensor& w) {
  gated_act(gate, gate, up, act);
  matmul(dst, w, gate);
}

void Backend::norm_attention_inputs(const Tensor& h, const Tensor& x, const Tensor& norm_w, float eps, float w_offset,
                                    const Tensor& wq, const Tensor& wk, const Tensor& wv, const AttnInputs& a,
                                    const KVLayer& cache, const PagedAttnMeta& meta,
                                    const PendingResidual* pending) {
  const MatmulTarget qkv[] = {{a.q, wq}, {a.k, wk}, {a.v, wv}};
  norm_matmul_shared(h, x, norm_w, eps, w_offset, qkv, 3, pending);
  attention_inputs(a, cache, meta);
}

void Backend::norm_residual(const Tensor& dst, const Tensor& x, const Tensor& w, float eps) {
  rms_norm(x, x, w, eps);
  add(dst, dst, x);
}

void Backend::attention_residual(const Tensor& dst, const Tensor& wo, const Tensor& tmp, const Tensor& out,
                                 const Tensor& q, const KVLayer& cache, const PagedAttnMeta& meta,
                                 const AttnShape& s) {
  paged_attention(out, q, cache, meta, s.n_heads, s.n_kv_heads, s.head_dim, s.scale, s.sliding_window, s.softcap);
  matmul_residual(dst, wo, out, tmp);
}

void Backend::attention_matmul(const Tensor& dst, const Tensor& wo, const Tensor& out, const Tensor& q,
                               const KVLayer& cache, const PagedAttnMeta& meta, const AttnShape& s) {
  paged_attention(out, q, cache, meta, s.n_heads, s.n_kv_heads, s.head_dim, s.scale, s.sliding_window, s.softcap);
  matmul(dst, wo, out);
}

void Backend::matmul_residual(const Tensor& dst, const Tensor& w, const Tensor& x, const Tensor& tmp) {
  matmul(tmp, w, x);
  add(dst, dst, tmp);
}

}  // namespace tandem::kernels
