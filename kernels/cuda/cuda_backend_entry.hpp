// The two CUDA backend builds' entry points, without their namespaced types, for the
// factory (backend_factory.cpp). Defined in cuda_entry_emu.cpp / cuda_entry_dev.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/op_profile.hpp"

namespace tandem::kernels::cuda_entry {
std::unique_ptr<Backend> make_emulated(size_t arena_bytes, int64_t gemm_min_tokens);
std::unique_ptr<Backend> make_device(int device, size_t arena_bytes, double arena_fraction, int64_t gemm_min_tokens);
// Copy bandwidth of a backend of that build; a negative value when `be` is not one.
double copy_gbps_emulated(Backend& be, size_t bytes, int reps);
double copy_gbps_device(Backend& be, size_t bytes, int reps);
// Kernels launched by a backend of that build so far; -1 when `be` is not one.
int64_t launches_emulated(const Backend& be);
int64_t launches_device(const Backend& be);
// Bytes a backend of that build has downloaded to the host so far; -1 when `be` is not one.
int64_t bytes_to_host_emulated(const Backend& be);
int64_t bytes_to_host_device(const Backend& be);
// CudaBackend::profile_ops / op_profile of a backend of that build; false when `be` is not one.
bool profile_ops_emulated(Backend& be, bool on);
bool profile_ops_device(Backend& be, bool on);
bool op_profile_emulated(Backend& be, std::vector<OpTime>& out);
bool op_profile_device(Backend& be, std::vector<OpTime>& out);
}  // namespace tandem::kernels::cuda_entry
