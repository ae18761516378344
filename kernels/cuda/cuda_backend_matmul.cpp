// CudaBackend's matmuls (kernels/cuda/ops/matmul_small.cu, matmul_mma.cu): the checks, the
// activations quantized once per block size, the kernel chosen by token count (the same bits
// either way), targets of one weight type in one launch, and the opt-in GEMM path.
#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/cuda_backend_detail.hpp"
#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/weight_planes.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {

using namespace backend_detail;

ops::MatmulWeight CudaBackend::check_matmul(const Tensor& dst, const Tensor& w, const Tensor& x) {
  require(x.type == DType::F32 && dst.type == DType::F32, "matmul", "x and dst must be F32");
  require(ops::weight_type_supported(w.type), "matmul", std::string("unsupported weight type ") + dtype_name(w.type));
  const bool planes = w.layout == RowLayout::Packed && planes_type(w.type);
  require(w.layout == RowLayout::File || planes, "matmul", "a weight packed for another backend");
  require(x.cols() == w.cols(), "matmul", "x cols " + std::to_string(x.cols()) + " != w cols " + std::to_string(w.cols()));
  require(dst.cols() == w.rows() && dst.rows() == x.rows(), "matmul", "dst shape mismatch");
  if (x.rows() == 0 || w.rows() == 0) return {nullptr, 0, 0, {nullptr, 0}};
  const uint8_t* wp = ptr(w, "matmul");
  if (planes) {
    // Every plane of a row starts 16-byte aligned (weight_planes.hpp) when the row does.
    require(reinterpret_cast<uintptr_t>(wp) % 16 == 0 && w.row_stride() == planes_row_stride(w.type, w.cols()),
            "matmul", std::string(dtype_name(w.type)) + " planes need their own row stride and 16-byte alignment");
  } else if (quantized(w.type)) {
    // The kernels load block fields a word (or 16 bytes) at a time (kernels/cuda/qcodes.cuh):
    // every block must start at a multiple of the largest power of two dividing its size,
    // as whole-block rows from an arena granule do. A view that breaks it is refused here,
    // where a GPU would fault inside the kernel.
    const size_t tb = dtype_info(w.type).type_size, align = std::min<size_t>(tb & (~tb + 1), 16);
    require(reinterpret_cast<uintptr_t>(wp) % align == 0 && w.row_stride() % align == 0, "matmul",
            std::string(dtype_name(w.type)) + " weights need rows aligned to " + std::to_string(align) +
                " bytes (offset " + std::to_string(w.offset) + ", row stride " + std::to_string(w.row_stride()) + ")");
  }
  return {wp, w.row_stride(), w.rows(), rows_of(ptr(dst, "matmul"), dst), planes, w.type};
}

// The activations of x as int8 blocks of `block` elements: quantized once per block size
// and matmul_shared call (cache), in one scratch slot per block size so that q/k/v of mixed
// quantizations keep both.
CudaBackend::QuantizedX CudaBackend::quantize_x(const Tensor& x, int block, QuantizedX* cache) {
  if (cache && cache->q && cache->block == block) return *cache;
  const QuantizedX a = act_scratch(x.rows(), x.cols(), block);
  ops::quantize_act(rt_->stream(), reinterpret_cast<const float*>(ptr(x, "matmul")), ld_of(x), x.rows(), x.cols(), a);
  launched("matmul (quantize activations)");
  if (cache) *cache = a;
  return a;
}

CudaBackend::QuantizedX CudaBackend::act_scratch(int64_t N, int64_t C, int block) {
  uint8_t* s = scratch(kScratchActQ + (block == 256 ? 3 : 0), act_quant_bytes(N, C, block));
  QuantizedX a;
  a.block = block;
  a.q = reinterpret_cast<int8_t*>(s);
  a.d = reinterpret_cast<float*>(s + act_quant_codes_bytes(N, C));
  a.s = reinterpret_cast<int16_t*>(s + act_quant_codes_bytes(N, C) + act_quant_scales_bytes(N, C, block));
  return a;
}

void CudaBackend::matmul_one(const Tensor& dst, const Tensor& w, const Tensor& x, QuantizedX* cache) {
  const ops::MatmulWeight mw = check_matmul(dst, w, x);
  if (!mw.w) return;
  const int64_t N = x.rows(), R = w.rows(), C = w.cols();
  const float* xp = reinterpret_cast<const float*>(ptr(x, "matmul"));
  if (C == 0) {
    for (int64_t t = 0; t < N; ++t) rt_->zero(mw.y.p + t * mw.y.ld, sizeof(float) * static_cast<size_t>(R));
    return;
  }
  if (gemm_on(N) && !mw.planes) {  // (planes: the quantized kernels at every size)
    // The opt-in path: dequantize row tiles to F32 and multiply them with a GEMM.
    require(!rt_->capturing(), "matmul", "the GEMM path (" + std::to_string(opt_.gemm_min_tokens) +
                                             " tokens or more) is not captured into graphs");
    const int64_t tile_rows = gemm_tile_rows(R, C);
    float* tile = reinterpret_cast<float*>(scratch(kScratchTile, sizeof(float) * static_cast<size_t>(tile_rows * C)));
    for (int64_t r0 = 0; r0 < R; r0 += tile_rows) {
      const int64_t nr = std::min(tile_rows, R - r0);
      ops::dequant_rows(rt_->stream(), w.type, mw.w, w.row_stride(), r0, nr, C, tile);
      launched("matmul (dequantize tile)");
      gemm_->abt_f32(N, nr, C, xp, ld_of(x), tile, C, mw.y.p + r0, mw.y.ld);
    }
    return;
  }
  launch_matmul(w.type, &mw, 1, x, cache);
}

void CudaBackend::launch_matmul(DType t, const ops::MatmulWeight* ws, int n_w, const Tensor& x, QuantizedX* cache,
                                bool accumulate, const ops::QkvEpilogue* epi) {
  const int64_t N = x.rows(), C = x.cols();
  if (!quantized(t)) {  // float weights: tensor cores at every token count
    ops::matmul_mma_float(rt_->stream(), t, ws, n_w, C, reinterpret_cast<const float*>(ptr(x, "matmul")), ld_of(x), N,
                          accumulate, epi);
    launched_matmul("matmul (tensor cores)", ws, n_w, C);
    return;
  }
  const QuantizedX a = quantize_x(x, act_block(t), cache);
  if (N >= opt_.mma_min_tokens) {
    ops::matmul_mma(rt_->stream(), ws, n_w, C, a, N, accumulate, epi);
    launched_matmul("matmul (tensor cores)", ws, n_w, C);
    return;
  }
  ops::matmul_small(rt_->stream(), ws, n_w, C, a, N, accumulate, epi);
  launched_matmul("matmul", ws, n_w, C);
}

void CudaBackend::launched_matmul(const char* op, const ops::MatmulWeight* ws, int n_w, int64_t cols) {
  launches_.fetch_add(1, std::memory_order_relaxed);
  rt_->check_launch(op);
  if (!profiling_) return;
  std::string types;
  int64_t rows = 0;
  uint64_t bytes = 0;
  for (int i = 0; i < n_w; ++i) {
    const std::string t = dtype_name(ws[i].type);
    if (types.find(t) == std::string::npos) types += (types.empty() ? "" : "+") + t;
    rows += ws[i].rows;
    bytes += static_cast<uint64_t>(ws[i].rows) * ws[i].w_stride;
  }
  profile_mark(std::string(op) + " " + types + " " + std::to_string(rows) + "x" + std::to_string(cols), bytes);
}

bool CudaBackend::gemm_on(int64_t tokens) const { return opt_.gemm_min_tokens > 0 && tokens >= opt_.gemm_min_tokens; }

void CudaBackend::matmul(const Tensor& dst, const Tensor& w, const Tensor& x) { matmul_one(dst, w, x, nullptr); }

// Targets of one weight type go out in one launch (up to ops::kMaxMatmulGroup): q/k/v and
// gate/up of a layer are one kernel each where their types agree. Each row's arithmetic is
// the single matmul's, so the results are its bits.
void CudaBackend::matmul_shared(const Tensor& x, const MatmulTarget* targets, int n) {
  QuantizedX q32, qk;
  matmul_shared_cached(x, targets, n, q32, qk);
}

void CudaBackend::matmul_shared_cached(const Tensor& x, const MatmulTarget* targets, int n, QuantizedX& q32,
                                       QuantizedX& qk, const ops::QkvEpilogue* epi) {
  // Targets already launched, a bit each (no allocation per call: this runs for every layer).
  require(n >= 0 && n <= 64, "matmul_shared", "at most 64 targets");
  uint64_t done = 0;
  for (int i = 0; i < n; ++i) {
    if (done >> i & 1u) continue;
    const DType t = targets[i].w.type;
    const RowLayout layout = targets[i].w.layout;
    QuantizedX* cache = act_block(t) == 256 ? &qk : &q32;
    if (x.cols() == 0 || gemm_on(x.rows())) {
      require(!epi, "matmul_shared", "an epilogue needs the matmul kernels");
      matmul_one(targets[i].dst, targets[i].w, x, cache);
      continue;
    }
    ops::MatmulWeight ws[ops::kMaxMatmulGroup];
    ops::QkvEpilogue e = epi ? *epi : ops::QkvEpilogue{};  // members renumbered as launched
    int n_w = 0;
    // The members: the targets of target i's type and layout, then, for quantized weights,
    // those of one other that may share its launch (ops::matmul_pair: Q4_K_M's q/k/v).
    const auto planes_of = [](const Tensor& w) { return w.layout == RowLayout::Packed; };
    int other = -1;  // the first target of the second type
    for (int pass = 0; pass < 2; ++pass)
      for (int j = i; j < n && n_w < ops::kMaxMatmulGroup; ++j) {
        if (done >> j & 1u) continue;
        const Tensor& w = targets[j].w;
        const bool mine = w.type == t && w.layout == layout;
        if (pass == 0 && !mine) {
          if (other < 0 && quantized(t) && quantized(w.type) &&
              ops::matmul_pair(t, planes_of(targets[i].w), w.type, planes_of(w)))
            other = j;
          continue;
        }
        if (pass == 1 && (other < 0 || w.type != targets[other].w.type || w.layout != targets[other].w.layout)) continue;
        done |= uint64_t{1} << j;
        const ops::MatmulWeight mw = check_matmul(targets[j].dst, w, x);
        if (!mw.w) continue;
        if (epi) {
          e.bias[n_w] = epi->bias[j], e.rotate[n_w] = epi->rotate[j], e.cache[n_w] = epi->cache[j];
          e.head_norm[n_w] = epi->head_norm[j], e.head_base[n_w] = epi->head_base[j];
        }
        ws[n_w++] = mw;
      }
    if (n_w > 0) launch_matmul(t, ws, n_w, x, cache, false, epi ? &e : nullptr);
  }
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
