// The thin device-runtime layer under CudaBackend (memory, copies, the stream), with two
// implementations:
//   runtime_cuda.cpp      the CUDA runtime (cudaMalloc once, one stream, cudaMemcpyAsync; small
//                         uploads staged in pinned memory, not waited for);
//                         every call checked, errors name the call and the CUDA message
//   runtime_emulated.cpp  host memory for the SIMT emulator build
// TANDEM_CUDA_NS selects which one a library is built with (cuda_dev / cuda_emu).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

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
  // Kernels go out as programmatic dependent launches (TANDEM_CUDA_PDL=1 on sm_90 and later;
  // kernels/cuda/simt/simt.hpp).
  bool programmatic_launches = false;
};

// A captured sequence of the stream's work (DeviceRuntime::end_capture), replayed as a whole
// on the runtime's stream: cudaGraphExec_t on the device, the recorded nodes in the emulator.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  // Enqueues the graph on the stream, ordered after the work before it (an error in one of
  // its kernels shows at the next synchronizing call, as for any launch).
  virtual void launch() = 0;
  virtual size_t nodes() const = 0;  // kernels, copies and memsets captured
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  virtual const DeviceInfo& info() const = 0;
  // The arena's memory, taken once. fresh_is_zero: never-touched memory reads as zero.
  virtual void* reserve(size_t bytes) = 0;
  virtual bool fresh_is_zero() const = 0;
  virtual void release(void* p) = 0;
  // One allocation of exactly `bytes`, for CudaOptions::separate_buffers (every buffer its
  // own, so that compute-sanitizer, or ASan under the emulator, sees an overrun), and its
  // release.
  virtual void* allocate_exact(size_t bytes) = 0;
  virtual void free_exact(void* p) = 0;
  virtual void* stream() = 0;  // cudaStream_t for launches
  // All ordered on the one stream. copy_to_host waits for it (and what came before);
  // copy_to_device may return before the copy is done but never reads src afterwards.
  virtual void copy_to_device(void* dst, const void* src, size_t n) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t n) = 0;
  virtual void copy_on_device(void* dst, const void* src, size_t n) = 0;
  virtual void zero(void* dst, size_t n) = 0;
  virtual void synchronize() = 0;
  // After each launch: cudaGetLastError always; a synchronize too in debug builds or with
  // TANDEM_CUDA_CHECK_LAUNCHES=1, so that a fault names its op.
  virtual void check_launch(const char* op) = 0;

  // Stream capture. Between begin_capture and end_capture the stream's kernels, device
  // copies and zeroing are recorded into a graph, not run. What CUDA forbids on a capturing
  // stream (copy_to_host, copy_to_device from host memory, synchronize) throws and spoils
  // the capture: end_capture then throws too. abort_capture ends a capture that failed,
  // discarding it; the stream is usable again afterwards. One capture at a time, begun and
  // ended on the same thread.
  virtual void begin_capture() = 0;
  virtual std::unique_ptr<DeviceGraph> end_capture() = 0;
  virtual void abort_capture() noexcept = 0;
  virtual bool capturing() const = 0;

  // Timing marks, for a profile of the stream's work: mark() records when the stream gets to
  // this point (after everything enqueued before it); take_marks() waits for the stream and
  // gives the milliseconds between consecutive marks since the last take (one fewer than
  // the marks), forgetting them. Not while capturing (a mark would become a graph node).
  virtual void mark() = 0;
  virtual std::vector<double> take_marks() = 0;
};

// The runtime of this build; throws std::runtime_error with one clear line when there is
// no driver or no device.
std::unique_ptr<DeviceRuntime> make_runtime(int device_index);


}  // namespace tandem::kernels::TANDEM_CUDA_NS
