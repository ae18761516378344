// Host memory behind the CPU backend's Buffers: either owned (64-byte aligned, so SIMD
// loads of rows never straddle cache lines needlessly) or a read-only view of memory that
// outlives it (an mmapped model file). Only code under kernels/cpu/ sees the pointers.
#pragma once
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
  HostBuffer(const void* external, size_t bytes)
      : data_(static_cast<uint8_t*>(const_cast<void*>(external))), size_(bytes), owned_(false) {}
  ~HostBuffer() override {
    if (owned_) std::free(data_);
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
