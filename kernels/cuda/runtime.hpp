// The thin device-runtime layer under CudaBackend (memory, copies, the stream), with two
// implementations:
//   runtime_cuda.cpp      the CUDA runtime (cudaMalloc once, one stream, cudaMemcpyAsync);
//                         every call checked, errors name the call and the CUDA message
//   runtime_emulated.cpp  host memory for the SIMT emulator build
// TANDEM_CUDA_NS selects which one a library is built with (cuda_dev / cuda_emu).
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#ifndef TANDEM_CUDA_NS
#error "TANDEM_CUDA_NS must be defined (cuda_dev or cuda_emu) by the build"
#endif

namespace tandem::kernels::TANDEM_CUDA_NS {

struct DeviceInfo {
  std::string name;  // "NVIDIA H200", "SIMT emulator (host CPU)"
  int cc_major = 0, cc_minor = 0;
  size_t total_bytes = 0, free_bytes = 0;
  int sm_count = 0;
  bool emulated = false;
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  virtual const DeviceInfo& info() const = 0;
  // The arena's memory, taken once. fresh_is_zero: never-touched memory reads as zero.
  virtual void* reserve(size_t bytes) = 0;
  virtual bool fresh_is_zero() const = 0;
  virtual void release(void* p) = 0;
  virtual void* stream() = 0;  // cudaStream_t for launches
  // All ordered on the one stream. copy_to_host waits for it (and what came before);
  // copy_to_device may return before the copy is done but never reads src afterwards.
  virtual void copy_to_device(void* dst, const void* src, size_t n) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t n) = 0;
  virtual void copy_on_device(void* dst, const void* src, size_t n) = 0;
  virtual void zero(void* dst, size_t n) = 0;
  virtual void synchronize() = 0;
  // After each launch: cudaGetLastError (debug builds, or TANDEM_CUDA_CHECK_LAUNCHES=1).
  virtual void check_launch(const char* op) = 0;
};

// The runtime of this build; throws std::runtime_error with one clear line when there is
// no driver or no device.
std::unique_ptr<DeviceRuntime> make_runtime(int device_index);


}  // namespace tandem::kernels::TANDEM_CUDA_NS
