// CPU backend ops against plain double-precision references written here.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "kernels/backend.hpp"
#include "kernels/cpu/fp16.hpp"

namespace tandem::kernels {
namespace {

struct Host {
  std::unique_ptr<Backend> be = make_cpu_backend(2);
  std::vector<std::unique_ptr<Buffer>> bufs;
  Tensor f32(const std::vector<float>& v, int64_t cols) {
    bufs.push_back(be->alloc(v.size() * 4));
    Tensor t = make_tensor(bufs.back().get(), DType::F32, cols, static_cast<int64_t>(v.size()) / cols);
    be->upload(t, v.data(), v.size() * 4);
    return t;
  }
  Tensor i32(const std::vector<int32_t>& v, int64_t cols) {
    bufs.push_back(be->alloc(std::max<size_t>(v.size(), 1) * 4));
    Tensor t = make_tensor(bufs.back().get(), DType::I32, cols, static_cast<int64_t>(v.size()) / cols);
    be->upload(t, v.data(), v.size() * 4);
    return t;
  }
  std::vector<float> get(const Tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    be->download(v.data(), t, v.size() * 4);
    return v;
  }
};

std::vector<float> randn(size_t n, uint32_t seed, float s = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, s);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

TEST(CpuOps, RmsNormMatchesReference) {
  Host h;
  const int rows = 5, cols = 37;
  auto x = randn(rows * cols, 1), w = randn(cols, 2);
  Tensor tx = h.f32(x, cols), tw = h.f32(w, cols), ty = h.f32(std::vector<float>(x.size()), cols);
  h.be->rms_norm(ty, tx, tw, 1e-5f, 0.0f);
  auto y = h.get(ty);
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < cols; ++i) ss += double(x[r * cols + i]) * x[r * cols + i];
    const double inv = 1.0 / std::sqrt(ss / cols + 1e-5);
    for (int i = 0; i < cols; ++i) EXPECT_NEAR(y[r * cols + i], x[r * cols + i] * inv * w[i], 1e-5);
  }
}

TEST(CpuOps, RopeRotatesPairsOrHalves) {
  for (RopeStyle style : {RopeStyle::Normal, RopeStyle::NeoX}) {
    Host h;
    const int n_heads = 3, hd = 8, n = 4;
    auto x = randn(n * n_heads * hd, 3);
    std::vector<int32_t> pos = {0, 1, 7, 100};
    Tensor tx = h.f32(x, n_heads * hd), tp = h.i32(pos, n);
    h.be->rope(tx, tp, n_heads, hd, hd, 10000.0f, style);
    auto y = h.get(tx);
    for (int t = 0; t < n; ++t)
      for (int hh = 0; hh < n_heads; ++hh)
        for (int i = 0; i < hd / 2; ++i) {
          const double ang = pos[t] * std::pow(10000.0, -2.0 * i / hd);
          const int a = style == RopeStyle::NeoX ? i : 2 * i, b = style == RopeStyle::NeoX ? i + hd / 2 : 2 * i + 1;
          const size_t base = (size_t(t) * n_heads + hh) * hd;
          const double x0 = x[base + a], x1 = x[base + b];
          EXPECT_NEAR(y[base + a], x0 * std::cos(ang) - x1 * std::sin(ang), 1e-4);
          EXPECT_NEAR(y[base + b], x0 * std::sin(ang) + x1 * std::cos(ang), 1e-4);
        }
  }
}

TEST(CpuOps, GatedActivations) {
  Host h;
  auto g = randn(40, 4, 2.0f), u = randn(40, 5);
  for (Activation act : {Activation::SiLU, Activation::GeluTanh}) {
    Tensor tg = h.f32(g, 8), tu = h.f32(u, 8), ty = h.f32(std::vector<float>(40), 8);
    h.be->gated_act(ty, tg, tu, act);
    auto y = h.get(ty);
    for (size_t i = 0; i < g.size(); ++i) {
      const double x = g[i];
      const double a = act == Activation::SiLU
                           ? x / (1 + std::exp(-x))
                           : 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
      EXPECT_NEAR(y[i], a * u[i], 1e-5);
    }
  }
}

// Two sequences with scrambled block tables, GQA, F16 and F32 caches, optional window
// and soft-cap, against a dense double-precision softmax attention.
void check_attention(DType kv_type, int window, float softcap) {
  Host h;
  const int n_heads = 4, n_kv = 2, hd = 16, bs = 4, n_blocks = 12;
  const int kvw = n_kv * hd;
  const std::vector<int> lens = {7, 13};  // total positions per sequence after this batch
  const std::vector<int> n_new = {3, 1};  // new (query) tokens per sequence
  std::vector<std::vector<int32_t>> tables = {{5, 2}, {9, 0, 11, 3}};
  // Dense K/V per sequence, position-major.
  std::vector<std::vector<float>> K, V;
  for (int s = 0; s < 2; ++s) {
    K.push_back(randn(size_t(lens[s]) * kvw, 10 + s));
    V.push_back(randn(size_t(lens[s]) * kvw, 20 + s));
  }
  // Fill the paged cache directly.
  const size_t row = row_bytes(kv_type, kvw);
  std::vector<uint8_t> kc(row * n_blocks * bs), vc(row * n_blocks * bs);
  auto put = [&](std::vector<uint8_t>& c, int slot, const float* src) {
    for (int i = 0; i < kvw; ++i) {
      if (kv_type == DType::F16) {
        reinterpret_cast<uint16_t*>(c.data() + slot * row)[i] = cpu::f32_to_fp16(src[i]);
      } else {
        reinterpret_cast<float*>(c.data() + slot * row)[i] = src[i];
      }
    }
  };
  for (int s = 0; s < 2; ++s)
    for (int p = 0; p < lens[s]; ++p) {
      const int slot = tables[s][p / bs] * bs + p % bs;
      put(kc, slot, &K[s][size_t(p) * kvw]);
      put(vc, slot, &V[s][size_t(p) * kvw]);
    }
  h.bufs.push_back(h.be->alloc(kc.size()));
  KVLayer layer;
  layer.k = make_tensor(h.bufs.back().get(), kv_type, kvw, n_blocks * bs);
  h.be->upload(layer.k, kc.data(), kc.size());
  h.bufs.push_back(h.be->alloc(vc.size()));
  layer.v = make_tensor(h.bufs.back().get(), kv_type, kvw, n_blocks * bs);
  h.be->upload(layer.v, vc.data(), vc.size());

  std::vector<int32_t> pos, seq, bt(2 * 4, 0);
  for (int s = 0; s < 2; ++s) {
    for (size_t j = 0; j < tables[s].size(); ++j) bt[s * 4 + j] = tables[s][j];
    for (int i = 0; i < n_new[s]; ++i) {
      pos.push_back(lens[s] - n_new[s] + i);
      seq.push_back(s);
    }
  }
  const int n = static_cast<int>(pos.size());
  auto q = randn(size_t(n) * n_heads * hd, 30);
  PagedAttnMeta meta{h.i32(pos, n), h.i32(seq, n), h.i32(bt, 4), h.i32(std::vector<int32_t>(n, 0), n), bs};
  Tensor tq = h.f32(q, n_heads * hd), to = h.f32(std::vector<float>(q.size()), n_heads * hd);
  const float scale = 1.0f / std::sqrt(float(hd));
  h.be->paged_attention(to, tq, layer, meta, n_heads, n_kv, hd, scale, window, softcap);
  auto out = h.get(to);

  auto rounded = [&](float x) { return kv_type == DType::F16 ? cpu::fp16_to_f32(cpu::f32_to_fp16(x)) : x; };
  for (int t = 0; t < n; ++t)
    for (int head = 0; head < n_heads; ++head) {
      const int s = seq[t], kvh = head / (n_heads / n_kv);
      const int j0 = window > 0 ? std::max(0, pos[t] - window + 1) : 0;
      std::vector<double> sc;
      for (int j = j0; j <= pos[t]; ++j) {
        double d = 0;
        for (int i = 0; i < hd; ++i)
          d += double(q[(size_t(t) * n_heads + head) * hd + i]) * rounded(K[s][size_t(j) * kvw + kvh * hd + i]);
        d *= scale;
        if (softcap > 0) d = softcap * std::tanh(d / softcap);
        sc.push_back(d);
      }
      const double mx = *std::max_element(sc.begin(), sc.end());
      double z = 0;
      for (auto& x : sc) z += (x = std::exp(x - mx));
      for (int i = 0; i < hd; ++i) {
        double acc = 0;
        for (int j = j0; j <= pos[t]; ++j) acc += sc[j - j0] / z * rounded(V[s][size_t(j) * kvw + kvh * hd + i]);
        EXPECT_NEAR(out[(size_t(t) * n_heads + head) * hd + i], acc, 1e-4) << "token " << t << " head " << head;
      }
    }
}

TEST(CpuOps, PagedAttentionF32) { check_attention(DType::F32, 0, 0.0f); }
TEST(CpuOps, PagedAttentionF16) { check_attention(DType::F16, 0, 0.0f); }
TEST(CpuOps, PagedAttentionSlidingWindowAndSoftcap) { check_attention(DType::F16, 3, 5.0f); }

TEST(CpuOps, KvStoreWritesTheMappedSlots) {
  Host h;
  const int kvw = 8;
  auto k = randn(2 * kvw, 40), v = randn(2 * kvw, 41);
  h.bufs.push_back(h.be->alloc(16 * kvw * 4));
  KVLayer layer;
  layer.k = make_tensor(h.bufs.back().get(), DType::F32, kvw, 8);
  layer.v = make_tensor(h.bufs.back().get(), DType::F32, kvw, 8, 8 * kvw * 4);
  h.be->fill_zero(layer.k);
  h.be->fill_zero(layer.v);
  PagedAttnMeta meta;
  meta.slot_mapping = h.i32({6, 1}, 2);
  h.be->kv_store(layer, h.f32(k, kvw), h.f32(v, kvw), meta);
  auto kc = h.get(layer.k);
  for (int i = 0; i < kvw; ++i) {
    EXPECT_EQ(kc[6 * kvw + i], k[i]);
    EXPECT_EQ(kc[1 * kvw + i], k[kvw + i]);
    EXPECT_EQ(kc[0 * kvw + i], 0.0f);
  }
  meta.slot_mapping = h.i32({8, 0}, 2);  // out of range: refused, not written
  EXPECT_THROW(h.be->kv_store(layer, h.f32(k, kvw), h.f32(v, kvw), meta), std::logic_error);
}

}  // namespace
}  // namespace tandem::kernels
