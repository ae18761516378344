// A profile of a backend's work by op: what CudaBackend::op_profile gives (and
// kernels::cuda_op_profile through the factory), read by bench_cuda --profile.
#pragma once
#include <cstdint>
#include <string>

namespace tandem::kernels {

struct OpTime {
  std::string op;        // the launch's name: "matmul", "rms_norm + quantize", "upload", ...
  int64_t count = 0;     // launches (or copies)
  double ms = 0.0;       // the stream's time they took, in all
};

}  // namespace tandem::kernels
