// Logits → final distribution → one draw. The transforms run in this order:
//
//   NaN → -inf → penalties → logit bias → temperature → top-k → softmax → top-p → min-p →
//   renormalise
//
// Performance: this runs for every generated token, and speculation needs it at k+1
// positions per step, with vocabularies up to ~152k. So no pass sorts the vocabulary:
//   * greedy is a plain (vectorised) argmax;
//   * top-k streams over the scaled logits keeping a small buffer and a rising threshold, and
//     skips 64-token blocks whose max is below it; only the buffer is partially sorted;
//   * without top-k, min-p's threshold is known in advance, and top-p alone takes its
//     threshold from a histogram of probability mass, so again only the tokens that can
//     survive are collected and sorted. Only when top-k, top-p and min-p are all off is the
//     whole (non-zero) vocabulary sorted — the Distribution must list it in order anyway.
// The vocabulary-sized passes (NaN scrub, max, temperature, exp, sum) are branch-free so
// the compiler vectorises them.
//
// Determinism: the result depends only on IEEE-754 float/double arithmetic (see the FMA note
// below): we use our own exp rather than libm's (whose last bit differs between libraries),
// fixed summation orders, and sort by a strict total order (probability, then id), so any
// sort algorithm gives the same output.
#include "engine/sampling/sampler.hpp"

#include "engine/sampling/candidate_order.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/exp_nonpos.hpp"

// FMA contraction of a*b+c (exp_nonpos, penalties) would change last bits on targets that
// have FMA. clang can be told per file; GCC contracts in C++ even in ISO mode, and its
// "#pragma GCC optimize" would stop std::sort from inlining our comparator, so a GCC build
// with -mfma (or for aarch64) may differ from an x86-64 baseline build in the last bit.
// Same build, same inputs → same output holds everywhere.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

namespace tandem {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();

[[noreturn]] void throw_no_token() { throw std::runtime_error("logits are all NaN/-inf"); }

// A token and a value (a scaled logit, then an unnormalised probability).
using Entry = Candidate;
constexpr auto before = candidate_before;

// Per-thread scratch: a fresh vocab-sized buffer per call would cost about as much in page
// faults as the work itself. thread_local, so draft and target positions may be sampled in
// parallel.
struct Scratch {
  std::vector<float> w;          // working logits; later exp weights
  std::vector<uint32_t> counts;  // penalty bookkeeping; all zero between calls
  std::vector<Entry> cand;       // tokens that may survive the cuts
  std::vector<Entry> sorted;     // sort_candidates' scratch
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

void validate_params(const SamplingParams& p) {
  auto bad = [](const char* what) { throw std::invalid_argument(std::string("SamplingParams: ") + what); };
  if (std::isnan(p.temperature) || std::isinf(p.temperature)) bad("temperature must be finite");
  if (std::isnan(p.top_p)) bad("top_p is NaN");
  if (std::isnan(p.min_p)) bad("min_p is NaN");
  if (!(p.repetition_penalty > 0.0f) || std::isinf(p.repetition_penalty))
    bad("repetition_penalty must be finite and > 0");
  if (!std::isfinite(p.presence_penalty)) bad("presence_penalty must be finite");
  if (!std::isfinite(p.frequency_penalty)) bad("frequency_penalty must be finite");
  for (const auto& [id, b] : p.logit_bias) {
    if (id < 0) bad("logit_bias: negative token id");
    if (!std::isfinite(b)) bad("logit_bias: values must be finite");
  }
}

// Float → int32 with the same order, so that max loops use integer compares, which the
// compiler vectorises (a float max under the default -ftrapping-math it will not). Sign-magnitude becomes two's complement, so -0 and +0 share key 0 (they are equal
// floats); NaN gets the key of -inf, which is how the sampler treats it everywhere.
constexpr int32_t kNegInfKey = -0x7F800000;
inline int32_t rank_key(float f) {
  const auto b = std::bit_cast<int32_t>(f);
  const int32_t mag = b & 0x7FFFFFFF;
  const int32_t sign = b >> 31;  // 0 or -1
  const int32_t k = (mag ^ sign) - sign;
  return mag > 0x7F800000 ? kNegInfKey : k;
}
inline float from_key(int32_t k) {
  return k >= 0 ? std::bit_cast<float>(k)
                : std::bit_cast<float>(static_cast<uint32_t>(-k) | 0x80000000u);
}
// NaN → -inf as an integer select (vectorisable, unlike a float compare).
inline float scrub_nan(float x) {
  const auto b = std::bit_cast<uint32_t>(x);
  return (b & 0x7FFFFFFFu) > 0x7F800000u ? kNegInf : x;
}

// Survivors of top-k, top-p and min-p are few, so the scans over the vocabulary go in blocks
// of 64: one vectorised test of the whole block, and only a block that can hold a candidate
// is walked element by element.
constexpr size_t kBlock = 64;

// Whether some v[i] >= lo (NaN never is). OR-ing compare results, unlike a float max,
// vectorises under -ftrapping-math.
inline bool block_has_at_least(const float* v, size_t len, float lo) {
  int any = 0;
  for (size_t i = 0; i < len; ++i) any |= static_cast<int>(v[i] >= lo);
  return any != 0;
}

inline int32_t block_max_key(const float* v, size_t len) {
  int32_t m = kNegInfKey;
  for (size_t i = 0; i < len; ++i) {
    const int32_t k = rank_key(v[i]);
    m = k > m ? k : m;
  }
  return m;
}

// The largest value, NaN ignored (-inf when there is none).
float max_value(std::span<const float> v) {
  int32_t m = kNegInfKey;
  for (float x : v) {
    const int32_t k = rank_key(x);
    m = k > m ? k : m;
  }
  return from_key(m);
}

// Σ v in double with eight interleaved partial sums: a fixed order (deterministic) that is
// not one long chain of dependent adds.
double sum_double(std::span<const float> v) {
  std::array<double, 8> lane{};
  size_t i = 0;
  for (; i + 8 <= v.size(); i += 8)
    for (size_t j = 0; j < 8; ++j) lane[j] += v[i + j];
  double tail = 0.0;
  for (; i < v.size(); ++i) tail += v[i];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7])) +
         tail;
}

// exp(x) for x <= 0: the one definition the device's sampling kernels share.
using kernels::exp_nonpos;

// Repetition (window) and presence/frequency (whole history) penalties, in place.
// counts[] is a vocab-sized array kept all-zero between calls, so the work is O(history),
// not O(vocab) and not a sort: bit 31 marks "in the repetition window", the low bits count
// occurrences; the last loop applies each distinct token's penalty once and clears its entry.
void apply_penalties(std::span<float> w, const SamplingParams& p, std::span<const int32_t> history,
                     std::vector<uint32_t>& counts) {
  const bool rep = p.repetition_penalty != 1.0f;
  const bool pf = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  if ((!rep && !pf) || history.empty()) return;
  const size_t n = w.size();
  if (counts.size() < n) counts.resize(n, 0u);
  std::span<const int32_t> window = history;
  if (p.repetition_window >= 0 && static_cast<size_t>(p.repetition_window) < history.size())
    window = history.last(static_cast<size_t>(p.repetition_window));
  // Ids >= vocab are skipped (negative ones were rejected up front).
  auto in_vocab = [n](int32_t id) { return static_cast<size_t>(id) < n; };
  constexpr uint32_t kInWindow = 1u << 31;

  if (pf)
    for (int32_t id : history)
      if (in_vocab(id)) ++counts[static_cast<size_t>(id)];
  if (rep)
    for (int32_t id : window)
      if (in_vocab(id)) counts[static_cast<size_t>(id)] |= kInWindow;

  for (int32_t id : pf ? history : window) {
    if (!in_vocab(id)) continue;
    const auto i = static_cast<size_t>(id);
    const uint32_t c = counts[i];
    if (c == 0) continue;  // already applied (a repeated token)
    counts[i] = 0;
    float x = w[i];
    if (c & kInWindow) x = x > 0.0f ? x / p.repetition_penalty : x * p.repetition_penalty;
    const uint32_t occurrences = c & ~kInWindow;
    if (occurrences > 0)
      x -= static_cast<float>(occurrences) * p.frequency_penalty + p.presence_penalty;
    w[i] = x;
  }
}

// The logit bias, in place, after the penalties: ids past the row are skipped (a smaller
// draft vocabulary), and a zero adds nothing (not even -0 + 0 = +0), as on the device.
void apply_logit_bias(std::span<float> w, const SamplingParams& p) {
  for (const auto& [id, b] : p.logit_bias)
    if (static_cast<size_t>(id) < w.size() && b != 0.0f) w[static_cast<size_t>(id)] += b;
}

// Appends {v[i], i} for every v[i] >= thr.
void collect_at_least(std::span<const float> v, float thr, std::vector<Entry>& out) {
  for (size_t base = 0; base < v.size(); base += kBlock) {
    const size_t len = std::min(kBlock, v.size() - base);
    if (!block_has_at_least(&v[base], len, thr)) continue;
    for (size_t i = base; i < base + len; ++i)
      if (v[i] >= thr) out.push_back({v[i], static_cast<int32_t>(i)});
  }
}

// Temperature scaling z = (x - m) / t. It is monotone (non-decreasing) in x, which the
// top-k scan uses to test whole blocks in the logits' own domain.
struct Scale {
  float m, t;
  float operator()(float x) const { return (x - m) / t; }

  // The smallest float x with (*this)(x) >= z_min (z_min <= 0, so x = m qualifies): start
  // from the algebraic inverse and step by ulps to the exact boundary. Falls back to
  // -FLT_MAX, which is always safe, should the inverse be far off.
  float lowest_reaching(float z_min) const {
    constexpr float kLowest = std::numeric_limits<float>::lowest();
    float x = std::clamp(m + z_min * t, kLowest, m);
    for (int i = 0; i < 64 && (*this)(x) < z_min; ++i) x = std::nextafter(x, kPosInf);
    if ((*this)(x) < z_min) return x;  // still below the boundary: safe
    for (int i = 0; i < 64; ++i) {
      const float below = std::nextafter(x, kNegInf);
      if (below < kLowest || (*this)(below) < z_min) return x;
      x = below;
    }
    return kLowest;
  }
};

// Top-k of the scaled logits z = scale(x) as entries {z, id} sorted by `before`. One
// streaming pass: a buffer holds every token not yet known to be outside the top k; when it
// reaches `cap`, nth_element keeps its best k and the threshold rises to the k-th value, so
// later blocks are mostly skipped — tested against the threshold mapped back to the logits'
// domain, so z is computed only in blocks that pass. A token is dropped only when k others
// beat it, so the result is the exact top-k (ties at the threshold are kept and settled by
// id). Returns false when fewer than k tokens are possible (> -inf), i.e. when top-k would
// cut nothing.
bool select_top_k(std::span<const float> x, Scale scale, size_t k, std::vector<Entry>& out) {
  const size_t cap = 2 * k + 256;
  float z_min = std::numeric_limits<float>::lowest();  // at first: any z > -inf
  float x_min = z_min;                                   // no z >= z_min below this x
  out.clear();
  for (size_t base = 0; base < x.size(); base += kBlock) {
    const size_t len = std::min(kBlock, x.size() - base);
    if (!block_has_at_least(&x[base], len, x_min)) continue;
    for (size_t i = base; i < base + len; ++i) {
      const float z = scale(x[i]);
      if (z >= z_min) out.push_back({z, static_cast<int32_t>(i)});  // NaN: never
    }
    if (out.size() >= cap) {
      std::nth_element(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(k - 1), out.end(), before);
      out.resize(k);
      z_min = out[k - 1].v;
      x_min = scale.lowest_reaching(z_min);
    }
  }
  if (out.size() < k) return false;
  std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(k), out.end(), before);
  out.resize(k);
  return true;
}

// Without top-k: e holds exp weights of the whole vocabulary (total = Σ e, the max weight is
// exactly 1). Collects, sorted by `before`, a prefix of the vocabulary's order that contains
// everything top-p and min-p can keep.
void collect_candidates(std::span<const float> e, double total, const SamplingParams& p,
                        std::vector<Entry>& out) {
  const auto collect = [&](float thr) {
    out.clear();
    collect_at_least(e, thr, out);  // in id order, weights > 0
    sort_candidates(out, scratch().sorted);
  };
  // min-p's threshold is known up front (p_max is 1 in weights). Both cuts keep a prefix of
  // the same order, so the shorter one wins and lies inside the min-p set: nothing below it
  // is needed, whatever top-p says. (min_p > 1 would cut everything; clamping to 1 keeps the
  // most likely token(s), as every cut keeps at least one.)
  if (p.min_p > 0.0f) return collect(std::min(p.min_p, 1.0f));
  if (!(p.top_p < 1.0f)) return collect(std::numeric_limits<float>::denorm_min());  // e > 0

  // Top-p alone: find the weight threshold from a histogram of probability mass. Weights are
  // in [0, 1], so their bits are monotone: bucket by the top bits (exponent + 3 mantissa
  // bits). Four interleaved copies, so consecutive tokens landing in the same bucket do not
  // wait on each other's store.
  constexpr uint32_t kShift = 20;
  constexpr size_t kBuckets = 1024;  // bits(1.0f) >> kShift = 1016
  std::vector<double> mass4(4 * kBuckets, 0.0);
  size_t i = 0;
  for (; i + 4 <= e.size(); i += 4)
    for (size_t c = 0; c < 4; ++c) mass4[c * kBuckets + (std::bit_cast<uint32_t>(e[i + c]) >> kShift)] += e[i + c];
  for (; i < e.size(); ++i) mass4[std::bit_cast<uint32_t>(e[i]) >> kShift] += e[i];
  std::array<double, kBuckets> mass;
  for (size_t b = 0; b < kBuckets; ++b)
    mass[b] = (mass4[b] + mass4[kBuckets + b]) + (mass4[2 * kBuckets + b] + mass4[3 * kBuckets + b]);

  const double target = std::max(p.top_p, 0.0f) * total;
  // Walk down from the bucket of 1.0 (the largest weight); with target 0 (top_p <= 0) the
  // walk stops there at once and only the most likely token(s) are collected.
  uint32_t b = std::bit_cast<uint32_t>(1.0f) >> kShift;
  for (double cum = 0.0; b > 0; --b) {
    cum += mass[b];
    if (cum >= target) break;
  }
  for (;;) {
    collect(b == 0 ? std::numeric_limits<float>::denorm_min() : std::bit_cast<float>(b << kShift));
    // The bucket sums add in a different order than the sorted prefix sums do; if rounding
    // left the collected mass a hair short of the target, widen by one bucket and retry.
    if (b == 0) return;
    double cum = 0.0;
    for (const Entry& c : out) cum += c.v;
    if (cum >= target) return;
    do --b;
    while (b > 0 && mass[b] == 0.0);
  }
}

// cand: weights sorted by `before`, cand[0] the most likely; total: the softmax normaliser
// of the support before top-p. Applies top-p and min-p, drops zero weights, renormalises.
Distribution cut_and_normalise(const std::vector<Entry>& cand, double total, const SamplingParams& p) {
  size_t keep = cand.size();
  if (p.top_p < 1.0f) {
    // The smallest prefix whose mass reaches top_p (top_p <= 0 → the first token).
    const double target = std::max(p.top_p, 0.0f) * total;
    double cum = 0.0;
    for (size_t j = 0; j < cand.size(); ++j) {
      cum += cand[j].v;
      if (cum >= target) {
        keep = j + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    // p_j >= min_p * p_max ⇔ e_j >= min_p * e_max: the normaliser cancels.
    const float thr = std::min(p.min_p, 1.0f) * cand[0].v;
    size_t j = 1;
    while (j < keep && cand[j].v >= thr) ++j;
    keep = j;
  }
  while (keep > 1 && cand[keep - 1].v <= 0.0f) --keep;  // underflowed weights: probability 0

  double kept = 0.0;
  for (size_t j = 0; j < keep; ++j) kept += cand[j].v;
  Distribution d;
  d.ids.resize(keep);
  d.probs.resize(keep);
  bool order_ok = true;
  for (size_t j = 0; j < keep; ++j) {
    d.ids[j] = cand[j].id;
    d.probs[j] = static_cast<float>(cand[j].v / kept);
    // Rounding can make two different weights equal probabilities; then ids must ascend.
    if (j > 0 && d.probs[j] == d.probs[j - 1] && d.ids[j] < d.ids[j - 1]) order_ok = false;
  }
  if (!order_ok) {
    std::vector<Entry> e(keep);
    for (size_t j = 0; j < keep; ++j) e[j] = {d.probs[j], d.ids[j]};
    std::sort(e.begin(), e.end(), before);
    for (size_t j = 0; j < keep; ++j) d.ids[j] = e[j].id, d.probs[j] = e[j].v;
  }
  return d;
}

Distribution point_mass_at(int32_t id) {
  Distribution d;
  d.ids = {id};
  d.probs = {1.0f};
  return d;
}

}  // namespace

void validate_sampling(const SamplingParams& p) { validate_params(p); }

float Distribution::prob(int32_t id) const {
  for (size_t j = 0; j < ids.size(); ++j)
    if (ids[j] == id) return probs[j];
  return 0.0f;
}

int32_t argmax(std::span<const float> logits) {
  // One pass of vectorised block maxima; the first block holding the overall max is then
  // searched for its first index holding it (ties → lowest id; NaN has the key of -inf).
  int32_t best = kNegInfKey;
  size_t best_base = 0;
  for (size_t base = 0; base < logits.size(); base += kBlock) {
    const int32_t bm = block_max_key(&logits[base], std::min(kBlock, logits.size() - base));
    if (bm > best) best = bm, best_base = base;
  }
  if (best == kNegInfKey) throw_no_token();
  for (size_t i = best_base;; ++i)
    if (rank_key(logits[i]) == best) return static_cast<int32_t>(i);
}

Distribution make_distribution(std::span<const float> logits, const SamplingParams& p,
                               std::span<const int32_t> history) {
  return make_distribution(logits, p, history, {});
}

Distribution make_distribution(std::span<const float> logits, const SamplingParams& p,
                               std::span<const int32_t> history, std::span<const uint64_t> allowed) {
  validate_params(p);
  if (logits.empty()) throw std::invalid_argument("make_distribution: empty logits");
  for (int32_t id : history)
    if (id < 0) throw std::invalid_argument("make_distribution: negative token id in history");
  const bool penalise = (p.has_penalties() && !history.empty()) || !p.logit_bias.empty();
  const bool masked = !allowed.empty();
  if (p.greedy() && !penalise && !masked) return point_mass_at(argmax(logits));

  Scratch& s = scratch();
  const size_t n = logits.size();
  std::vector<float>& w = s.w;
  // src: the logits the transforms read. Without penalties or a mask the caller's,
  // untouched; with them a scrubbed, masked, penalised copy.
  std::span<const float> src = logits;
  if (penalise || masked) {
    w.resize(n);
    for (size_t i = 0; i < n; ++i) w[i] = scrub_nan(logits[i]);
    if (masked)
      for (size_t i = 0; i < n; ++i) {
        const size_t word = i / 64;
        const bool ok = word < allowed.size() && ((allowed[word] >> (i % 64)) & 1u) != 0;
        w[i] = ok ? w[i] : kNegInf;
      }
    if (penalise) {
      apply_penalties(w, p, history, s.counts);
      apply_logit_bias(w, p);
    }
    src = w;
  }
  if (p.greedy()) return point_mass_at(argmax(src));

  float m = max_value(src);
  if (m == kNegInf) throw_no_token();
  if (m == kPosInf) {
    // The limit of softmax as some logits → +inf: uniform over those, nothing elsewhere.
    w.resize(n);
    for (size_t i = 0; i < n; ++i) w[i] = src[i] == kPosInf ? 0.0f : kNegInf;
    src = w;
    m = 0.0f;
  }
  // Temperature, with the max subtracted first: z = (x - m) / T lies in [-inf, 0], so even
  // T = 1e-6 cannot overflow (it underflows to -inf instead, i.e. probability 0), and the
  // max gets exactly 0 → weight exactly 1.
  const float t = p.temperature;

  std::vector<Entry>& cand = s.cand;
  double total = 0.0;  // softmax normaliser over what top-k kept
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n && select_top_k(src, Scale{m, t}, static_cast<size_t>(p.top_k), cand)) {
    for (Entry& c : cand) {
      c.v = exp_nonpos(c.v);
      total += c.v;
    }
    // exp is monotone but not strictly so in float: new ties must be re-ordered by id.
    if (!std::is_sorted(cand.begin(), cand.end(), before)) std::sort(cand.begin(), cand.end(), before);
  } else {
    w.resize(n);  // may alias src: each element is read before it is written
    for (size_t i = 0; i < n; ++i) w[i] = exp_nonpos((scrub_nan(src[i]) - m) / t);
    total = sum_double(w);
    collect_candidates(w, total, p, cand);
  }
  return cut_and_normalise(cand, total, p);
}

void penalised_logits(std::span<const float> logits, const SamplingParams& p, std::span<const int32_t> history,
                      std::vector<float>& out) {
  validate_params(p);
  for (int32_t id : history)
    if (id < 0) throw std::invalid_argument("penalised_logits: negative token id in history");
  out.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = scrub_nan(logits[i]);
  apply_penalties(out, p, history, scratch().counts);
  apply_logit_bias(out, p);
}

// Σ exp((w_i − m) · inv_t) over the vocabulary, m = max(w) finite, NaN counting as -inf: the
// sampler's vectorised exp into the scratch row, then its fixed-order double sum.
static double sum_exp_from_max(std::span<const float> w, float m, float inv_t) {
  std::vector<float>& e = scratch().w;
  e.resize(w.size());
  for (size_t i = 0; i < w.size(); ++i) e[i] = exp_nonpos((scrub_nan(w[i]) - m) * inv_t);
  return sum_double(e);
}

double log_sum_exp(std::span<const float> w) {
  const float m = max_value(w);
  if (!std::isfinite(m)) throw std::invalid_argument("log_sum_exp: the largest value is not finite");
  return static_cast<double>(m) + std::log(sum_exp_from_max(w, m, 1.0f));
}

double top_probability(std::span<const float> logits, float temperature) {
  const float m = max_value(logits);
  if (!std::isfinite(m)) return 0.0;
  const float inv_t = temperature > 0.0f && std::isfinite(temperature) ? 1.0f / temperature : 1.0f;
  return 1.0 / sum_exp_from_max(logits, m, inv_t);  // the top token's own weight is exp(0) = 1
}

int32_t sample(const Distribution& d, Rng& rng) {
  if (d.ids.empty() || d.ids.size() != d.probs.size())
    throw std::invalid_argument("sample: empty or malformed distribution");
  // Scale the draw by the actual float total, so the CDF is exact for the stored
  // probabilities even though they sum to 1 only up to rounding.
  double total = 0.0;
  for (float q : d.probs) total += q;
  const double target = rng.uniform() * total;
  double cum = 0.0;
  for (size_t j = 0; j < d.ids.size(); ++j) {
    cum += d.probs[j];
    if (target < cum) return d.ids[j];
  }
  // target < total = the final cum, unless u * total rounded up to total: take the last
  // token with non-zero probability.
  size_t j = d.ids.size() - 1;
  while (j > 0 && d.probs[j] <= 0.0f) --j;
  return d.ids[j];
}

Distribution remove_token(const Distribution& q, int32_t x) {
  Distribution r;
  double total = 0.0;
  for (size_t i = 0; i < q.size(); ++i) {
    if (q.ids[i] == x) continue;
    r.ids.push_back(q.ids[i]);
    r.probs.push_back(q.probs[i]);
    total += q.probs[i];
  }
  if (r.ids.size() == q.ids.size() || !(total > 0.0)) return q;
  for (float& p : r.probs) p = static_cast<float>(p / total);
  return r;
}

}  // namespace tandem
