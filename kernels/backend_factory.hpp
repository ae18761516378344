// Choosing a backend: the CPU backend, the CUDA backend on a real device, or the CUDA
// backend's code under the SIMT emulator (tests; see docs/cuda.md). Link tandem_backends.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/op_profile.hpp"

namespace tandem::kernels {

struct BackendOptions {
  // "cpu", "cuda" (a real device or an error), "auto" (CUDA when this build has it and a
  // device and driver are present, else CPU), "cuda-emulated" (the CUDA backend's kernels
  // under the SIMT emulator on the host: slow, for tests).
  std::string device = "auto";
  int cpu_threads = 0;  // CPU backend: 0 = physical cores
  bool pin_threads = false;
  int cuda_device = 0;
  size_t gpu_mem_bytes = 0;       // the CUDA arena; 0 = gpu_mem_fraction of free memory
  double gpu_mem_fraction = 0.90;  // (emulated: 0 means 256 MiB)
  int64_t gemm_min_tokens = 0;     // > 0: matmuls of >= this many tokens use dequantize + GEMM (not batch invariant)
};

// The chosen backend. `reason` is one line saying why when "auto" fell back to the CPU
// ("cuda: no CUDA device found; using the CPU backend"), else empty.
struct BackendChoice {
  std::unique_ptr<Backend> backend;
  std::string reason;
};
// Throws std::runtime_error for "cuda" when this build has no CUDA backend or there is no
// usable device (the message says which), std::invalid_argument for an unknown device.
BackendChoice choose_backend(const BackendOptions& opt);
std::unique_ptr<Backend> make_backend(const BackendOptions& opt, std::string* reason = nullptr);

// The CUDA backend under the SIMT emulator, with an arena of arena_bytes (host memory,
// reserved lazily). Always available (plain C++).
std::unique_ptr<Backend> make_emulated_cuda_backend(size_t arena_bytes = size_t{256} << 20,
                                                    int64_t gemm_min_tokens = 0);

// Device-to-device copy bandwidth in GB/s of a CUDA backend (real or emulated), measured
// over `reps` copies of `bytes`; 0 for other backends.
double cuda_copy_bandwidth_gbps(Backend& be, size_t bytes, int reps = 20);

// Kernels a CUDA backend (real or emulated) has launched directly so far (a graph's replay
// counts once per kernel when it is captured, not per replay); -1 for other backends.
int64_t cuda_launch_count(const Backend& be);
// Bytes a CUDA backend (real or emulated) has downloaded to the host so far; -1 for others.
int64_t cuda_bytes_to_host(const Backend& be);

// A profile of a CUDA backend's (real or emulated) stream by op (CudaBackend::profile_ops):
// cuda_profile_ops(be, true) starts one (false for other backends), cuda_op_profile gives
// what ran since, most time first, and starts the next (empty for other backends).
bool cuda_profile_ops(Backend& be, bool on);
std::vector<OpTime> cuda_op_profile(Backend& be);

// Whether this build contains the real (nvcc) CUDA backend.
bool cuda_backend_built();

// Parses "24G", "512M", "1.5GiB", "123456" (bytes) into bytes; throws std::invalid_argument.
size_t parse_memory_size(const std::string& s);

}  // namespace tandem::kernels
