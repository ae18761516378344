// A profile of a backend's work by op: what CudaBackend::op_profile gives (and
// kernels::cuda_op_profile through the factory), read by bench_cuda --profile.
#pragma once
#include <cstdint>
#include <string>

namespace tandem::kernels {

struct OpTime {
  // The launch's name: "rms_norm + quantize", "upload", ...; a matmul's names its kernel,
  // weight type(s) and shape: "matmul Q4_K 2048x1536", "matmul (tensor cores) Q4_K+Q6_K 2048x1536".
  std::string op;
  int64_t count = 0;       // launches (or copies)
  double ms = 0.0;         // the stream's time they took, in all
  uint64_t weight_bytes = 0;  // what a matmul's launches read of their weights, in all
};

}  // namespace tandem::kernels
