// The CPU implementation of the backend seam. Memory is host memory (HostBuffer); ops run
// synchronously on the calling thread plus a persistent worker pool. The methods are
// defined in one file per kind of op (cpu_backend_*.cpp).
#pragma once
#include <memory>

#include "kernels/backend.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace tandem::kernels::cpu {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int n_threads, bool pin_threads = false);

  DeviceKind kind() const override { return DeviceKind::CPU; }
  std::string name() const override;
  std::string description() const override;
  ThreadPool& pool() { return pool_; }

  std::unique_ptr<Buffer> alloc(size_t bytes) override;
  std::unique_ptr<Buffer> alloc_zeroed(size_t bytes, const char* what = "a zeroed buffer") override;
  std::unique_ptr<Buffer> wrap_host(const void* data, size_t bytes) override;
  void upload(const Tensor& dst, const void* src, size_t bytes) override;
  void download(void* dst, const Tensor& src, size_t bytes) override;
  void fill_zero(const Tensor& dst) override;
  void synchronize() override {}
  bool packs_weights(DType t) const override;
  RowLayout packed_layout(DType t) const override;
  std::unique_ptr<Buffer> pack_weight(DType t, const void* src, int64_t rows, int64_t cols) override;

  void get_rows(const Tensor& dst, const Tensor& table, const Tensor& ids) override;
  void rms_norm(const Tensor& dst, const Tensor& x, const Tensor& w, float eps, float w_offset) override;
  void matmul(const Tensor& dst, const Tensor& w, const Tensor& x) override;
  void matmul_shared(const Tensor& x, const MatmulTarget* targets, int n) override;
  void add(const Tensor& dst, const Tensor& a, const Tensor& b) override;
  void mul(const Tensor& dst, const Tensor& a, const Tensor& b) override;
  void scale(const Tensor& dst, float s) override;
  void gated_act(const Tensor& dst, const Tensor& gate, const Tensor& up, Activation act) override;
  void rope(const Tensor& x, const Tensor& positions, int n_heads, int head_dim, int rope_dims,
            float theta, RopeStyle style) override;
  void kv_store(const KVLayer& cache, const Tensor& k, const Tensor& v, const PagedAttnMeta& meta) override;
  void kv_move(const KVLayer& cache, const Tensor& from, const Tensor& to) override;
  void paged_attention(const Tensor& out, const Tensor& q, const KVLayer& cache, const PagedAttnMeta& meta,
                       int n_heads, int n_kv_heads, int head_dim, float scale, int sliding_window,
                       float softcap) override;

 private:
  ThreadPool pool_;
};

// Row conversions between F16 and F32 (dispatched to F16C when the CPU has it).
void fp16_to_f32_row(const uint16_t* src, float* dst, int64_t n);
void f32_to_fp16_row(const float* src, uint16_t* dst, int64_t n);

}  // namespace tandem::kernels::cpu
