// Matmul driver: validates, quantizes the activations once, and splits the weight rows
// over the thread pool. The arithmetic lives in the per-ISA kernels (matmul_impl.hpp).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/quant.hpp"

namespace tandem::kernels::cpu {
namespace {

using mm::Family;

// Below this many activation values (N*C) every thread quantizes the activations into its
// own buffer inside the one pool job: cheaper than a second pool round trip (decode).
constexpr int64_t kPrivateQuantLimit = 16384;
// Target bytes of weights per scheduling chunk: small enough to balance two threads on a
// busy machine, large enough for long sequential streams, and (for prefill) small enough
// that the chunk stays in L2 while every token chunk reuses it.
constexpr size_t kChunkBytes = 64 * 1024;

// A growable 64-byte aligned buffer, one per thread, reused across calls.
class Scratch {
 public:
  uint8_t* get(size_t n) {
    if (n > cap_) {
      ptr_.reset(static_cast<uint8_t*>(::operator new(n, std::align_val_t{64})));
      cap_ = n;
    }
    return ptr_.get();
  }

 private:
  struct Free {
    void operator()(uint8_t* p) const { ::operator delete(p, std::align_val_t{64}); }
  };
  std::unique_ptr<uint8_t, Free> ptr_;
  size_t cap_ = 0;
};
thread_local Scratch t_act_scratch;

std::atomic<const mm::IsaKernels*> g_avx512_for_testing{nullptr};

const mm::IsaKernels* kernels_at(Isa isa) {
  switch (isa) {
    case Isa::Avx512:
      if (const mm::IsaKernels* k = g_avx512_for_testing.load(std::memory_order_acquire)) return k;
      return mm::avx512_kernels();
    case Isa::Avx2: return mm::avx2_kernels();
    case Isa::Scalar: return &mm::scalar_kernels();
  }
  return nullptr;
}

// The best kernel set at or below `isa` that handles type t (a level may leave a type to
// the one below). Rows and activation quantizer must come from the same set.
const mm::IsaKernels* pick(Isa isa, DType t) {
  for (int l = static_cast<int>(isa); l >= 0; --l) {
    const mm::IsaKernels* k = kernels_at(static_cast<Isa>(l));
    if (k && k->rows && k->rows(t)) return k;
  }
  return nullptr;
}

[[noreturn]] void fail(const std::string& msg) { throw std::invalid_argument("matmul: " + msg); }

// Pulls row chunks off a shared counter until none are left; each chunk runs every token
// chunk so the chunk's weights are reused from cache.
void work(const mm::Args& a, mm::RowsFn fn, std::atomic<int64_t>& next, int64_t chunk, int64_t R,
          int64_t N) {
  for (;;) {
    const int64_t r0 = next.fetch_add(chunk, std::memory_order_relaxed);
    if (r0 >= R) return;
    const int64_t r1 = std::min(R, r0 + chunk);
    for (int64_t t0 = 0; t0 < N; t0 += mm::kMaxTokens) fn(a, r0, r1, t0, std::min(N, t0 + mm::kMaxTokens));
  }
}

}  // namespace

namespace mm {
void install_avx512_kernels_for_testing(const IsaKernels* k) { g_avx512_for_testing.store(k, std::memory_order_release); }
const IsaKernels* avx512_kernels_for_testing() { return g_avx512_for_testing.load(std::memory_order_acquire); }
}  // namespace mm

void matmul(ThreadPool& pool, DType wt, const void* w, size_t w_stride, int64_t R, int64_t C,
            const float* x, int64_t ldx, int64_t N, float* y, int64_t ldy) {
  const Family fam = mm::family(wt);
  if (fam == Family::None) fail(std::string("unsupported weight type ") + dtype_name(wt));
  if (R < 0 || C < 0 || N < 0) fail("negative size");
  const auto& info = dtype_info(wt);
  if (C % info.block_size != 0)
    fail("C=" + std::to_string(C) + " is not a multiple of the " + dtype_name(wt) + " block size");
  if (R == 0 || N == 0) return;
  if (C == 0) {
    for (int64_t t = 0; t < N; ++t) std::fill(y + t * ldy, y + t * ldy + R, 0.0f);
    return;
  }

  const mm::IsaKernels* kset = pick(active_isa(), wt);
  if (!kset) fail(std::string("no kernel for ") + dtype_name(wt));
  const mm::RowsFn fn = kset->rows(wt);

  mm::Args a;
  a.wt = wt;
  a.w = static_cast<const uint8_t*>(w);
  a.w_stride = w_stride;
  a.C = C;
  a.x = x;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;

  const int nth = pool.size();
  const size_t row_bytes = tandem::row_bytes(wt, C);
  const int64_t by_bytes = static_cast<int64_t>(std::max<size_t>(1, kChunkBytes / std::max<size_t>(1, row_bytes)));
  const int64_t by_threads = std::max<int64_t>(1, (R + 4 * nth - 1) / (4 * nth));
  const int64_t chunk = std::min(by_bytes, by_threads);
  std::atomic<int64_t> next{0};

  if (fam == Family::Float) {
    pool.run([&](int, int) { work(a, fn, next, chunk, R, N); });
    return;
  }

  a.xl = mm::act_layout(fam, C);
  const mm::QuantFn quant = kset->quant(wt);
  const size_t rb = a.xl.row_bytes;
  if (N * C <= kPrivateQuantLimit) {
    pool.run([&](int, int) {
      mm::Args local = a;
      uint8_t* buf = t_act_scratch.get(rb * static_cast<size_t>(N));
      for (int64_t t = 0; t < N; ++t) quant(x + t * ldx, a.xl, buf + rb * static_cast<size_t>(t));
      local.xq = buf;
      work(local, fn, next, chunk, R, N);
    });
    return;
  }
  // Shared activations: quantize in parallel by tokens, then (second run = barrier) multiply.
  uint8_t* buf = t_act_scratch.get(rb * static_cast<size_t>(N));
  pool.run([&](int ith, int nth_) {
    for (int64_t t = ith; t < N; t += nth_) quant(x + t * ldx, a.xl, buf + rb * static_cast<size_t>(t));
  });
  a.xq = buf;
  pool.run([&](int, int) { work(a, fn, next, chunk, R, N); });
}

void matmul_ref(DType wt, const void* w, size_t w_stride, int64_t R, int64_t C, const float* x,
                int64_t ldx, int64_t N, float* y, int64_t ldy) {
  std::vector<float> row(static_cast<size_t>(C));
  const auto* wb = static_cast<const uint8_t*>(w);
  for (int64_t r = 0; r < R; ++r) {
    dequantize_row_ref(wt, wb + static_cast<size_t>(r) * w_stride, row.data(), C);
    for (int64_t t = 0; t < N; ++t) {
      double s = 0.0;
      for (int64_t c = 0; c < C; ++c) s += static_cast<double>(row[static_cast<size_t>(c)]) * x[t * ldx + c];
      y[t * ldy + r] = static_cast<float>(s);
    }
  }
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  for (int l = static_cast<int>(active_isa()); l > 0; --l) {
    const mm::IsaKernels* k = kernels_at(static_cast<Isa>(l));
    if (k && k->dequant && k->dequant(t, src, dst, n)) return;
  }
  dequantize_row_ref(t, src, dst, n);
}

}  // namespace tandem::kernels::cpu
