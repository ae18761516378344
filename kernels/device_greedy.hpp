// Optional capability of a backend: greedy decoding and greedy speculative verification on
// the device, so that only token ids and accepted counts cross to the host each step
// instead of the logits. The CUDA backend has it; device_greedy() is nullptr for others
// (the engine then downloads the logits and uses engine/sampler.hpp as today).
#pragma once
#include "kernels/backend.hpp"

namespace tandem::kernels {

class DeviceGreedy {
 public:
  virtual ~DeviceGreedy() = default;
  // ids[r] = argmax of logits row r with the engine's argmax semantics (ties: lowest id,
  // NaN as -inf, -0 == +0); -1 for a row with no finite or +inf value. logits F32
  // [n, vocab], ids I32 [n].
  virtual void argmax_rows(const Tensor& ids, const Tensor& logits) = 0;
  // Greedy verification of a batch, all tensors I32 on the backend:
  //   argmax [rows] (from argmax_rows), first_row [n_seqs] (the row verifying a sequence's
  //   first draft), drafts [n_seqs, max_drafts], n_drafts [n_seqs] (0..max_drafts).
  // Writes n_accepted [n_seqs] (leading drafts equal to the argmax) and out_tokens
  // [n_seqs, max_drafts + 1]: the accepted drafts, the argmax after them, then -1. A
  // sequence whose rows lie outside `argmax` is reported at the next synchronize/download.
  virtual void verify_greedy(const Tensor& argmax, const Tensor& first_row, const Tensor& drafts,
                             const Tensor& n_drafts, const Tensor& n_accepted, const Tensor& out_tokens) = 0;
};

inline DeviceGreedy* device_greedy(Backend& be) { return dynamic_cast<DeviceGreedy*>(&be); }

}  // namespace tandem::kernels
