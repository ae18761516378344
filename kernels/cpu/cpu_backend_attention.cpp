// CpuBackend: KV-cache writes and paged attention, dispatched to the best ISA at run time.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/attention_impl.hpp"
#include "kernels/cpu/convert_impl.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/host_buffer.hpp"
#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/quant.hpp"

namespace tandem::kernels::cpu {

void fp16_to_f32_row_avx2(const uint16_t* s, float* d, int64_t n);
void f32_to_fp16_row_avx2(const float* s, uint16_t* d, int64_t n);

namespace {
bool has_f16c_avx2() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && tandem::cpu::cpu_has_f16c() && __builtin_cpu_supports("fma");
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
    if (slots[t] == kNoKvSlot) continue;
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

void CpuBackend::kv_move(const KVLayer& cache, const Tensor& from, const Tensor& to) {
  require(from.type == DType::I32 && to.type == DType::I32 && from.numel() == to.numel(), "kv_move",
          "from and to must be I32 lists of one length");
  require(cache.k.row_stride() == cache.v.row_stride() && cache.k.rows() == cache.v.rows(), "kv_move",
          "K and V caches of different shapes");
  const int32_t* f = host_as<int32_t>(from);
  const int32_t* t = host_as<int32_t>(to);
  const int64_t n_slots = cache.k.rows();
  const size_t row = cache.k.row_stride();
  for (int64_t i = 0; i < from.numel(); ++i) {
    require(f[i] >= 0 && f[i] < n_slots && t[i] >= 0 && t[i] < n_slots, "kv_move",
            "slot " + std::to_string(f[i]) + " -> " + std::to_string(t[i]) + " out of range");
    if (f[i] == t[i]) continue;
    for (const Tensor* c : {&cache.k, &cache.v}) {
      uint8_t* base = host_ptr(*c);
      std::memcpy(base + static_cast<size_t>(t[i]) * row, base + static_cast<size_t>(f[i]) * row, row);
    }
  }
}

namespace {

// Contexts longer than this many positions are cut into spans of this length that threads
// run in parallel and then merge (flash-decoding). Fixed, so that a token's arithmetic
// depends only on its own context, never on the batch or the thread count.
constexpr int32_t kSplitPositions = 512;

// One token's share of a context: positions [lo, hi], part `part` of `parts`.
struct Span {
  int64_t t;
  int32_t lo, hi;
  int32_t part, parts;
};

// Merges the states of a token's `parts` spans (in order, `stride` floats apart) into the
// normalized output of the group's heads. With one part this is acc / l.
void finish(const AttnArgs& a, int64_t t, int kvh, const float* states, int parts, size_t stride) {
  const int hd = a.head_dim, group = attn_group(a);
  float* oh = a.out + t * a.ldo + static_cast<int64_t>(kvh) * group * hd;
  for (int g = 0; g < group; ++g) {
    float mx = -INFINITY;
    for (int p = 0; p < parts; ++p) mx = std::max(mx, states[p * stride + static_cast<size_t>(g)]);
    float l = 0.0f;
    float* o = oh + static_cast<int64_t>(g) * hd;
    for (int i = 0; i < hd; ++i) o[i] = 0.0f;
    for (int p = 0; p < parts; ++p) {
      const float* st = states + p * stride;
      const float m = st[g];
      if (m == -INFINITY) continue;
      const float w = std::exp(m - mx);
      l += st[group + g] * w;
      const float* acc = st + 2 * group + static_cast<size_t>(g) * hd;
      for (int i = 0; i < hd; ++i) o[i] += acc[i] * w;
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int i = 0; i < hd; ++i) o[i] *= inv;
  }
}

// Spans run together (attention_span_avx2_multi): tokens of one sequence over the same
// positions from the same lo, members[first .. first + n) of the call's list.
struct SpanGroup {
  int32_t first = 0, n = 0;
};
// At most this many tokens a group (a worker keeps their states side by side).
constexpr int kMaxGroup = attn_detail::kMaxWalkTokens;

// A group being filled: spans of the current sequence starting at lo.
struct OpenGroup {
  int32_t lo = 0, n = 0;
  int32_t idx[kMaxGroup];
};
thread_local std::vector<OpenGroup> t_open;

// The spans as groups. Spans of one sequence with the same lo join a group until it holds
// `cap`; every span is alone when cap is 1. A group's members need not be adjacent in
// `spans` (a split token's parts lie between one token and the next), so they are listed
// in `members`, group after group. Runs once per attention call: the lists are reused, so
// it allocates nothing once they have grown.
void group_spans(const std::vector<Span>& spans, const int32_t* seq, int cap, std::vector<SpanGroup>& groups,
                 std::vector<int32_t>& members) {
  groups.clear();
  members.clear();
  std::vector<OpenGroup>& open = t_open;
  open.clear();
  auto flush = [&](OpenGroup& o) {
    if (o.n == 0) return;
    groups.push_back({static_cast<int32_t>(members.size()), o.n});
    members.insert(members.end(), o.idx, o.idx + o.n);
    o.n = 0;
  };
  int32_t open_seq = -1;
  for (int32_t i = 0; i < static_cast<int32_t>(spans.size()); ++i) {
    const Span& sp = spans[static_cast<size_t>(i)];
    // A batch lists a sequence's tokens together: a new sequence closes the open groups
    // (a sequence seen again later only starts new ones), so the search stays short.
    if (seq[sp.t] != open_seq) {
      for (OpenGroup& o : open) flush(o);
      open.clear();
      open_seq = seq[sp.t];
    }
    auto it = std::find_if(open.begin(), open.end(), [&](const OpenGroup& o) { return o.lo == sp.lo; });
    if (it == open.end()) it = open.insert(open.end(), OpenGroup{sp.lo, 0, {}});
    it->idx[it->n++] = i;
    if (it->n >= cap) flush(*it);
  }
  for (OpenGroup& o : open) flush(o);
}

thread_local std::vector<float> t_attn_state;  // a worker's span states (kMaxGroup)
thread_local std::vector<SpanGroup> t_groups;
thread_local std::vector<int32_t> t_members;
// The caller's span list and the states of split tokens, reused across calls.
thread_local std::vector<Span> t_spans;
thread_local std::vector<float> t_parts;

}  // namespace

void CpuBackend::paged_attention(const Tensor& out, const Tensor& q, const KVLayer& cache,
                                 const PagedAttnMeta& meta, int n_heads, int n_kv_heads, int head_dim,
                                 float scale, int sliding_window, float softcap) {
  require(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "paged_attention", "n_heads must be a multiple of n_kv_heads");
  require(head_dim > 0 && head_dim <= attn_detail::kMaxHeadDim, "paged_attention",
          "head_dim must be in 1.." + std::to_string(attn_detail::kMaxHeadDim));
  require(q.type == DType::F32 && out.type == DType::F32, "paged_attention", "q, out F32");
  require(q.cols() >= static_cast<int64_t>(n_heads) * head_dim && out.cols() >= static_cast<int64_t>(n_heads) * head_dim,
          "paged_attention", "q/out rows too short");
  require(cache.k.cols() == static_cast<int64_t>(n_kv_heads) * head_dim, "paged_attention", "cache width mismatch");
  require(meta.positions.numel() == q.rows() && meta.seq_index.numel() == q.rows(), "paged_attention",
          "positions/seq_index must have one entry per token");
  require(meta.block_size > 0, "paged_attention", "block_size must be positive");
  const AttnArgs a = make_paged_attn_args(out, q, cache, meta, n_heads, n_kv_heads, head_dim, scale, sliding_window,
                                          softcap, [](const Tensor& t) { return host_ptr(t); });

  // Validate every token's positions and cache blocks here, on the caller's thread, and
  // cut its context into spans.
  const int64_t n_tokens = q.rows();
  const int64_t n_blocks = a.n_slots / a.block_size;
  std::vector<Span>& spans = t_spans;
  spans.clear();
  bool split = false;
  if (meta.tree.buf)
    require(meta.tree.type == DType::I32 && meta.tree.numel() == q.rows() * kTreeFields, "paged_attention",
            "tree must hold kTreeFields I32 per token");
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int32_t p = a.pos[t], s = a.seq[t];
    if (s < 0 || s >= a.n_seqs)
      throw std::out_of_range("attention: sequence index " + std::to_string(s) + " out of range");
    if (p < 0 || static_cast<int64_t>(p) / a.block_size >= a.bt_cols)
      throw std::out_of_range("attention: position " + std::to_string(p) + " beyond the block table");
    // A tree node's keys reach past its position: up to its highest ancestor bit.
    int32_t last = p;
    if (a.tree) {
      const int32_t* f = a.tree + t * kTreeFields;
      const uint64_t mask = tree_mask_of(f);
      if (mask != 0) {
        if (f[0] < 0 || f[0] + tree_popcount64(mask) != p + 1)
          throw std::out_of_range("attention: tree token " + std::to_string(t) + " at position " + std::to_string(p) +
                                  " has " + std::to_string(tree_popcount64(mask)) + " tree keys from " +
                                  std::to_string(f[0]));
        last = tree_last_key(f[0], mask);
        if (static_cast<int64_t>(last) / a.block_size >= a.bt_cols)
          throw std::out_of_range("attention: tree key " + std::to_string(last) + " beyond the block table");
      }
    }
    const int32_t j0 = a.window > 0 ? std::max<int32_t>(0, p - a.window + 1) : 0;
    const int32_t* bt = attn_table(a, t);
    for (int32_t b = j0 / a.block_size; b <= last / a.block_size; ++b)
      if (bt[b] < 0 || bt[b] >= n_blocks)
        throw std::out_of_range("attention: cache block " + std::to_string(bt[b]) + " out of range");
    const int32_t parts = (p - j0) / kSplitPositions + 1;
    split |= parts > 1;
    for (int32_t i = 0; i < parts; ++i)
      spans.push_back({t, j0 + i * kSplitPositions, std::min(p, j0 + (i + 1) * kSplitPositions - 1), i, parts});
  }

  const bool vector = active_isa() >= Isa::Avx2 && has_f16c_avx2();
  // The active level's own span (AVX-512), else AVX2's.
  const mm::IsaKernels* level = vector ? mm::active_kernels() : nullptr;
  const AttnMultiFn multi = level && level->attn_multi ? level->attn_multi : &attention_span_avx2_multi;
  const int group = n_heads / n_kv_heads;
  const size_t state_floats = static_cast<size_t>(group) * (2 + head_dim);
  const int64_t n_span_items = static_cast<int64_t>(spans.size()) * n_kv_heads;
  // Split tokens keep every part's state until all parts are done; the others finish at once.
  if (split) t_parts.resize(static_cast<size_t>(n_span_items) * state_floats);
  float* parts = t_parts.data();
  // Tokens of one sequence share their spans' rows (the vector path): as many a group as
  // still leaves every thread two items (a group and a kv head) to balance with; the
  // portable path runs each span alone.
  const int64_t per_item = (n_span_items + 2 * pool_.size() - 1) / (2 * pool_.size());
  const int cap = vector ? static_cast<int>(std::clamp<int64_t>(per_item, 1, kMaxGroup)) : 1;
  std::vector<SpanGroup>& groups = t_groups;
  std::vector<int32_t>& members = t_members;
  group_spans(spans, a.seq, cap, groups, members);
  const int64_t n_items = static_cast<int64_t>(groups.size()) * n_kv_heads;

  // Exceptions must not escape a worker thread: capture the first and rethrow here.
  std::exception_ptr err;
  std::mutex mu;
  std::atomic<int64_t> next{0};
  pool_.run([&](int, int) {
    try {
      std::vector<float>& own = t_attn_state;
      own.resize(state_floats * kMaxGroup);
      for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n_items;) {
        const SpanGroup& gr = groups[static_cast<size_t>(i / n_kv_heads)];
        const int kvh = static_cast<int>(i % n_kv_heads);
        const Span* sp[kMaxGroup];
        int64_t ts[kMaxGroup];
        int32_t his[kMaxGroup];
        AttnState sts[kMaxGroup];
        for (int m = 0; m < gr.n; ++m) {
          const auto si = static_cast<size_t>(members[static_cast<size_t>(gr.first + m)]);
          sp[m] = &spans[si];
          // A split token's part keeps its state where the merge below finds it.
          float* st = sp[m]->parts > 1 ? parts + (si * static_cast<size_t>(n_kv_heads) + static_cast<size_t>(kvh)) * state_floats
                                       : own.data() + static_cast<size_t>(m) * state_floats;
          ts[m] = sp[m]->t;
          his[m] = sp[m]->hi;
          sts[m] = AttnState{st, st + group, st + 2 * group};
        }
        if (vector) {
          multi(a, ts, his, gr.n, kvh, sp[0]->lo, sts);
        } else {
          for (int m = 0; m < gr.n; ++m) attention_span_generic(a, ts[m], kvh, sp[m]->lo, his[m], sts[m]);
        }
        for (int m = 0; m < gr.n; ++m)
          if (sp[m]->parts == 1) finish(a, ts[m], kvh, sts[m].m, 1, state_floats);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu);
      if (!err) err = std::current_exception();
    }
  });
  if (err) std::rethrow_exception(err);
  if (!split) return;
  // Merge the parts of split tokens: a token's parts are consecutive spans, so for one kv
  // head their states are n_kv states apart, starting at the item of part 0.
  pool_.parallel_for(static_cast<int64_t>(spans.size()) * n_kv_heads, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const Span& sp = spans[static_cast<size_t>(i / n_kv_heads)];
      if (sp.parts == 1 || sp.part != 0) continue;
      const int kvh = static_cast<int>(i % n_kv_heads);
      finish(a, sp.t, kvh, parts + static_cast<size_t>(i) * state_floats, sp.parts, n_kv_heads * state_floats);
    }
  });
}

}  // namespace tandem::kernels::cpu
