// CpuBackend: KV-cache writes and paged attention, dispatched to the best ISA at run time.
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/cpu/attention_impl.hpp"
#include "kernels/cpu/convert_impl.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/host_buffer.hpp"

namespace tandem::kernels::cpu {

void fp16_to_f32_row_avx2(const uint16_t* s, float* d, int64_t n);
void f32_to_fp16_row_avx2(const float* s, uint16_t* d, int64_t n);

namespace {
bool has_f16c_avx2() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
  }();
  return ok;
}
void require(bool ok, const char* op, const std::string& what) {
  if (!ok) throw std::logic_error(std::string("cpu backend: ") + op + ": " + what);
}
}  // namespace

void fp16_to_f32_row(const uint16_t* src, float* dst, int64_t n) {
  if (has_f16c_avx2()) return fp16_to_f32_row_avx2(src, dst, n);
  convert_detail::to_f32(src, dst, n);
}

void f32_to_fp16_row(const float* src, uint16_t* dst, int64_t n) {
  if (has_f16c_avx2()) return f32_to_fp16_row_avx2(src, dst, n);
  convert_detail::to_f16(src, dst, n);
}

void CpuBackend::kv_store(const KVLayer& cache, const Tensor& k, const Tensor& v, const PagedAttnMeta& meta) {
  require(k.type == DType::F32 && v.type == DType::F32, "kv_store", "k, v must be F32");
  require(cache.k.type == cache.v.type && (cache.k.type == DType::F16 || cache.k.type == DType::F32), "kv_store",
          "cache must be F16 or F32");
  require(k.cols() == cache.k.cols() && v.cols() == cache.v.cols(), "kv_store", "row width mismatch");
  require(meta.slot_mapping.numel() == k.rows() && k.rows() == v.rows(), "kv_store", "one slot per token");
  const int32_t* slots = host_as<int32_t>(meta.slot_mapping);
  uint8_t* kc = host_ptr(cache.k);
  uint8_t* vc = host_ptr(cache.v);
  const int64_t n_slots = cache.k.rows();
  const int64_t w = k.cols();
  for (int64_t t = 0; t < k.rows(); ++t) {
    require(slots[t] >= 0 && slots[t] < n_slots, "kv_store", "slot " + std::to_string(slots[t]) + " out of range");
    const float* kr = reinterpret_cast<const float*>(host_ptr(k) + t * k.row_stride());
    const float* vr = reinterpret_cast<const float*>(host_ptr(v) + t * v.row_stride());
    uint8_t* kd = kc + static_cast<size_t>(slots[t]) * cache.k.row_stride();
    uint8_t* vd = vc + static_cast<size_t>(slots[t]) * cache.v.row_stride();
    if (cache.k.type == DType::F16) {
      f32_to_fp16_row(kr, reinterpret_cast<uint16_t*>(kd), w);
      f32_to_fp16_row(vr, reinterpret_cast<uint16_t*>(vd), w);
    } else {
      std::memcpy(kd, kr, sizeof(float) * static_cast<size_t>(w));
      std::memcpy(vd, vr, sizeof(float) * static_cast<size_t>(w));
    }
  }
}

void CpuBackend::paged_attention(const Tensor& out, const Tensor& q, const KVLayer& cache,
                                 const PagedAttnMeta& meta, int n_heads, int n_kv_heads, int head_dim,
                                 float scale, int sliding_window, float softcap) {
  require(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "paged_attention", "n_heads must be a multiple of n_kv_heads");
  require(q.type == DType::F32 && out.type == DType::F32, "paged_attention", "q, out F32");
  require(q.cols() >= static_cast<int64_t>(n_heads) * head_dim && out.cols() >= static_cast<int64_t>(n_heads) * head_dim,
          "paged_attention", "q/out rows too short");
  require(cache.k.cols() == static_cast<int64_t>(n_kv_heads) * head_dim, "paged_attention", "cache width mismatch");
  require(meta.positions.numel() == q.rows() && meta.seq_index.numel() == q.rows(), "paged_attention",
          "positions/seq_index must have one entry per token");
  require(meta.block_size > 0, "paged_attention", "block_size must be positive");
  AttnArgs a;
  a.q = host_as<float>(q);
  a.ldq = static_cast<int64_t>(q.row_stride() / sizeof(float));
  a.out = host_as<float>(out);
  a.ldo = static_cast<int64_t>(out.row_stride() / sizeof(float));
  a.k = host_ptr(cache.k);
  a.v = host_ptr(cache.v);
  a.kv_row_bytes = cache.k.row_stride();
  a.kv_f16 = cache.k.type == DType::F16;
  a.n_slots = cache.k.rows();
  a.pos = host_as<int32_t>(meta.positions);
  a.seq = host_as<int32_t>(meta.seq_index);
  a.block_table = host_as<int32_t>(meta.block_table);
  a.bt_cols = meta.block_table.cols();
  a.n_seqs = meta.block_table.rows();
  a.block_size = meta.block_size;
  a.n_heads = n_heads;
  a.n_kv_heads = n_kv_heads;
  a.head_dim = head_dim;
  a.scale = scale;
  a.window = sliding_window;
  a.softcap = softcap;
  const int64_t n_tasks = q.rows() * n_kv_heads;
  auto fn = has_f16c_avx2() ? &attention_tasks_avx2 : &attention_tasks_generic;
  // Exceptions must not escape a worker thread: capture the first and rethrow here.
  std::exception_ptr err;
  std::mutex mu;
  pool_.parallel_for(n_tasks, [&](int64_t b, int64_t e) {
    try {
      fn(a, b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu);
      if (!err) err = std::current_exception();
    }
  });
  if (err) std::rethrow_exception(err);
}

}  // namespace tandem::kernels::cpu
