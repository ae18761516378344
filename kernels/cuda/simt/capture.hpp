// Stream capture in the SIMT emulator: what cudaStreamBeginCapture / cudaStreamEndCapture /
// cudaGraphLaunch do, for the emulated runtime (runtime_emulated.cpp).
//
// While a stream captures, TANDEM_LAUNCH on it records the launch (the kernel, grid, block,
// dynamic shared bytes and the arguments converted to the kernel's parameter types) instead
// of running it, and the emulated runtime records its device-side copies and memsets the
// same way. end_capture() hands back the recorded nodes as a Graph; replay() runs them in
// order, each kernel over its recorded argument values, as a graph launch does.
//
// What CUDA refuses while a stream captures (a host-synchronizing copy or synchronize, an
// upload from host memory) is refused by the emulated runtime: it marks the capture
// invalidated (invalidate_capture) and throws, and end_capture() then throws as
// cudaStreamEndCapture returns cudaErrorStreamCaptureInvalidated. Captures are per stream;
// each emulated runtime has a stream handle of its own.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <typeinfo>
#include <vector>

#include "kernels/cuda/simt/simt.hpp"

namespace tandem::simt {

struct GraphNode {
  enum class Kind { Kernel, Copy, Memset };
  Kind kind = Kind::Kernel;
  // Kernel: the kernel function and its launch shape (grid, block, dynamic shared bytes).
  const void* kernel = nullptr;
  detail::LaunchConfig cfg;
  // Copy (device to device) and Memset: where and how much (value: the memset byte).
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
  int value = 0;
  std::function<void()> run;

  // The recorded arguments of a Kernel node when the kernel's parameter types are P...;
  // nullptr for another node or other types.
  template <typename... P>
  const std::tuple<P...>* arguments() const {
    return args_type && *args_type == typeid(std::tuple<P...>) ? static_cast<const std::tuple<P...>*>(args.get())
                                                                 : nullptr;
  }
  std::shared_ptr<const void> args;
  const std::type_info* args_type = nullptr;
};

class Graph {
 public:
  const std::vector<GraphNode>& nodes() const { return nodes_; }
  // Runs the nodes in order on the calling thread (a launch error propagates; the nodes
  // after it do not run).
  void replay() const;

 private:
  friend Graph end_capture(cudaStream_t s);
  std::vector<GraphNode> nodes_;
};

// Throws std::logic_error when `s` already captures.
void begin_capture(cudaStream_t s);
// The recorded graph. Throws std::logic_error when `s` does not capture, or when the capture
// was invalidated (the capture ends either way).
Graph end_capture(cudaStream_t s);
// Ends a capture, if any, discarding what it recorded (a capture that failed half way).
void abort_capture(cudaStream_t s) noexcept;
bool is_capturing(cudaStream_t s);
// Marks the capture of `s` as failed (a forbidden call was made during it).
void invalidate_capture(cudaStream_t s, const std::string& why);
// The emulated runtime's device-side copies and memsets: appended to the capture of `s` and
// true, or false when `s` does not capture (the caller then does it now).
bool record_copy(cudaStream_t s, void* dst, const void* src, size_t n);
bool record_memset(cudaStream_t s, void* dst, int value, size_t n);

}  // namespace tandem::simt
