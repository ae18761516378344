// The emulated device runtime: "device" memory is host memory (a MAP_NORESERVE mapping, so
// a large arena costs nothing until used), copies are memcpy, launches run synchronously.
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>
#include <thread>

#include "kernels/cuda/runtime.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

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
  void release(void* p) override {
    if (p) munmap(p, reserved_);
  }
  void* stream() override { return nullptr; }
  void copy_to_device(void* dst, const void* src, size_t n) override {
    if (n) std::memcpy(dst, src, n);
  }
  void copy_to_host(void* dst, const void* src, size_t n) override {
    if (n) std::memcpy(dst, src, n);
  }
  void copy_on_device(void* dst, const void* src, size_t n) override {
    if (n) std::memmove(dst, src, n);
  }
  void zero(void* dst, size_t n) override {
    if (n) std::memset(dst, 0, n);
  }
  void synchronize() override {}
  void check_launch(const char*) override {}

 private:
  DeviceInfo info_;
  size_t reserved_ = 0;
};

}  // namespace

std::unique_ptr<DeviceRuntime> make_runtime(int) { return std::make_unique<EmulatedRuntime>(); }

}  // namespace tandem::kernels::TANDEM_CUDA_NS
