// The real device runtime: the CUDA runtime API on one device and one stream. Every call is checked; an error names the call and CUDA's message.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/runtime.hpp"

namespace tandem::simt {
// Read by every launch of the kernel files (kernels/cuda/simt/simt.hpp, nvcc's branch).
std::atomic<bool>& pdl_launches() {
  static std::atomic<bool> on{false};
  return on;
}
}  // namespace tandem::simt

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("cuda: ") + what + " failed: " + cudaGetErrorName(e) + ": " +
                             cudaGetErrorString(e));
}

// TANDEM_CUDA_PDL=1: kernels as programmatic dependent launches (sm_90 and later).
bool pdl_default() {
  const char* e = std::getenv("TANDEM_CUDA_PDL");
  return e && *e && *e != '0';
}

bool check_launches_default() {
#ifdef NDEBUG
  const char* e = std::getenv("TANDEM_CUDA_CHECK_LAUNCHES");
  return e && *e && *e != '0';
#else
  return true;
#endif
}

// An instantiated graph; launched on the stream it was captured on.
class CudaGraph final : public DeviceGraph {
 public:
  CudaGraph(cudaGraphExec_t exec, cudaStream_t stream, size_t nodes) : exec_(exec), stream_(stream), nodes_(nodes) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  void launch() override { check(cudaGraphLaunch(exec_, stream_), "cudaGraphLaunch"); }
  size_t nodes() const override { return nodes_; }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
  size_t nodes_;
};

class CudaRuntime final : public DeviceRuntime {
 public:
  explicit CudaRuntime(int device) : device_(device) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0))
      throw std::runtime_error("cuda: no CUDA device found");
    if (e == cudaErrorInsufficientDriver)
      throw std::runtime_error("cuda: no usable NVIDIA driver (" + std::string(cudaGetErrorString(e)) + ")");
    check(e, "cudaGetDeviceCount");
    if (device < 0 || device >= n)
      throw std::runtime_error("cuda: device " + std::to_string(device) + " requested, " + std::to_string(n) +
                               " present");
    check(cudaSetDevice(device), "cudaSetDevice");
    cudaDeviceProp p{};
    check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
    info_.name = p.name;
    info_.cc_major = p.major;
    info_.cc_minor = p.minor;
    info_.sm_count = p.multiProcessorCount;
    check(cudaMemGetInfo(&info_.free_bytes, &info_.total_bytes), "cudaMemGetInfo");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_launches_ = check_launches_default();
    info_.programmatic_launches = pdl_default() && p.major >= 9;
    simt::pdl_launches().store(info_.programmatic_launches);
  }
  ~CudaRuntime() override {
    if (stream_) cudaStreamSynchronize(stream_);
    for (cudaEvent_t e : marks_) cudaEventDestroy(e);
    for (Stage& st : stage_) {
      if (st.done) cudaEventDestroy(st.done);
      if (st.host) cudaFreeHost(st.host);
    }
    if (stream_) cudaStreamDestroy(stream_);
  }
  const DeviceInfo& info() const override { return info_; }
  void* reserve(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw std::runtime_error("cuda: cannot reserve an arena of " + std::to_string(bytes >> 20) + " MiB on " +
                               info_.name + " (" + std::to_string(info_.free_bytes >> 20) + " MiB free); pass a smaller --gpu-mem");
    }
    check(e, "cudaMalloc (arena)");
    return p;
  }
  bool fresh_is_zero() const override { return false; }
  void* allocate_exact(size_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc (a separate buffer)");
    return p;
  }
  void free_exact(void* p) override {
    if (p) cudaFree(p);
  }
  void release(void* p) override {
    if (p) cudaFree(p);
  }
  void* stream() override { return stream_; }
  void copy_to_device(void* dst, const void* src, size_t n) override {
    if (!n) return;
    if (n <= kStageBytes && !capturing_) {
      staged_upload(dst, src, n);
      return;
    }
    check(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (upload)");
    // Pageable source: the runtime has staged it when the call returns, but a pinned one
    // would be read later; wait so the caller may free it at once.
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (upload)");
  }
  void copy_to_host(void* dst, const void* src, size_t n) override {
    if (n) check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (download)");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (download)");
  }
  void copy_on_device(void* dst, const void* src, size_t n) override {
    if (n) check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync (device)");
  }
  void zero(void* dst, size_t n) override {
    if (n) check(cudaMemsetAsync(dst, 0, n, stream_), "cudaMemsetAsync");
  }
  void synchronize() override { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  void check_launch(const char* op) override {
    // The launch's own error (a bad configuration, too much shared memory, no kernel image
    // for this device) costs nothing to read and is always checked.
    check(cudaGetLastError(), op);
    // A fault while the kernel runs shows up at the next synchronizing call; waiting here
    // names the op, at the price of the pipelining. A capturing stream refuses a
    // synchronize (and the capture would be lost): the graph's launch reports its faults.
    if (check_launches_ && !capturing_) check(cudaStreamSynchronize(stream_), op);
  }

  // Thread-local mode: what this thread does during the capture is checked (a cudaMalloc, a
  // synchronous copy: refused), other threads are not stopped; the one stream is ours.
  void begin_capture() override {
    if (capturing_) throw std::logic_error("cuda: begin_capture while a capture is open");
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    capturing_ = true;
  }
  std::unique_ptr<DeviceGraph> end_capture() override {
    if (!capturing_) throw std::logic_error("cuda: end_capture without a capture");
    capturing_ = false;
    cudaGraph_t g = nullptr;
    check(cudaStreamEndCapture(stream_, &g), "cudaStreamEndCapture");
    size_t n = 0;
    cudaGraphExec_t exec = nullptr;
    const char* what = "cudaGraphGetNodes";
    cudaError_t e = cudaGraphGetNodes(g, nullptr, &n);
    if (e == cudaSuccess) {
      what = "cudaGraphInstantiate";
      e = cudaGraphInstantiate(&exec, g, 0);
    }
    cudaGraphDestroy(g);  // the executable graph does not need it
    check(e, what);
    return std::make_unique<CudaGraph>(exec, stream_, n);
  }
  void abort_capture() noexcept override {
    if (!capturing_) return;
    capturing_ = false;
    cudaGraph_t g = nullptr;
    if (cudaStreamEndCapture(stream_, &g) == cudaSuccess && g) cudaGraphDestroy(g);
    cudaGetLastError();  // the invalidated capture's error is not the next call's
  }
  bool capturing() const override { return capturing_; }

  void mark() override {
    if (capturing_) throw std::logic_error("cuda: a timing mark while capturing");
    if (n_marks_ == marks_.size()) {  // events are kept for the next profile
      cudaEvent_t e = nullptr;
      check(cudaEventCreate(&e), "cudaEventCreate (timing mark)");
      marks_.push_back(e);
    }
    check(cudaEventRecord(marks_[n_marks_++], stream_), "cudaEventRecord (timing mark)");
  }
  std::vector<double> take_marks() override {
    std::vector<double> ms;
    if (n_marks_ > 0) check(cudaEventSynchronize(marks_[n_marks_ - 1]), "cudaEventSynchronize (timing mark)");
    for (size_t i = 1; i < n_marks_; ++i) {
      float m = 0.0f;
      check(cudaEventElapsedTime(&m, marks_[i - 1], marks_[i]), "cudaEventElapsedTime");
      ms.push_back(m);
    }
    n_marks_ = 0;
    return ms;
  }

 private:
  // A pass's inputs (tokens, positions, slots, block tables: a few KiB) go up without the
  // host waiting for the stream: copied into a pinned staging slot, then an asynchronous
  // copy ordered before the pass's kernels. A slot is written again only once the copy that
  // read it is done (its event), which is long past unless the host runs kStageSlots uploads
  // ahead of the device. Larger uploads (weights at load) take the waiting path.
  static constexpr size_t kStageSlots = 16, kStageBytes = size_t{256} << 10;
  struct Stage {
    void* host = nullptr;
    cudaEvent_t done = nullptr;
  };
  void staged_upload(void* dst, const void* src, size_t n) {
    std::lock_guard<std::mutex> lock(stage_mu_);
    Stage& st = stage_[next_stage_];
    next_stage_ = (next_stage_ + 1) % kStageSlots;
    if (!st.host) {
      check(cudaHostAlloc(&st.host, kStageBytes, cudaHostAllocDefault), "cudaHostAlloc (upload staging)");
      check(cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming), "cudaEventCreate (upload staging)");
    } else {
      check(cudaEventSynchronize(st.done), "cudaEventSynchronize (upload staging)");
    }
    std::memcpy(st.host, src, n);
    check(cudaMemcpyAsync(dst, st.host, n, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (upload)");
    check(cudaEventRecord(st.done, stream_), "cudaEventRecord (upload staging)");
  }

  int device_;
  DeviceInfo info_;
  cudaStream_t stream_ = nullptr;
  bool check_launches_ = false;
  bool capturing_ = false;
  std::vector<cudaEvent_t> marks_;  // timing marks: the first n_marks_ are recorded
  size_t n_marks_ = 0;
  std::mutex stage_mu_;
  Stage stage_[kStageSlots];
  size_t next_stage_ = 0;
};

}  // namespace

std::unique_ptr<DeviceRuntime> make_runtime(int device_index) { return std::make_unique<CudaRuntime>(device_index); }

}  // namespace tandem::kernels::TANDEM_CUDA_NS
