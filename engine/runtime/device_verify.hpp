// Greedy verification of a scheduler step's sequences on the backend
// (kernels/device_decode.hpp): the target's argmax of every logits row and the accepted
// drafts are found where the logits are, and only ids and counts come back to the host,
// instead of n_vocab floats per verified position.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/device_decode.hpp"
#include "verify/verifier.hpp"

namespace tandem {

class DeviceGreedyVerifier {
 public:
  // Null when the backend cannot decode on the device (the CPU backend).
  static std::unique_ptr<DeviceGreedyVerifier> for_backend(kernels::Backend& be);

  struct Sequence {
    int32_t first_row;                 // its first row in the logits (the pending token's)
    std::span<const int32_t> drafts;   // its drafts; rows first_row .. first_row + drafts.size()
  };
  // The verdict of each sequence against the logits [rows, n_vocab] on the backend: the
  // leading drafts equal to the argmax, and the argmax after them (what verify_greedy gives
  // on the host from the same logits).
  std::vector<VerifyResult> verify(const kernels::Tensor& logits, std::span<const Sequence> seqs);

 private:
  DeviceGreedyVerifier(kernels::Backend& be, kernels::DeviceDecode& dd) : be_(be), dd_(dd) {}
  kernels::Backend& be_;
  kernels::DeviceDecode& dd_;
  std::unique_ptr<kernels::Buffer> buf_;  // grows to the largest step seen, then stays
};

}  // namespace tandem
