// Entry point of one CUDA backend build (compiled into each with its TANDEM_CUDA_NS).
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/cuda_backend_entry.hpp"

namespace tandem::kernels::cuda_entry {
#if TANDEM_CUDA_EMULATED_BUILD
std::unique_ptr<Backend> make_emulated(size_t arena_bytes, int64_t gemm_min_tokens) {
  TANDEM_CUDA_NS::CudaOptions o;
  o.arena_bytes = arena_bytes;
  o.gemm_min_tokens = gemm_min_tokens;
  return TANDEM_CUDA_NS::make_cuda_backend(o);
}
double copy_gbps_emulated(Backend& be, size_t bytes, int reps) {
  auto* c = dynamic_cast<TANDEM_CUDA_NS::CudaBackend*>(&be);
  return c ? c->measure_copy_gbps(bytes, reps) : -1.0;
}
int64_t launches_emulated(const Backend& be) {
  auto* c = dynamic_cast<const TANDEM_CUDA_NS::CudaBackend*>(&be);
  return c ? static_cast<int64_t>(c->launches()) : -1;
}
int64_t bytes_to_host_emulated(const Backend& be) {
  auto* c = dynamic_cast<const TANDEM_CUDA_NS::CudaBackend*>(&be);
  return c ? static_cast<int64_t>(c->bytes_to_host()) : -1;
}
bool profile_ops_emulated(Backend& be, bool on) {
  auto* c = dynamic_cast<TANDEM_CUDA_NS::CudaBackend*>(&be);
  if (c) c->profile_ops(on);
  return c != nullptr;
}
bool op_profile_emulated(Backend& be, std::vector<OpTime>& out) {
  auto* c = dynamic_cast<TANDEM_CUDA_NS::CudaBackend*>(&be);
  if (c) out = c->op_profile();
  return c != nullptr;
}
#else
std::unique_ptr<Backend> make_device(int device, size_t arena_bytes, double arena_fraction, int64_t gemm_min_tokens) {
  TANDEM_CUDA_NS::CudaOptions o;
  o.device = device;
  o.arena_bytes = arena_bytes;
  o.arena_fraction = arena_fraction;
  o.gemm_min_tokens = gemm_min_tokens;
  return TANDEM_CUDA_NS::make_cuda_backend(o);
}
double copy_gbps_device(Backend& be, size_t bytes, int reps) {
  auto* c = dynamic_cast<TANDEM_CUDA_NS::CudaBackend*>(&be);
  return c ? c->measure_copy_gbps(bytes, reps) : -1.0;
}
int64_t launches_device(const Backend& be) {
  auto* c = dynamic_cast<const TANDEM_CUDA_NS::CudaBackend*>(&be);
  return c ? static_cast<int64_t>(c->launches()) : -1;
}
int64_t bytes_to_host_device(const Backend& be) {
  auto* c = dynamic_cast<const TANDEM_CUDA_NS::CudaBackend*>(&be);
  return c ? static_cast<int64_t>(c->bytes_to_host()) : -1;
}
bool profile_ops_device(Backend& be, bool on) {
  auto* c = dynamic_cast<TANDEM_CUDA_NS::CudaBackend*>(&be);
  if (c) c->profile_ops(on);
  return c != nullptr;
}
bool op_profile_device(Backend& be, std::vector<OpTime>& out) {
  auto* c = dynamic_cast<TANDEM_CUDA_NS::CudaBackend*>(&be);
  if (c) out = c->op_profile();
  return c != nullptr;
}
#endif
}  // namespace tandem::kernels::cuda_entry
