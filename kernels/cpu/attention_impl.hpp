// Paged causal attention for one (query token, kv head) pair at a time, with a streaming
// (online) softmax so memory stays O(head_dim) whatever the context length. Included by
// attention_generic.cpp and attention_avx2.cpp, which compile it for different ISAs;
// the F16C path converts cached F16 rows eight values at a time.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "kernels/cpu/fp16.hpp"

namespace tandem::kernels::cpu {

struct AttnArgs {
  const float* q = nullptr;  // [n_tokens, ldq], heads contiguous
  int64_t ldq = 0;
  float* out = nullptr;
  int64_t ldo = 0;
  const uint8_t* k = nullptr;  // cache rows: slot-major, n_kv_heads*head_dim each
  const uint8_t* v = nullptr;
  size_t kv_row_bytes = 0;
  bool kv_f16 = false;
  int64_t n_slots = 0;
  const int32_t* pos = nullptr;
  const int32_t* seq = nullptr;
  const int32_t* block_table = nullptr;
  int64_t bt_cols = 0;
  int64_t n_seqs = 0;
  int32_t block_size = 0;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
  int window = 0;
  float softcap = 0.0f;
};

namespace attn_detail {

inline void load_row(const uint8_t* src, bool f16, float* dst, int n) {
  if (!f16) {
    std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(n));
    return;
  }
  const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
  int i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
#endif
  for (; i < n; ++i) dst[i] = fp16_to_f32(h[i]);
}

inline float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
#pragma GCC ivdep
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace attn_detail

// Tasks are numbered t * n_kv_heads + kv_head; runs tasks [begin, end).
inline void attention_tasks(const AttnArgs& a, int64_t begin, int64_t end) {
  using namespace attn_detail;
  const int hd = a.head_dim;
  const int group = a.n_heads / a.n_kv_heads;
  std::vector<float> krow(static_cast<size_t>(hd)), vrow(static_cast<size_t>(hd));
  std::vector<float> acc(static_cast<size_t>(group) * hd), m(static_cast<size_t>(group)),
      l(static_cast<size_t>(group)), sc(static_cast<size_t>(group));
  for (int64_t task = begin; task < end; ++task) {
    const int64_t t = task / a.n_kv_heads;
    const int kvh = static_cast<int>(task % a.n_kv_heads);
    const int32_t p = a.pos[t];
    const int32_t s = a.seq[t];
    if (s < 0 || s >= a.n_seqs) throw std::out_of_range("attention: sequence index out of range");
    const int32_t* bt = a.block_table + static_cast<int64_t>(s) * a.bt_cols;
    const int32_t j0 = a.window > 0 ? std::max<int32_t>(0, p - a.window + 1) : 0;
    if (static_cast<int64_t>(p) / a.block_size >= a.bt_cols)
      throw std::out_of_range("attention: position " + std::to_string(p) + " beyond the block table");
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(m.begin(), m.end(), -INFINITY);
    std::fill(l.begin(), l.end(), 0.0f);
    const float* qh = a.q + t * a.ldq + static_cast<int64_t>(kvh) * group * hd;
    for (int32_t j = j0; j <= p; ++j) {
      const int64_t slot = static_cast<int64_t>(bt[j / a.block_size]) * a.block_size + j % a.block_size;
      if (slot < 0 || slot >= a.n_slots) throw std::out_of_range("attention: cache slot out of range");
      const size_t off = static_cast<size_t>(slot) * a.kv_row_bytes +
                         static_cast<size_t>(kvh) * hd * (a.kv_f16 ? 2 : 4);
      load_row(a.k + off, a.kv_f16, krow.data(), hd);
      load_row(a.v + off, a.kv_f16, vrow.data(), hd);
      for (int g = 0; g < group; ++g) {
        float x = dot(qh + static_cast<int64_t>(g) * hd, krow.data(), hd) * a.scale;
        if (a.softcap > 0.0f) x = a.softcap * std::tanh(x / a.softcap);
        float* ag = acc.data() + static_cast<size_t>(g) * hd;
        if (x > m[g]) {  // new running max: rescale what was accumulated so far
          const float r = std::exp(m[g] - x);
          l[g] *= r;
          for (int i = 0; i < hd; ++i) ag[i] *= r;
          m[g] = x;
        }
        const float e = std::exp(x - m[g]);
        l[g] += e;
        for (int i = 0; i < hd; ++i) ag[i] += e * vrow[i];
      }
    }
    float* oh = a.out + t * a.ldo + static_cast<int64_t>(kvh) * group * hd;
    for (int g = 0; g < group; ++g) {
      const float inv = l[g] > 0.0f ? 1.0f / l[g] : 0.0f;
      for (int i = 0; i < hd; ++i) oh[static_cast<int64_t>(g) * hd + i] = acc[static_cast<size_t>(g) * hd + i] * inv;
    }
  }
}

void attention_tasks_generic(const AttnArgs& a, int64_t begin, int64_t end);
void attention_tasks_avx2(const AttnArgs& a, int64_t begin, int64_t end);

}  // namespace tandem::kernels::cpu
