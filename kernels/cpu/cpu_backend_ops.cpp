// CpuBackend: row-wise ops (embedding lookup, RMSNorm, elementwise, activations, RoPE, matmul).
// These are memory-light next to matmul and attention; plain loops that GCC vectorizes,
// split across the pool by rows when there are enough of them to pay for the wake-up.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/activation_impl.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/host_buffer.hpp"
#include "kernels/cpu/quant.hpp"

namespace tandem::kernels::cpu {
namespace {

// cos and sin of every (position, frequency) pair of a rope call, [t][i] interleaved: angle
// pos * theta^(-2i/d), in double, rounded to float. A forward pass rotates q and k of every
// layer at the same positions (2 x n_layer calls, with one theta, or two for Gemma 3's local
// and global layers), so the table of the last positions is kept per (theta, dims), per
// thread: the values are the ones each call would compute, only not recomputed.
struct RopeAngles {
  float theta = 0.0f;
  int rope_dims = 0;
  std::vector<double> inv_freq;
  std::vector<int32_t> pos;
  std::vector<float> cs;
};
thread_local RopeAngles t_rope[2];
thread_local int t_rope_next = 0;

const float* rope_angles(const int32_t* pos, int64_t n, int rope_dims, float theta) {
  RopeAngles* e = nullptr;
  for (RopeAngles& r : t_rope)
    if (r.rope_dims == rope_dims && r.theta == theta) e = &r;
  const int half = rope_dims / 2;
  if (!e) {
    e = &t_rope[t_rope_next];
    t_rope_next = (t_rope_next + 1) % 2;
    e->theta = theta;
    e->rope_dims = rope_dims;
    e->inv_freq.resize(static_cast<size_t>(half));
    for (int i = 0; i < half; ++i) e->inv_freq[i] = std::pow(static_cast<double>(theta), -2.0 * i / rope_dims);
    e->pos.clear();
    e->cs.clear();
  }
  if (e->pos.size() == static_cast<size_t>(n) && std::equal(pos, pos + n, e->pos.begin())) return e->cs.data();
  e->pos.assign(pos, pos + n);
  e->cs.resize(static_cast<size_t>(n) * half * 2);
  for (int64_t t = 0; t < n; ++t)
    for (int i = 0; i < half; ++i) {
      const double ang = static_cast<double>(pos[t]) * e->inv_freq[i];
      e->cs[2 * (t * half + i)] = static_cast<float>(std::cos(ang));
      e->cs[2 * (t * half + i) + 1] = static_cast<float>(std::sin(ang));
    }
  return e->cs.data();
}

void require(bool ok, const char* op, const std::string& what) {
  if (!ok) throw std::logic_error(std::string("cpu backend: ") + op + ": " + what);
}

// Runs body(r0, r1) over rows, in parallel only when the work is big enough.
template <typename F>
void for_rows(ThreadPool& pool, int64_t rows, int64_t cols, F&& body) {
  if (rows * cols < 16384 || rows < 2) {
    body(int64_t{0}, rows);
    return;
  }
  pool.parallel_for(rows, body);
}

float* row_f32(const Tensor& t, int64_t r) {
  return reinterpret_cast<float*>(host_ptr(t) + static_cast<size_t>(r) * t.row_stride());
}

// b is either a's shape or a single row broadcast over a's rows.
void check_binary(const char* op, const Tensor& dst, const Tensor& a, const Tensor& b) {
  require(dst.type == DType::F32 && a.type == DType::F32 && b.type == DType::F32, op, "F32 only");
  require(dst.cols() == a.cols() && dst.rows() == a.rows(), op, "dst/a shape mismatch");
  require(b.cols() == a.cols() && (b.rows() == a.rows() || b.rows() == 1), op, "b must match a or be one row");
}

}  // namespace

void CpuBackend::get_rows(const Tensor& dst, const Tensor& table, const Tensor& ids) {
  require(dst.type == DType::F32 && ids.type == DType::I32, "get_rows", "dst F32, ids I32");
  require(dst.cols() == table.cols() && dst.rows() == ids.numel(), "get_rows", "shape mismatch");
  require(table.layout == RowLayout::File, "get_rows", "a packed weight serves only matmul");
  const int32_t* id = host_as<int32_t>(ids);
  const uint8_t* base = host_ptr(table);
  const int64_t n_rows = table.rows();
  for (int64_t i = 0; i < dst.rows(); ++i) {
    require(id[i] >= 0 && id[i] < n_rows, "get_rows", "token id " + std::to_string(id[i]) + " out of range");
    dequantize_row(table.type, base + static_cast<size_t>(id[i]) * table.row_stride(), row_f32(dst, i), table.cols());
  }
}

void CpuBackend::rms_norm(const Tensor& dst, const Tensor& x, const Tensor& w, float eps, float w_offset) {
  require(x.type == DType::F32 && w.type == DType::F32 && dst.type == DType::F32, "rms_norm", "F32 only");
  require(w.numel() == x.cols() && dst.cols() == x.cols() && dst.rows() == x.rows(), "rms_norm", "shape mismatch");
  const int64_t n = x.cols();
  const float* wp = host_as<float>(w);
  for_rows(pool_, x.rows(), n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = row_f32(x, r);
      float* yr = row_f32(dst, r);
      double ss = 0.0;  // double: rows of thousands of large activations lose bits in float
      for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * (wp[i] + w_offset);
    }
  });
}

void CpuBackend::matmul(const Tensor& dst, const Tensor& w, const Tensor& x) {
  require(x.type == DType::F32 && dst.type == DType::F32, "matmul", "x and dst must be F32");
  require(x.cols() == w.cols(), "matmul", "x cols " + std::to_string(x.cols()) + " != w cols " + std::to_string(w.cols()));
  require(dst.cols() == w.rows() && dst.rows() == x.rows(), "matmul", "dst shape mismatch");
  const MatmulJob job{w.type, host_ptr(w), w.row_stride(), w.rows(), host_as<float>(dst),
                      static_cast<int64_t>(dst.row_stride() / sizeof(float)), w.layout == RowLayout::Packed, w.layout == RowLayout::Tiled};
  cpu::matmul_multi(pool_, &job, 1, w.cols(), host_as<float>(x), static_cast<int64_t>(x.row_stride() / sizeof(float)),
                    x.rows());
}

// One activation quantization and one pool job for all targets (see cpu::matmul_multi).
void CpuBackend::matmul_shared(const Tensor& x, const MatmulTarget* targets, int n) {
  require(x.type == DType::F32, "matmul", "x must be F32");
  std::vector<MatmulJob> jobs;
  for (int i = 0; i < n; ++i) {
    const Tensor& dst = targets[i].dst;
    const Tensor& w = targets[i].w;
    require(dst.type == DType::F32, "matmul", "dst must be F32");
    require(x.cols() == w.cols(), "matmul", "x cols " + std::to_string(x.cols()) + " != w cols " + std::to_string(w.cols()));
    require(dst.cols() == w.rows() && dst.rows() == x.rows(), "matmul", "dst shape mismatch");
    jobs.push_back({w.type, host_ptr(w), w.row_stride(), w.rows(), host_as<float>(dst),
                    static_cast<int64_t>(dst.row_stride() / sizeof(float)), w.layout == RowLayout::Packed, w.layout == RowLayout::Tiled});
  }
  // In batches of the driver's limit.
  constexpr size_t kMax = kMaxMatmulJobs;
  for (size_t b = 0; b < jobs.size(); b += kMax)
    cpu::matmul_multi(pool_, jobs.data() + b, static_cast<int>(std::min(kMax, jobs.size() - b)), x.cols(),
                      host_as<float>(x), static_cast<int64_t>(x.row_stride() / sizeof(float)), x.rows());
}

void CpuBackend::add(const Tensor& dst, const Tensor& a, const Tensor& b) {
  check_binary("add", dst, a, b);
  const int64_t n = a.cols();
  const bool bcast = b.rows() == 1 && a.rows() != 1;
  for_rows(pool_, a.rows(), n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* ar = row_f32(a, r);
      const float* br = row_f32(b, bcast ? 0 : r);
      float* yr = row_f32(dst, r);
      for (int64_t i = 0; i < n; ++i) yr[i] = ar[i] + br[i];
    }
  });
}

void CpuBackend::mul(const Tensor& dst, const Tensor& a, const Tensor& b) {
  check_binary("mul", dst, a, b);
  const int64_t n = a.cols();
  const bool bcast = b.rows() == 1 && a.rows() != 1;
  for_rows(pool_, a.rows(), n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* ar = row_f32(a, r);
      const float* br = row_f32(b, bcast ? 0 : r);
      float* yr = row_f32(dst, r);
      for (int64_t i = 0; i < n; ++i) yr[i] = ar[i] * br[i];
    }
  });
}

void CpuBackend::scale(const Tensor& dst, float s) {
  require(dst.type == DType::F32, "scale", "F32 only");
  for (int64_t r = 0; r < dst.rows(); ++r) {
    float* yr = row_f32(dst, r);
    for (int64_t i = 0; i < dst.cols(); ++i) yr[i] *= s;
  }
}

void CpuBackend::gated_act(const Tensor& dst, const Tensor& gate, const Tensor& up, Activation act) {
  check_binary("gated_act", dst, gate, up);
  require(up.rows() == gate.rows(), "gated_act", "gate/up rows differ");
  const int64_t n = gate.cols();
  // AVX2: the vector exp (activation_avx2.cpp); the scalar level: libm (activation.cpp).
  const GatedActFn fn = active_isa() >= Isa::Avx2 ? gated_act_row_avx2 : gated_act_row_scalar;
  // One wide row (a decode pass's feed-forward, 4864-8960 wide): the threads split its
  // columns at multiples of 16, so every element goes through the same vector or tail code
  // as in a whole-row call (the results do not depend on the split).
  if (gate.rows() == 1 && n >= 4096 && pool_.size() > 1) {
    pool_.run([&](int ith, int nth) {
      const int64_t per = (n + nth - 1) / nth, chunk = (per + 15) / 16 * 16;
      const int64_t b = std::min(n, chunk * ith), e = std::min(n, b + chunk);
      if (b < e) fn(row_f32(gate, 0) + b, row_f32(up, 0) + b, row_f32(dst, 0) + b, e - b, act);
    });
    return;
  }
  for_rows(pool_, gate.rows(), n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) fn(row_f32(gate, r), row_f32(up, r), row_f32(dst, r), n, act);
  });
}

void CpuBackend::rope(const Tensor& x, const Tensor& positions, int n_heads, int head_dim, int rope_dims,
                      float theta, RopeStyle style) {
  require(x.type == DType::F32 && positions.type == DType::I32, "rope", "x F32, positions I32");
  require(x.cols() >= static_cast<int64_t>(n_heads) * head_dim, "rope", "row shorter than n_heads*head_dim");
  require(positions.numel() == x.rows(), "rope", "one position per row");
  require(rope_dims > 0 && rope_dims <= head_dim && rope_dims % 2 == 0, "rope", "bad rope_dims");
  const int32_t* pos = host_as<int32_t>(positions);
  const int half = rope_dims / 2;
  const float* cs = rope_angles(pos, x.rows(), rope_dims, theta);
  for (int64_t t = 0; t < x.rows(); ++t) {
    float* row = row_f32(x, t);
    for (int i = 0; i < half; ++i) {
      const float c = cs[2 * (t * half + i)], s = cs[2 * (t * half + i) + 1];
      for (int h = 0; h < n_heads; ++h) {
        float* v = row + static_cast<size_t>(h) * head_dim;
        const int a = style == RopeStyle::NeoX ? i : 2 * i;
        const int b = style == RopeStyle::NeoX ? i + half : 2 * i + 1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
      }
    }
  }
}

}  // namespace tandem::kernels::cpu
