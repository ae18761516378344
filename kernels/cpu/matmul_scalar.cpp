// Portable matmul kernels (no SIMD assumptions) and the scalar kernel set. These run on any
// x86-64 and are the baseline the SIMD kernels are tested against. Each weight block is
// decoded once into plain codes and integer scales, then used for every token of the range.
#include <cstring>
#include <vector>

#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/pack_q32.hpp"
#include "kernels/cpu/pack_tiles.hpp"
#include "kernels/cpu/quant_blocks.hpp"

namespace tandem::kernels::cpu::mm {
namespace {

using u8 = uint8_t;

float f16_at(const u8* p) { return fp16_to_f32(blk::u16_at(p)); }

// ---- 32-element block types ------------------------------------------------------------
// y += (d*dx) * sum(q*xq) + c * s, where s = dx*sum(xq) comes with the activations and c
// folds the weight's offset (-8d, -16d) or min (m) in.
struct Q32Block {
  int q[32];
  float d, c;
};

void dec_q4_0(const u8* b, Q32Block& o) {
  o.d = f16_at(b + blk::q4_0::d);
  o.c = -8.0f * o.d;
  const u8* qs = b + blk::q4_0::qs;
  for (int j = 0; j < 16; ++j) o.q[j] = qs[j] & 0x0f, o.q[j + 16] = qs[j] >> 4;
}
void dec_q4_1(const u8* b, Q32Block& o) {
  o.d = f16_at(b + blk::q4_1::d);
  o.c = f16_at(b + blk::q4_1::m);
  const u8* qs = b + blk::q4_1::qs;
  for (int j = 0; j < 16; ++j) o.q[j] = qs[j] & 0x0f, o.q[j + 16] = qs[j] >> 4;
}
void q5_codes(const u8* qhp, const u8* qs, int* q) {
  const uint32_t qh = blk::u32_at(qhp);
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
    q[j + 16] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
  }
}
void dec_q5_0(const u8* b, Q32Block& o) {
  o.d = f16_at(b + blk::q5_0::d);
  o.c = -16.0f * o.d;
  q5_codes(b + blk::q5_0::qh, b + blk::q5_0::qs, o.q);
}
void dec_q5_1(const u8* b, Q32Block& o) {
  o.d = f16_at(b + blk::q5_1::d);
  o.c = f16_at(b + blk::q5_1::m);
  q5_codes(b + blk::q5_1::qh, b + blk::q5_1::qs, o.q);
}
void dec_q8_0(const u8* b, Q32Block& o) {
  o.d = f16_at(b + blk::q8_0::d);
  o.c = 0.0f;
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + blk::q8_0::qs);
  for (int j = 0; j < 32; ++j) o.q[j] = qs[j];
}

template <void (*Decode)(const u8*, Q32Block&), int BlockBytes>
void rows_q32(const Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const ActLayout& l = a.xl;
  const int64_t nt = t1 - t0;
  for (int64_t r = r0; r < r1; ++r) {
    const u8* wr = a.w + static_cast<size_t>(r) * a.w_stride;
    float acc[kMaxTokens] = {}, off[kMaxTokens] = {};
    for (int64_t b = 0; b < l.nb; ++b) {
      Q32Block wb;
      Decode(wr + b * BlockBytes, wb);
      for (int64_t t = 0; t < nt; ++t) {
        const u8* xr = a.xq + static_cast<size_t>(t0 + t) * l.row_bytes;
        const int8_t* xq = act_q(xr) + 32 * b;
        int isum = 0;
        for (int j = 0; j < 32; ++j) isum += wb.q[j] * xq[j];
        acc[t] += (wb.d * act_d(xr, l)[b]) * static_cast<float>(isum);
        off[t] += wb.c * act_s(xr, l)[b];
      }
    }
    for (int64_t t = 0; t < nt; ++t) a.y[(t0 + t) * a.ldy + r] = acc[t] + off[t];
  }
}

// ---- K-quants ------------------------------------------------------------------------------
// Codes are unsigned; per group of 16 a scale and a min coefficient. Block contribution:
//   dx * (d * sum_g sc[g]*dot(u, xq)_g  -  dm * sum_g mn[g]*bsum[g])
// Types whose codes are offset (Q3_K: -4, Q6_K: -32) express the offset as mn = off*sc.
struct KBlock {
  u8 u[256];
  int sc[16], mn[16];
  float d, dm;
};

void dec_q2_k(const u8* b, KBlock& o) {
  o.d = f16_at(b + blk::q2_k::d);
  o.dm = f16_at(b + blk::q2_k::dmin);
  const u8* sc = b + blk::q2_k::scales;
  for (int g = 0; g < 16; ++g) o.sc[g] = sc[g] & 0x0f, o.mn[g] = sc[g] >> 4;
  const u8* qs = b + blk::q2_k::qs;
  for (int e = 0; e < 256; ++e) o.u[e] = (qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
}
void dec_q3_k(const u8* b, KBlock& o) {
  o.d = o.dm = f16_at(b + blk::q3_k::d);
  uint32_t sw[4];
  blk::unpack_q3k_scales(b + blk::q3_k::scales, sw);
  for (int g = 0; g < 16; ++g) o.sc[g] = static_cast<int>(blk::byte_of(sw, g)) - 32, o.mn[g] = 4 * o.sc[g];
  const u8* hm = b + blk::q3_k::hmask;
  const u8* qs = b + blk::q3_k::qs;
  for (int e = 0; e < 256; ++e) {
    const int lo = (qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
    o.u[e] = static_cast<u8>(lo | (((hm[e % 32] >> (e / 32)) & 1) << 2));
  }
}
void k4_scales(const u8* s, KBlock& o) {
  const blk::K4Scales k = blk::unpack_k4_scales(s);
  for (int g = 0; g < 16; ++g) o.sc[g] = blk::byte_of(k.sc, g / 2), o.mn[g] = blk::byte_of(k.mn, g / 2);
}
void dec_q4_k(const u8* b, KBlock& o) {
  o.d = f16_at(b + blk::q4_k::d);
  o.dm = f16_at(b + blk::q4_k::dmin);
  k4_scales(b + blk::q4_k::scales, o);
  const u8* qs = b + blk::q4_k::qs;
  for (int e = 0; e < 256; ++e) {
    const u8 v = qs[32 * (e / 64) + e % 32];
    o.u[e] = ((e / 32) & 1) ? (v >> 4) : (v & 0x0f);
  }
}
void dec_q5_k(const u8* b, KBlock& o) {
  o.d = f16_at(b + blk::q5_k::d);
  o.dm = f16_at(b + blk::q5_k::dmin);
  k4_scales(b + blk::q5_k::scales, o);
  const u8* qh = b + blk::q5_k::qh;
  const u8* qs = b + blk::q5_k::qs;
  for (int e = 0; e < 256; ++e) {
    const u8 v = qs[32 * (e / 64) + e % 32];
    const int lo = ((e / 32) & 1) ? (v >> 4) : (v & 0x0f);
    o.u[e] = static_cast<u8>(lo | (((qh[e % 32] >> (e / 32)) & 1) << 4));
  }
}
void dec_q6_k(const u8* b, KBlock& o) {
  o.d = o.dm = f16_at(b + blk::q6_k::d);
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + blk::q6_k::scales);
  for (int g = 0; g < 16; ++g) o.sc[g] = sc[g], o.mn[g] = 32 * sc[g];
  const u8* ql = b + blk::q6_k::ql;
  const u8* qh = b + blk::q6_k::qh;
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, k = (e % 128) / 32, l = e % 32;
    const u8 lb = ql[64 * half + l + 32 * (k & 1)];
    const int lo = k < 2 ? (lb & 0x0f) : (lb >> 4);
    o.u[e] = static_cast<u8>(lo | (((qh[32 * half + l] >> (2 * k)) & 3) << 4));
  }
}

template <void (*Decode)(const u8*, KBlock&), int BlockBytes>
void rows_qk(const Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const ActLayout& l = a.xl;
  const int64_t nt = t1 - t0;
  for (int64_t r = r0; r < r1; ++r) {
    const u8* wr = a.w + static_cast<size_t>(r) * a.w_stride;
    float acc[kMaxTokens] = {};
    for (int64_t b = 0; b < l.nb; ++b) {
      KBlock wb;
      Decode(wr + b * BlockBytes, wb);
      for (int64_t t = 0; t < nt; ++t) {
        const u8* xr = a.xq + static_cast<size_t>(t0 + t) * l.row_bytes;
        const int8_t* xq = act_q(xr) + 256 * b;
        const int16_t* bs = act_bsums(xr, l) + 16 * b;
        int isum = 0, msum = 0;
        for (int g = 0; g < 16; ++g) {
          int dot = 0;
          for (int i = 0; i < 16; ++i) dot += wb.u[16 * g + i] * xq[16 * g + i];
          isum += wb.sc[g] * dot;
          msum += wb.mn[g] * bs[g];
        }
        acc[t] += act_d(xr, l)[b] * (wb.d * static_cast<float>(isum) - wb.dm * static_cast<float>(msum));
      }
    }
    for (int64_t t = 0; t < nt; ++t) a.y[(t0 + t) * a.ldy + r] = acc[t];
  }
}

// ---- float weights -------------------------------------------------------------------------
template <float (*Load)(const u8*), int Bytes>
void rows_float(const Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const int64_t nt = t1 - t0;
  float wbuf[256];
  for (int64_t r = r0; r < r1; ++r) {
    const u8* wr = a.w + static_cast<size_t>(r) * a.w_stride;
    float acc[kMaxTokens] = {};
    for (int64_t c0 = 0; c0 < a.C; c0 += 256) {
      const int64_t n = a.C - c0 < 256 ? a.C - c0 : 256;
      for (int64_t i = 0; i < n; ++i) wbuf[i] = Load(wr + (c0 + i) * Bytes);
      for (int64_t t = 0; t < nt; ++t) {
        const float* x = a.x + (t0 + t) * a.ldx + c0;
        float s = acc[t];
        for (int64_t i = 0; i < n; ++i) s += wbuf[i] * x[i];
        acc[t] = s;
      }
    }
    for (int64_t t = 0; t < nt; ++t) a.y[(t0 + t) * a.ldy + r] = acc[t];
  }
}
float load_f32(const u8* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}
float load_f16(const u8* p) { return f16_at(p); }
float load_bf16(const u8* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return bf16_to_f32(h);
}

bool no_fast_dequant(DType, const void*, float*, int64_t) { return false; }

}  // namespace

RowsFn scalar_rows(DType t) {
  switch (t) {
    case DType::F32: return rows_float<load_f32, 4>;
    case DType::F16: return rows_float<load_f16, 2>;
    case DType::BF16: return rows_float<load_bf16, 2>;
    case DType::Q4_0: return rows_q32<dec_q4_0, blk::q4_0::size>;
    case DType::Q4_1: return rows_q32<dec_q4_1, blk::q4_1::size>;
    case DType::Q5_0: return rows_q32<dec_q5_0, blk::q5_0::size>;
    case DType::Q5_1: return rows_q32<dec_q5_1, blk::q5_1::size>;
    case DType::Q8_0: return rows_q32<dec_q8_0, blk::q8_0::size>;
    case DType::Q2_K: return rows_qk<dec_q2_k, blk::q2_k::size>;
    case DType::Q3_K: return rows_qk<dec_q3_k, blk::q3_k::size>;
    case DType::Q4_K: return rows_qk<dec_q4_k, blk::q4_k::size>;
    case DType::Q5_K: return rows_qk<dec_q5_k, blk::q5_k::size>;
    case DType::Q6_K: return rows_qk<dec_q6_k, blk::q6_k::size>;
    default: return nullptr;
  }
}

// Each row unpacked into the file layout, then the scalar kernel as if it were a one-row
// matrix writing column r of y.
static void rows_unpacked(const Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1, bool tiled) {
  const RowsFn fn = scalar_rows(a.wt);
  const size_t rb = row_bytes(a.wt, a.C);
  thread_local std::vector<uint8_t> row;
  if (row.size() < rb) row.resize(rb);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* src = a.w + static_cast<size_t>(r) * a.w_stride;
    if (!tiled) {
      unpack_q32_row(a.wt, src, row.data(), a.C);
    } else if (r < tiled_rows(a.R)) {  // row r % 16 of the group that starts 16-aligned
      const int64_t g = r / kTileRows * kTileRows;
      untile_row(a.wt, a.w + static_cast<size_t>(g) * a.w_stride, static_cast<int>(r - g), row.data(), a.C);
    } else {
      std::memcpy(row.data(), src, rb);  // after the last whole group: as stored
    }
    Args one = a;
    one.w = row.data();
    one.w_stride = rb;
    one.R = 1;
    one.y = a.y + r;
    fn(one, 0, 1, t0, t1);
  }
}

void scalar_rows_packed(const Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  rows_unpacked(a, r0, r1, t0, t1, false);
}
void scalar_rows_tiled(const Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  rows_unpacked(a, r0, r1, t0, t1, true);
}

static RowsFn scalar_rows_packed_for(DType t) { return q32_packs(t) ? scalar_rows_packed : nullptr; }
static RowsFn scalar_rows_tiled_for(DType t) { return has_tiles(t) ? scalar_rows_tiled : nullptr; }

QuantFn scalar_quant(DType t) {
  switch (family(t)) {
    case Family::Q32: return scalar_quant_q32;
    case Family::QK: return scalar_quant_qk;
    default: return nullptr;
  }
}

const IsaKernels& scalar_kernels() {
  static const IsaKernels k{scalar_rows, scalar_quant, no_fast_dequant, scalar_rows_packed_for, scalar_rows_tiled_for};
  return k;
}

}  // namespace tandem::kernels::cpu::mm
