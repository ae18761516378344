// A step's verification, host or device, behind one entry point. A driver asks the
// StepVerifier where each sequence's verdict is reached (on_device): on a backend that
// decodes on the device (the CUDA one) a sequence without host-held q is verified there,
// its logits never leaving the device (DeviceVerifier, one batch for the step; a grammar's
// masks go up, logprobs come down); every other sequence verifies on the host from its rows
// (verify_host, with the verifier its request's mode calls for: greedy, coupled or
// rejection sampling).
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "kernels/backend.hpp"
#include "verify/device_verifier.hpp"
#include "verify/tree_verifier.hpp"
#include "verify/verifier.hpp"

namespace tandem {

// One sequence's step as the host verifies it.
struct HostStep {
  std::span<const int32_t> drafts;
  const DistFn* target = nullptr;  // p_i (lazily, as the positions are reached)
  const DistFn* draft = nullptr;   // q_i; null: point masses (deterministic drafts)
  bool greedy = false;             // p is the argmax: no randomness
  const PositionNoise* coupled = nullptr;  // coupled verification with this noise, else rejection sampling
  Rng* rng = nullptr;              // rejection sampling's random stream
  int64_t position = 0;            // the absolute position of the first verified token
};

// The host's verdict: verify_greedy, verify_coupled or verify_stochastic.
VerifyResult verify_host(const HostStep& s);
// The same for a token tree (verify/tree_verifier.hpp): s.target and s.draft are by row (0:
// the root, 1 + i: node i), s.drafts unused.
TreeVerdict verify_host_tree(const HostStep& s, std::span<const int32_t> drafts, std::span<const int32_t> parents);

class StepVerifier {
 public:
  explicit StepVerifier(kernels::Backend& be) : device_(DeviceVerifier::for_backend(be)) {}
  // Whether a sequence the device may verify (its run's verdict_on_device) is verified there.
  bool on_device(bool eligible) const { return device_ && eligible; }
  // The verdicts of the step's device sequences, against the pass's logits on the backend.
  // q: the step's draft distributions on the device (draft/draft_probs.hpp), null without.
  std::vector<VerifyResult> verify_on_device(const kernels::Tensor& logits, std::span<const DeviceVerifier::Sequence> seqs,
                                             const kernels::Tensor* q = nullptr) {
    return device_->verify(logits, seqs, q);
  }

 private:
  std::unique_ptr<DeviceVerifier> device_;  // null on a backend that does not decode on the device
};

}  // namespace tandem
