// Host memory behind the CPU backend's Buffers: owned (64-byte aligned, so SIMD loads of
// rows never straddle cache lines needlessly), owned fresh anonymous pages (zero and not
// resident until touched: large reserves such as KV caches), or a read-only view of memory
// that outlives it (an mmapped model file). Only code under kernels/cpu/ sees the pointers.
#pragma once
#include <sys/mman.h>

#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>

#include "kernels/backend.hpp"

namespace tandem::kernels::cpu {

class HostBuffer final : public Buffer {
 public:
  static constexpr size_t kAlign = 64;

  explicit HostBuffer(size_t bytes) : size_(bytes), owned_(true) {
    const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    data_ = static_cast<uint8_t*>(std::aligned_alloc(kAlign, rounded ? rounded : kAlign));
    if (!data_) throw std::bad_alloc();
  }
  struct ZeroedPages {};
  static constexpr ZeroedPages kZeroedPages{};
  // MAP_NORESERVE: a reserve larger than what gets used must not be refused by overcommit
  // accounting; pages are page-aligned (beyond kAlign).
  HostBuffer(size_t bytes, ZeroedPages) : size_(bytes), owned_(true), mapped_(true) {
    void* p = mmap(nullptr, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<uint8_t*>(p);
  }
  HostBuffer(const void* external, size_t bytes)
      : data_(static_cast<uint8_t*>(const_cast<void*>(external))), size_(bytes), owned_(false) {}
  ~HostBuffer() override {
    if (mapped_) {
      munmap(data_, size_ ? size_ : 1);
    } else if (owned_) {
      std::free(data_);
    }
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  size_t size() const override { return size_; }
  DeviceKind device() const override { return DeviceKind::CPU; }
  uint8_t* data() const { return data_; }
  bool writable() const { return owned_; }

 private:
  uint8_t* data_;
  size_t size_;
  bool owned_;
  bool mapped_ = false;
};

// Pointer to a tensor's first byte; checks that the view lies inside a CPU buffer.
inline uint8_t* host_ptr(const Tensor& t) {
  auto* hb = dynamic_cast<HostBuffer*>(t.buf);
  if (!hb) throw std::logic_error("cpu backend: tensor is not in a CPU buffer");
  if (t.offset + t.bytes() > hb->size())
    throw std::logic_error("cpu backend: tensor view exceeds its buffer (" + std::to_string(t.offset) +
                           " + " + std::to_string(t.bytes()) + " > " + std::to_string(hb->size()) + ")");
  return hb->data() + t.offset;
}
template <typename T>
inline T* host_as(const Tensor& t) {
  return reinterpret_cast<T*>(host_ptr(t));
}

}  // namespace tandem::kernels::cpu
