// The emulated device runtime: "device" memory is host memory (a MAP_NORESERVE mapping, so
// a large arena costs nothing until used), copies are memcpy, launches run synchronously.
// Stream capture is the emulator's (simt/capture.hpp): kernels, device copies and memsets on
// the stream are recorded; what CUDA forbids during a capture throws here.
#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/runtime.hpp"
#include "kernels/cuda/simt/capture.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

class EmulatedGraph final : public DeviceGraph {
 public:
  explicit EmulatedGraph(simt::Graph g) : g_(std::move(g)) {}
  void launch() override { g_.replay(); }
  size_t nodes() const override { return g_.nodes().size(); }

 private:
  simt::Graph g_;
};

class EmulatedRuntime final : public DeviceRuntime {
 public:
  EmulatedRuntime() {
    info_.name = "SIMT emulator on the host CPU";
    info_.emulated = true;
    info_.cc_major = 9;  // the kernels are written for sm_80/sm_90; nothing here depends on it
    info_.cc_minor = 0;
    info_.sm_count = static_cast<int>(std::thread::hardware_concurrency());
  }
  const DeviceInfo& info() const override { return info_; }
  void* reserve(size_t bytes) override {
    void* p = mmap(nullptr, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("cuda (emulated): cannot map " + std::to_string(bytes) + " bytes");
    reserved_ = bytes ? bytes : 1;
    info_.total_bytes = info_.free_bytes = bytes;
    return p;
  }
  bool fresh_is_zero() const override { return true; }
  // Heap memory of exactly the size asked (ASan's redzones then border each buffer).
  void* allocate_exact(size_t bytes) override { return ::operator new(bytes ? bytes : 1, std::align_val_t{256}); }
  void free_exact(void* p) override { ::operator delete(p, std::align_val_t{256}); }
  void release(void* p) override {
    if (p) munmap(p, reserved_);
  }
  // A handle of this runtime's own (never dereferenced): captures are per stream.
  void* stream() override { return stream_; }
  void copy_to_device(void* dst, const void* src, size_t n) override {
    forbidden_while_capturing("copy_to_device (an upload from host memory)");
    if (n) std::memcpy(dst, src, n);
  }
  void copy_to_host(void* dst, const void* src, size_t n) override {
    forbidden_while_capturing("copy_to_host (a download, which waits for the stream)");
    if (n) std::memcpy(dst, src, n);
  }
  void copy_on_device(void* dst, const void* src, size_t n) override {
    if (simt::record_copy(st(), dst, src, n)) return;
    if (n) std::memmove(dst, src, n);
  }
  void zero(void* dst, size_t n) override {
    if (simt::record_memset(st(), dst, 0, n)) return;
    if (n) std::memset(dst, 0, n);
  }
  void synchronize() override { forbidden_while_capturing("synchronize"); }
  void check_launch(const char*) override {}

  void begin_capture() override { simt::begin_capture(st()); }
  std::unique_ptr<DeviceGraph> end_capture() override {
    return std::make_unique<EmulatedGraph>(simt::end_capture(st()));
  }
  void abort_capture() noexcept override { simt::abort_capture(st()); }
  bool capturing() const override { return simt::is_capturing(stream_); }
  // Launches and copies run synchronously: the stream is where the host is.
  void mark() override {
    if (capturing()) throw std::logic_error("cuda (emulated): a timing mark while capturing");
    marks_.push_back(std::chrono::steady_clock::now());
  }
  std::vector<double> take_marks() override {
    std::vector<double> ms;
    for (size_t i = 1; i < marks_.size(); ++i)
      ms.push_back(std::chrono::duration<double, std::milli>(marks_[i] - marks_[i - 1]).count());
    marks_.clear();
    return ms;
  }

 private:
  cudaStream_t st() const { return stream_; }
  // What CUDA refuses on a capturing stream: the call fails and the capture is invalidated.
  void forbidden_while_capturing(const char* what) {
    if (!simt::is_capturing(st())) return;
    const std::string why = std::string(what) + " while the stream is being captured";
    simt::invalidate_capture(st(), why);
    throw std::logic_error("cuda (emulated): " + why + " (CUDA: cudaErrorStreamCaptureUnsupported)");
  }

  DeviceInfo info_;
  size_t reserved_ = 0;
  std::vector<std::chrono::steady_clock::time_point> marks_;
  cudaStream_t stream_ = reinterpret_cast<cudaStream_t>(this);
};

}  // namespace

std::unique_ptr<DeviceRuntime> make_runtime(int) { return std::make_unique<EmulatedRuntime>(); }

}  // namespace tandem::kernels::TANDEM_CUDA_NS
