// Optional capability of a backend: capturing the ops of a pass into a graph once and
// replaying it, so that a pass of many small kernels costs one launch (CUDA graphs). The
// CUDA backend has it (real device and emulator); graph_capture() is nullptr for others.
//
// A captured graph holds the ops' arguments as they were at capture: device addresses
// (weights, caches, activations, the backend's own scratch), shapes and scalars. It reads
// whatever those buffers hold when it is launched, so a caller uploads its inputs into the
// same buffers before each launch, and must not launch it once any of that memory moved:
// its own buffers (the caller knows), or the backend's scratch (capture_epoch() changes).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/backend.hpp"

namespace tandem::kernels {

class CapturedGraph {
 public:
  virtual ~CapturedGraph() = default;
  // Runs the captured ops on the backend's queue, after the work issued before.
  virtual void launch() = 0;
  virtual size_t nodes() const = 0;  // kernels, copies and memsets in the graph
};

class GraphCapture {
 public:
  virtual ~GraphCapture() = default;
  // Until end_capture, the ops issued on the backend are recorded, not run. During a
  // capture nothing may wait for the queue or move host memory in (download, synchronize,
  // upload: they throw), nor allocate (alloc, alloc_zeroed, wrap_host, scratch growth:
  // they throw): run the same ops once outside a capture first, so the backend's scratch
  // has its size. One capture at a time, ended on the thread that began it.
  virtual void begin_capture() = 0;
  // Throws when a forbidden call spoiled the capture.
  virtual std::unique_ptr<CapturedGraph> end_capture() = 0;
  // Ends a capture that failed (an exception between begin and end), discarding it.
  virtual void abort_capture() noexcept = 0;
  // Changes whenever memory a captured graph may use was given back (the backend's scratch
  // grew): graphs captured under another epoch must not be launched.
  virtual uint64_t capture_epoch() const = 0;
  // The most rows (tokens) an op may take inside a capture: above it the matmul takes a
  // path that is not captured (the GEMM library's).
  virtual int64_t max_capture_rows() const = 0;
};

inline GraphCapture* graph_capture(Backend& be) { return dynamic_cast<GraphCapture*>(&be); }

}  // namespace tandem::kernels
