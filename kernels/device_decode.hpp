// Optional capability of a backend: greedy decoding, coupled (Gumbel-max) sampling and the
// speculative verifier on the device, so that only token ids and accepted counts cross to
// the host each step instead of the logits. The CUDA backend has it; device_decode() is
// nullptr for others (the engine then downloads the logits and uses engine/sampler.hpp as
// today).
#pragma once
#include <cstdint>

#include "kernels/backend.hpp"

namespace tandem::kernels {

class DeviceDecode {
 public:
  virtual ~DeviceDecode() = default;
  // ids[r] = argmax of logits row r with the engine's argmax semantics (ties: lowest id,
  // NaN as -inf, -0 == +0); -1 for a row with no finite or +inf value. logits F32
  // [n, vocab], ids I32 [n].
  virtual void argmax_rows(const Tensor& ids, const Tensor& logits) = 0;
  // Coupled sampling at temperature t > 0 with no other transform (no top-k/p, min-p or
  // penalties: those stay on the host for now): ids[r] = argmax_v x[r][v] / t + g(r, v),
  // g = -log(-log u) with u = PositionNoise(seed).uniform(positions[r], v) (engine/gumbel.hpp:
  // the same counter-based noise, bit for bit, and the same portable logarithm). A draw from
  // softmax(x / t) that depends only on (seed, position, logits), so speculative output
  // equals plain sampling token for token when the drafts are verified with verify_greedy
  // against these ids. positions: I32 [n]; -1 for a row with nothing finite.
  virtual void sample_coupled(const Tensor& ids, const Tensor& logits, const Tensor& positions, float temperature,
                              uint64_t seed) = 0;
  // Verification of a batch against the target's token of each row (argmax_rows for
  // greedy, sample_coupled for coupled sampling), all tensors I32 on the backend:
  //   argmax [rows] (those tokens), first_row [n_seqs] (the row verifying a sequence's
  //   first draft), drafts [n_seqs, max_drafts], n_drafts [n_seqs] (0..max_drafts).
  // Writes n_accepted [n_seqs] (leading drafts equal to the argmax) and out_tokens
  // [n_seqs, max_drafts + 1]: the accepted drafts, the argmax after them, then -1. A
  // sequence whose rows lie outside `argmax` is reported at the next synchronize/download.
  virtual void verify_greedy(const Tensor& argmax, const Tensor& first_row, const Tensor& drafts,
                             const Tensor& n_drafts, const Tensor& n_accepted, const Tensor& out_tokens) = 0;
};

inline DeviceDecode* device_decode(Backend& be) { return dynamic_cast<DeviceDecode*>(&be); }

}  // namespace tandem::kernels
