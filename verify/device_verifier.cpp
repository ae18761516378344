#include "verify/device_verifier.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "engine/sampling/device_rows.hpp"

namespace tandem {

std::unique_ptr<DeviceVerifier> DeviceVerifier::for_backend(kernels::Backend& be) {
  kernels::DeviceDecode* dd = kernels::device_decode(be);
  if (!dd) return nullptr;
  return std::unique_ptr<DeviceVerifier>(new DeviceVerifier(be, *dd));
}

namespace {

VerifyResult verdict_of(int32_t n_accepted, const int32_t* out, int32_t k) {
  VerifyResult v;
  v.n_accepted = n_accepted;
  v.next_token = n_accepted >= 0 && n_accepted <= k ? out[n_accepted] : -1;
  v.all_accepted = v.n_accepted == k;
  return v;
}

}  // namespace

std::vector<VerifyResult> DeviceVerifier::verify(const kernels::Tensor& logits, std::span<const Sequence> seqs,
                                                 const kernels::Tensor* q) {
  std::vector<VerifyResult> out(seqs.size());
  const int64_t rows = logits.rows();
  std::vector<Sequence> argmax, sampled;
  std::vector<size_t> argmax_at, sampled_at;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const Sequence& s = seqs[i];
    if (s.first_row < 0 || s.first_row + static_cast<int64_t>(s.drafts.size()) >= rows)
      throw std::logic_error("device verification: a sequence's rows lie outside the logits");
    if (!s.q_rows.empty() && (s.q_rows.size() != s.drafts.size() || !q))
      throw std::logic_error("device verification: q rows do not match the drafts");
    (s.sampling ? sampled : argmax).push_back(s);
    (s.sampling ? sampled_at : argmax_at).push_back(i);
  }
  std::vector<VerifyResult> a(argmax.size()), b(sampled.size());
  if (!argmax.empty()) verify_argmax(logits, argmax, a);
  if (!sampled.empty()) verify_sampled(logits, sampled, q, b);
  for (size_t i = 0; i < a.size(); ++i) out[argmax_at[i]] = a[i];
  for (size_t i = 0; i < b.size(); ++i) out[sampled_at[i]] = b[i];
  return out;
}

void DeviceVerifier::verify_argmax(const kernels::Tensor& logits, std::span<const Sequence> seqs,
                                   std::span<VerifyResult> verdicts) {
  const int64_t rows = logits.rows();
  const auto n = static_cast<int64_t>(seqs.size());
  int64_t max_d = 1;  // at least one column: no tensor is empty
  for (const Sequence& s : seqs) max_d = std::max<int64_t>(max_d, static_cast<int64_t>(s.drafts.size()));
  // argmax [rows] | first_row [n] | drafts [n, max_d] | n_drafts [n] | n_accepted [n] | out [n, max_d + 1]
  kernels::WordViews w(be_, buf_, static_cast<size_t>(rows + n + n * max_d + n + n + n * (max_d + 1)));
  const kernels::Tensor am = w.take(DType::I32, rows, 1), first = w.take(DType::I32, n, 1),
                        drafts = w.take(DType::I32, max_d, n), n_drafts = w.take(DType::I32, n, 1),
                        n_acc = w.take(DType::I32, n, 1), out = w.take(DType::I32, max_d + 1, n);
  std::vector<int32_t> h_first(static_cast<size_t>(n)), h_drafts(static_cast<size_t>(n * max_d), -1),
      h_nd(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const Sequence& s = seqs[static_cast<size_t>(i)];
    h_first[static_cast<size_t>(i)] = s.first_row;
    h_nd[static_cast<size_t>(i)] = static_cast<int32_t>(s.drafts.size());
    std::copy(s.drafts.begin(), s.drafts.end(), h_drafts.begin() + i * max_d);
  }
  be_.upload(first, h_first.data(), h_first.size() * 4);
  be_.upload(drafts, h_drafts.data(), h_drafts.size() * 4);
  be_.upload(n_drafts, h_nd.data(), h_nd.size() * 4);
  dd_.argmax_rows(am, logits);
  dd_.verify_greedy(am, first, drafts, n_drafts, n_acc, out);
  std::vector<int32_t> h_acc(static_cast<size_t>(n)), h_out(static_cast<size_t>(n * (max_d + 1)));
  be_.download(h_acc.data(), n_acc, h_acc.size() * 4);
  be_.download(h_out.data(), out, h_out.size() * 4);
  be_.synchronize();
  for (int64_t i = 0; i < n; ++i)
    verdicts[static_cast<size_t>(i)] =
        verdict_of(h_acc[static_cast<size_t>(i)], &h_out[static_cast<size_t>(i * (max_d + 1))], h_nd[static_cast<size_t>(i)]);
}

void DeviceVerifier::verify_sampled(const kernels::Tensor& logits, std::span<const Sequence> seqs,
                                    const kernels::Tensor* q, std::span<VerifyResult> verdicts) {
  const int64_t rows = logits.rows(), vocab = logits.cols();
  const auto n = static_cast<int64_t>(seqs.size());
  int64_t max_d = 1;
  for (const Sequence& s : seqs) max_d = std::max<int64_t>(max_d, static_cast<int64_t>(s.drafts.size()));
  // Each row's transform (rows of other sequences: skipped), with the
  // penalties of its history: the committed tokens and the drafts before it. The verifier's
  // fault injection (tests) moves mass at its position, as verify/verifier.cpp does.
  const InjectedBias bias = injected_verifier_bias();
  std::vector<kernels::RowSampling> params(static_cast<size_t>(rows));
  for (auto& r : params) r.skip = 1;
  std::vector<int32_t> pens, hist;
  std::vector<kernels::SeqVerify> sv(static_cast<size_t>(n));
  std::vector<int32_t> h_drafts(static_cast<size_t>(n * max_d), -1), h_qrows(static_cast<size_t>(n * max_d), -1);
  for (int64_t i = 0; i < n; ++i) {
    const Sequence& s = seqs[static_cast<size_t>(i)];
    const auto k = static_cast<int32_t>(s.drafts.size());
    for (int32_t r = 0; r <= k; ++r) {
      kernels::RowSampling rs = row_sampling(*s.sampling);
      if (s.sampling->has_penalties()) {
        hist.assign(s.history.begin(), s.history.end());
        hist.insert(hist.end(), s.drafts.begin(), s.drafts.begin() + r);
        rs.pen_begin = static_cast<int32_t>(pens.size() / 2);
        append_penalty_entries(*s.sampling, hist, static_cast<int32_t>(vocab), pens);
        rs.pen_end = static_cast<int32_t>(pens.size() / 2);
      }
      if (bias.position >= 0 && bias.position == s.position + r) rs.bias_mass = bias.mass;
      params[static_cast<size_t>(s.first_row + r)] = rs;
    }
    kernels::SeqVerify& v = sv[static_cast<size_t>(i)];
    v.first_row = s.first_row;
    v.n_drafts = k;
    v.with_q = s.q_rows.empty() ? 0 : 1;
    v.coupled = s.coupled ? 1 : 0;
    v.key = kernels::NoiseKey::of(s.sampling->seed.value_or(0), s.position);
    std::copy(s.drafts.begin(), s.drafts.end(), h_drafts.begin() + i * max_d);
    std::copy(s.q_rows.begin(), s.q_rows.end(), h_qrows.begin() + i * max_d);
  }
  const size_t pen_words = std::max<size_t>(pens.size(), 2);
  kernels::WordViews w(be_, side_,
          static_cast<size_t>(rows) * (kernels::kRowSamplingWords + 2) + pen_words +
              static_cast<size_t>(n) * (kernels::kSeqVerifyWords + 2 * max_d + 1 + max_d + 1));
  const kernels::Tensor tp = w.take(DType::I32, kernels::kRowSamplingWords, rows);
  const kernels::Tensor top = w.take(DType::I32, rows, 1), conf = w.take(DType::F32, rows, 1);
  const kernels::Tensor tpen = w.take(DType::I32, 2, static_cast<int64_t>(pen_words / 2));
  const kernels::Tensor tsv = w.take(DType::I32, kernels::kSeqVerifyWords, n);
  const kernels::Tensor tdr = w.take(DType::I32, max_d, n), tqr = w.take(DType::I32, max_d, n);
  const kernels::Tensor n_acc = w.take(DType::I32, n, 1), out = w.take(DType::I32, max_d + 1, n);
  const size_t probs_bytes = static_cast<size_t>(rows * vocab) * sizeof(float);
  if (!probs_ || probs_->size() < probs_bytes) {
    probs_.reset();
    probs_ = be_.alloc(probs_bytes);
  }
  const kernels::Tensor probs = kernels::make_tensor(probs_.get(), DType::F32, vocab, rows);
  be_.upload(tp, params.data(), params.size() * sizeof(kernels::RowSampling));
  if (!pens.empty()) be_.upload(tpen, pens.data(), pens.size() * 4);
  be_.upload(tsv, sv.data(), sv.size() * sizeof(kernels::SeqVerify));
  be_.upload(tdr, h_drafts.data(), h_drafts.size() * 4);
  be_.upload(tqr, h_qrows.data(), h_qrows.size() * 4);
  dd_.make_probs(probs, top, conf, logits, tp, pens.empty() ? kernels::Tensor{} : tpen);
  dd_.verify_sampled(probs, q ? *q : kernels::Tensor{}, tsv, tdr, tqr, n_acc, out);
  std::vector<int32_t> h_acc(static_cast<size_t>(n)), h_out(static_cast<size_t>(n * (max_d + 1)));
  be_.download(h_acc.data(), n_acc, h_acc.size() * 4);
  be_.download(h_out.data(), out, h_out.size() * 4);
  be_.synchronize();
  for (int64_t i = 0; i < n; ++i)
    verdicts[static_cast<size_t>(i)] = verdict_of(h_acc[static_cast<size_t>(i)], &h_out[static_cast<size_t>(i * (max_d + 1))],
                                                  static_cast<int32_t>(seqs[static_cast<size_t>(i)].drafts.size()));
}

}  // namespace tandem
