#include "engine/runtime/device_verify.hpp"

#include <algorithm>
#include <stdexcept>

namespace tandem {

std::unique_ptr<DeviceGreedyVerifier> DeviceGreedyVerifier::for_backend(kernels::Backend& be) {
  kernels::DeviceDecode* dd = kernels::device_decode(be);
  if (!dd) return nullptr;
  return std::unique_ptr<DeviceGreedyVerifier>(new DeviceGreedyVerifier(be, *dd));
}

std::vector<VerifyResult> DeviceGreedyVerifier::verify(const kernels::Tensor& logits, std::span<const Sequence> seqs) {
  if (seqs.empty()) return {};
  const int64_t rows = logits.rows();
  const int64_t n = static_cast<int64_t>(seqs.size());
  int64_t max_d = 1;  // at least one column: no tensor is empty
  for (const Sequence& s : seqs) {
    max_d = std::max<int64_t>(max_d, static_cast<int64_t>(s.drafts.size()));
    if (s.first_row < 0 || s.first_row + static_cast<int64_t>(s.drafts.size()) >= rows)
      throw std::logic_error("device verification: a sequence's rows lie outside the logits");
  }
  // One I32 buffer: argmax [rows] | first_row [n] | drafts [n, max_d] | n_drafts [n] |
  // n_accepted [n] | out_tokens [n, max_d + 1].
  const int64_t words = rows + n + n * max_d + n + n + n * (max_d + 1);
  const size_t bytes = static_cast<size_t>(words) * sizeof(int32_t);
  if (!buf_ || buf_->size() < bytes) buf_ = be_.alloc(bytes);
  size_t at = 0;
  auto take = [&](int64_t ne0, int64_t ne1) {
    const kernels::Tensor t = kernels::make_tensor(buf_.get(), DType::I32, ne0, ne1, at);
    at += static_cast<size_t>(ne0 * ne1) * sizeof(int32_t);
    return t;
  };
  const kernels::Tensor argmax = take(rows, 1), first = take(n, 1), drafts = take(max_d, n), n_drafts = take(n, 1),
                        n_acc = take(n, 1), out = take(max_d + 1, n);
  std::vector<int32_t> h_first(static_cast<size_t>(n)), h_drafts(static_cast<size_t>(n * max_d), -1),
      h_nd(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const Sequence& s = seqs[static_cast<size_t>(i)];
    h_first[static_cast<size_t>(i)] = s.first_row;
    h_nd[static_cast<size_t>(i)] = static_cast<int32_t>(s.drafts.size());
    std::copy(s.drafts.begin(), s.drafts.end(), h_drafts.begin() + i * max_d);
  }
  be_.upload(first, h_first.data(), h_first.size() * sizeof(int32_t));
  be_.upload(drafts, h_drafts.data(), h_drafts.size() * sizeof(int32_t));
  be_.upload(n_drafts, h_nd.data(), h_nd.size() * sizeof(int32_t));
  dd_.argmax_rows(argmax, logits);
  dd_.verify_greedy(argmax, first, drafts, n_drafts, n_acc, out);
  std::vector<int32_t> h_acc(static_cast<size_t>(n)), h_out(static_cast<size_t>(n * (max_d + 1)));
  be_.download(h_acc.data(), n_acc, h_acc.size() * sizeof(int32_t));
  be_.download(h_out.data(), out, h_out.size() * sizeof(int32_t));
  be_.synchronize();
  std::vector<VerifyResult> verdicts(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    VerifyResult& v = verdicts[static_cast<size_t>(i)];
    v.n_accepted = h_acc[static_cast<size_t>(i)];
    const int32_t k = h_nd[static_cast<size_t>(i)];
    v.next_token = v.n_accepted >= 0 && v.n_accepted <= k ? h_out[static_cast<size_t>(i * (max_d + 1) + v.n_accepted)] : -1;
    v.all_accepted = v.n_accepted == k;
  }
  return verdicts;
}

}  // namespace tandem
