// Matmul driver: validates, quantizes the activations once, and splits the weight rows
// over the thread pool. The arithmetic lives in the per-ISA kernels (matmul_impl.hpp).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/pack_q32.hpp"
#include "kernels/cpu/pack_tiles.hpp"
#include "kernels/cpu/quant.hpp"

namespace tandem::kernels::cpu {
namespace {

using mm::Family;

// Below this many activation values (N*C) every thread quantizes the activations into its
// own buffer inside the one pool job: cheaper than a second pool round trip (decode).
constexpr int64_t kPrivateQuantLimit = 16384;
// Target bytes of weights per scheduling chunk: small enough to balance two threads on a
// busy machine, large enough for long sequential streams, and (for prefill) small enough
// that the chunk stays in L2 while every token chunk reuses it. (Each new chunk restarts a
// thread's stream, whose first lines the prefetch 4 KB ahead has not asked for: 256 KB
// against 64 KB, three alternating runs on Zen 4, took the 0.5B draft's T(1) from 13.1-14.9
// to 12.5-13.7 ms and the 1.5B's from 29.0-36.7 to 26.4-31.8 ms. The thread-count bound
// below keeps at least 4 chunks per thread for balance.)
constexpr size_t kChunkBytes = 256 * 1024;
// Calls of at most one token chunk (decode, drafts, verification) read every weight once:
// no chunk is reused from cache, so they are not cut into kChunkBytes units but claimed by
// guided self-scheduling: a thread takes 1/(kGuide * threads) of the 16-row groups still
// left, at least one. The first claims are long streams; the last are single groups, so
// the threads finish together. (With a fixed 1/8 of the rows per unit, one thread waited
// for the other's last unit: 2.4-2.8% of a 0.5B draft pass and 1.5% of the 1.5B's at
// N = 1 on a 2-core Xeon, against 1.3% and 0.7% claimed this way; the passes took 1-4%
// less, in alternating runs.)
constexpr int kGuide = 2;

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

// The layout a job's weights are in.
enum class Layout { File, Packed, Tiled };
Layout layout_of(const MatmulJob& j) { return j.tiled ? Layout::Tiled : j.packed ? Layout::Packed : Layout::File; }
const char* layout_name(Layout l) { return l == Layout::Tiled ? "tiled " : l == Layout::Packed ? "packed " : ""; }

mm::RowsFn rows_of(const mm::IsaKernels& k, DType t, Layout layout) {
  if (layout == Layout::Tiled) return k.rows_tiled ? k.rows_tiled(t) : nullptr;
  if (layout == Layout::Packed) return k.rows_packed ? k.rows_packed(t) : nullptr;
  return k.rows ? k.rows(t) : nullptr;
}

// The best kernel set at or below `isa` that handles type t in that row layout (a level may
// leave a type to the one below; the scalar level takes every packed or tiled type by
// unpacking).
// Rows and activation quantizer must come from the same set.
const mm::IsaKernels* pick(Isa isa, DType t, Layout layout) {
  for (int l = static_cast<int>(isa); l >= 0; --l) {
    const mm::IsaKernels* k = kernels_at(static_cast<Isa>(l));
    if (k && rows_of(*k, t, layout)) return k;
  }
  return nullptr;
}

[[noreturn]] void fail(const std::string& msg) { throw std::invalid_argument("matmul: " + msg); }

// One weight matrix of a call, resolved to its kernels.
struct Resolved {
  mm::Args args;  // xq filled in once the activations are quantized
  mm::RowsFn fn = nullptr;
  bool tiled = false;  // weights in 16-row tiles (pack_tiles.hpp)
  int64_t R = 0, chunk = 1;
  int64_t call_tokens = mm::kMaxTokens;  // tokens a kernel call takes
  int quant = -1;          // index into the call's distinct quantizers; -1: float family
  int64_t first_unit = 0;  // this matrix's first work unit in the call's numbering
};

// A distinct activation quantization of a call: matrices whose kernels read the same layout
// in the same code order share one.
struct QuantUse {
  mm::QuantFn fn = nullptr;
  mm::ActLayout layout;
  size_t offset = 0;  // byte offset of its rows in the activation buffer
};

}  // namespace

namespace mm {
const IsaKernels* active_kernels() { return kernels_at(active_isa()); }
void install_avx512_kernels_for_testing(const IsaKernels* k) { g_avx512_for_testing.store(k, std::memory_order_release); }
const IsaKernels* avx512_kernels_for_testing() { return g_avx512_for_testing.load(std::memory_order_acquire); }
}  // namespace mm

void matmul_multi(ThreadPool& pool, const MatmulJob* jobs, int n_jobs, int64_t C, const float* x, int64_t ldx,
                  int64_t N) {
  if (n_jobs < 0 || n_jobs > kMaxMatmulJobs) fail("between 0 and " + std::to_string(kMaxMatmulJobs) + " matrices per call");
  if (C < 0 || N < 0) fail("negative size");
  Resolved res[kMaxMatmulJobs];
  QuantUse quants[kMaxMatmulJobs];
  int n_quants = 0, n_res = 0;
  int64_t total_rows = 0;
  const Isa isa = active_isa();
  for (int j = 0; j < n_jobs; ++j) {
    const MatmulJob& job = jobs[j];
    const Family fam = mm::family(job.wt);
    if (fam == Family::None) fail(std::string("unsupported weight type ") + dtype_name(job.wt));
    if (job.R < 0) fail("negative size");
    if (C % dtype_info(job.wt).block_size != 0)
      fail("C=" + std::to_string(C) + " is not a multiple of the " + dtype_name(job.wt) + " block size");
  }
  for (int j = 0; j < n_jobs; ++j) {
    const MatmulJob& job = jobs[j];
    if (job.R == 0 || N == 0) continue;
    if (C == 0) {
      for (int64_t t = 0; t < N; ++t) std::fill(job.y + t * job.ldy, job.y + t * job.ldy + job.R, 0.0f);
      continue;
    }
    if (job.packed && job.tiled) fail("a weight is either packed or tiled");
    const Layout wl = layout_of(job);
    const mm::IsaKernels* kset = pick(isa, job.wt, wl);
    if (!kset) fail(std::string("no kernel for ") + layout_name(wl) + dtype_name(job.wt));
    Resolved& r = res[n_res++];
    r.fn = rows_of(*kset, job.wt, wl);
    // AMX for passes of several tokens over tiled weights: the AVX-512 set's bits (its
    // kernels are AVX-512 code around the tile products). Under the tests' emulated set only
    // the model's path runs: amx_available() needs native AVX-512, and the tests install the
    // model's kernels compiled as that set is (tests/support/amx_model.hpp).
    if (wl == Layout::Tiled && N >= mm::kAmxMinTokens &&
        (kset == mm::avx512_kernels() || kset == mm::avx512_kernels_for_testing()))
      if (const mm::RowsFn f = mm::amx_rows(job.wt)) r.fn = f, r.call_tokens = mm::kAmxMaxTokens;
    r.tiled = job.tiled;
    r.R = job.R;
    r.args.wt = job.wt;
    r.args.w = static_cast<const uint8_t*>(job.w);
    r.args.w_stride = job.w_stride;
    r.args.R = job.R;
    r.args.C = C;
    r.args.x = x;
    r.args.ldx = ldx;
    r.args.y = job.y;
    r.args.ldy = job.ldy;
    total_rows += job.R;
    const Family fam = mm::family(job.wt);
    if (fam == Family::Float) continue;
    const mm::QuantFn qf = kset->quant(job.wt);
    const mm::ActLayout layout = mm::act_layout(fam, C);
    int q = 0;
    while (q < n_quants && !(quants[q].fn == qf && quants[q].layout.block == layout.block)) ++q;
    if (q == n_quants) {
      quants[q].fn = qf;
      quants[q].layout = layout;
      quants[q].offset = q == 0 ? 0 : quants[q - 1].offset + quants[q - 1].layout.row_bytes * static_cast<size_t>(N);
      ++n_quants;
    }
    r.quant = q;
    r.args.xl = layout;
  }
  if (n_res == 0) return;

  // Work units: row chunks of every matrix, numbered matrix after matrix. A chunk is small
  // enough to balance the threads over all the call's rows, and (for prefill) to stay in L2
  // while every token chunk reuses it.
  const int nth = pool.size();
  const bool guided = N <= mm::kMaxTokens;
  const int64_t by_threads = std::max<int64_t>(1, (total_rows + 4 * nth - 1) / (4 * nth));
  int64_t n_units = 0;
  for (int i = 0; i < n_res; ++i) {
    Resolved& r = res[i];
    const size_t rb = tandem::row_bytes(r.args.wt, C);
    const int64_t by_bytes = static_cast<int64_t>(std::max<size_t>(1, kChunkBytes / std::max<size_t>(1, rb)));
    r.chunk = guided ? mm::kTileRows : std::min(by_bytes, by_threads);
    // Tiled weights: chunks of whole 16-row groups (a chunk could end inside one, but then
    // its kernel would compute lanes it drops).
    if (r.tiled)
      r.chunk = (r.chunk + mm::kTileRows - 1) / mm::kTileRows * mm::kTileRows;
    r.first_unit = n_units;
    n_units += (r.R + r.chunk - 1) / r.chunk;
  }
  std::atomic<int64_t> next{0};
  // Guided: claims runs of units off the shared counter (a run may cross from one matrix
  // into the next), each multiplied as one range per matrix.
  auto work_guided = [&](const Resolved* rs) {
    int i = 0;
    for (int64_t cur = next.load(std::memory_order_relaxed); cur < n_units;) {
      const int64_t take = std::max<int64_t>(1, (n_units - cur) / (kGuide * nth));
      if (!next.compare_exchange_weak(cur, cur + take, std::memory_order_relaxed)) continue;  // cur reloaded
      for (int64_t u = cur, end = cur + take; u < end;) {
        while (i + 1 < n_res && rs[i + 1].first_unit <= u) ++i;  // a thread's claims only grow
        const Resolved& r = rs[i];
        const int64_t stop = std::min(end, i + 1 < n_res ? rs[i + 1].first_unit : n_units);
        r.fn(r.args, (u - r.first_unit) * r.chunk, std::min(r.R, (stop - r.first_unit) * r.chunk), 0, N);
        u = stop;
      }
      cur = next.load(std::memory_order_relaxed);
    }
  };
  // Pulls units off the shared counter until none are left; each unit runs every token
  // chunk so its weights are reused from cache.
  auto work = [&](const Resolved* rs) {
    if (guided) return work_guided(rs);
    int i = 0;
    for (int64_t u; (u = next.fetch_add(1, std::memory_order_relaxed)) < n_units;) {
      while (i + 1 < n_res && rs[i + 1].first_unit <= u) ++i;  // a thread's units only grow
      const Resolved& r = rs[i];
      const int64_t r0 = (u - r.first_unit) * r.chunk, r1 = std::min(r.R, r0 + r.chunk);
      for (int64_t t0 = 0; t0 < N; t0 += r.call_tokens) r.fn(r.args, r0, r1, t0, std::min(N, t0 + r.call_tokens));
    }
  };
  if (n_quants == 0) {
    pool.run([&](int, int) { work(res); });
    return;
  }

  const QuantUse& last = quants[n_quants - 1];
  const size_t act_bytes = last.offset + last.layout.row_bytes * static_cast<size_t>(N);
  auto quantize = [&](uint8_t* buf, int64_t t) {
    for (int q = 0; q < n_quants; ++q)
      quants[q].fn(x + t * ldx, quants[q].layout,
                   buf + quants[q].offset + quants[q].layout.row_bytes * static_cast<size_t>(t));
  };
  auto point_at = [&](Resolved* rs, const uint8_t* buf) {
    for (int i = 0; i < n_res; ++i)
      if (rs[i].quant >= 0) rs[i].args.xq = buf + quants[rs[i].quant].offset;
  };
  if (N * C <= kPrivateQuantLimit) {
    // Decode-sized: every thread quantizes into its own buffer inside the one pool job,
    // cheaper than a second pool round trip.
    pool.run([&](int, int) {
      Resolved local[kMaxMatmulJobs];
      std::copy(res, res + n_res, local);
      uint8_t* buf = t_act_scratch.get(act_bytes);
      for (int64_t t = 0; t < N; ++t) quantize(buf, t);
      point_at(local, buf);
      work(local);
    });
    return;
  }
  // Shared activations: quantize in parallel by tokens, then (second run = barrier) multiply.
  uint8_t* buf = t_act_scratch.get(act_bytes);
  pool.run([&](int ith, int nth_) {
    for (int64_t t = ith; t < N; t += nth_) quantize(buf, t);
  });
  point_at(res, buf);
  pool.run([&](int, int) { work(res); });
}

void matmul(ThreadPool& pool, DType wt, const void* w, size_t w_stride, int64_t R, int64_t C, const float* x,
            int64_t ldx, int64_t N, float* y, int64_t ldy) {
  const MatmulJob job{wt, w, w_stride, R, y, ldy};
  matmul_multi(pool, &job, 1, C, x, ldx, N);
}

// TANDEM_PACK=0 keeps every weight in the file's layout (for side-by-side timings, and a
// way around a suspected problem with the packed kernels).
static bool packing_allowed() {
  static const bool on = [] {
    const char* v = std::getenv("TANDEM_PACK");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

bool packs_rows(DType t) {
  const mm::IsaKernels* k = kernels_at(active_isa());
  return packing_allowed() && mm::q32_packs(t) && active_isa() != Isa::Scalar && k &&
         rows_of(*k, t, Layout::Packed);
}

bool tiles_rows(DType t) {
  const mm::IsaKernels* k = kernels_at(active_isa());
  return packing_allowed() && mm::has_tiles(t) && active_isa() != Isa::Scalar && k && rows_of(*k, t, Layout::Tiled);
}

void pack_rows(ThreadPool& pool, DType t, const void* src, size_t src_stride, void* dst, int64_t rows,
               int64_t cols) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  if (!mm::q32_packs(t)) fail(std::string("no packed row layout for ") + dtype_name(t));
  if (rows < 0 || cols < 0 || cols % 32 != 0) fail("packing needs whole 32-element blocks");
  const size_t rb = tandem::row_bytes(t, cols);
  pool.run([&](int ith, int nth) {
    for (int64_t r = ith; r < rows; r += nth)
      mm::pack_q32_row(t, s + static_cast<size_t>(r) * src_stride, d + static_cast<size_t>(r) * rb, cols);
  });
}

void tile_rows(ThreadPool& pool, DType t, const void* src, size_t src_stride, void* dst, int64_t rows,
               int64_t cols) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  if (!mm::has_tiles(t)) fail(std::string("no tiled layout for ") + dtype_name(t));
  if (rows < 0 || cols < 0 || cols % dtype_info(t).block_size != 0) fail("tiling needs whole blocks");
  const size_t rb = tandem::row_bytes(t, cols);
  const int64_t G = mm::kTileRows, groups = rows / G;
  pool.run([&](int ith, int nth) {
    for (int64_t g = ith; g < groups; g += nth)
      mm::tile_group(t, s + static_cast<size_t>(g * G) * src_stride, src_stride, d + static_cast<size_t>(g * G) * rb, cols);
  });
  for (int64_t r = groups * G; r < rows; ++r)  // the last rows % 16 stay as stored
    std::memcpy(d + static_cast<size_t>(r) * rb, s + static_cast<size_t>(r) * src_stride, rb);
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

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  for (int l = static_cast<int>(active_isa()); l > 0; --l) {
    const mm::IsaKernels* k = kernels_at(static_cast<Isa>(l));
    if (k && k->quantize && k->quantize(t, src, dst, n)) return;
  }
  quantize_row_ref(t, src, dst, n);
}

}  // namespace tandem::kernels::cpu
