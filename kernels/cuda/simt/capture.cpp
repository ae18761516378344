// The emulator's stream capture (capture.hpp): one open recording per capturing stream,
// behind a mutex; a count of open captures that launches read first, so that the common
// case (nothing captures) takes no lock.
#include "kernels/cuda/simt/capture.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <utility>

namespace tandem::simt {
namespace {

struct Recording {
  cudaStream_t stream;
  std::vector<GraphNode> nodes;
  std::string invalidated;  // why, when a forbidden call was made during the capture
};

std::mutex g_mu;
std::vector<Recording> g_open;  // guarded by g_mu
std::atomic<int> g_n_open{0};

Recording* find(cudaStream_t s) {
  for (Recording& r : g_open)
    if (r.stream == s) return &r;
  return nullptr;
}

// Appends a node to the capture of `s`, if there is one.
bool append(cudaStream_t s, GraphNode&& n) {
  if (g_n_open.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lk(g_mu);
  Recording* r = find(s);
  if (!r) return false;
  r->nodes.push_back(std::move(n));
  return true;
}

// Removes the capture of `s` and returns it (false when there is none).
bool take(cudaStream_t s, Recording* out) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = std::find_if(g_open.begin(), g_open.end(), [&](const Recording& r) { return r.stream == s; });
  if (it == g_open.end()) return false;
  *out = std::move(*it);
  g_open.erase(it);
  g_n_open.fetch_sub(1, std::memory_order_release);
  return true;
}

}  // namespace

namespace detail {

bool capture_active() { return g_n_open.load(std::memory_order_acquire) != 0; }

bool record_kernel(cudaStream_t s, const void* kernel, const LaunchConfig& cfg, std::shared_ptr<const void> args,
                   const std::type_info& args_type, std::function<void()> run) {
  if (!is_capturing(s)) return false;
  try {
    check_config(cfg);  // a shape CUDA refuses fails at the launch call (and ends the capture), not at the replay
  } catch (const std::exception& e) {
    invalidate_capture(s, e.what());
    throw;
  }
  GraphNode n;
  n.kind = GraphNode::Kind::Kernel;
  n.kernel = kernel;
  n.cfg = cfg;
  n.args = std::move(args);
  n.args_type = &args_type;
  n.run = std::move(run);
  return append(s, std::move(n));
}

}  // namespace detail

void Graph::replay() const {
  for (const GraphNode& n : nodes_) n.run();
}

void begin_capture(cudaStream_t s) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (find(s)) throw std::logic_error("simt: begin_capture on a stream that is already capturing");
  g_open.push_back({s, {}, {}});
  g_n_open.fetch_add(1, std::memory_order_release);
}

Graph end_capture(cudaStream_t s) {
  Recording r;
  if (!take(s, &r)) throw std::logic_error("simt: end_capture on a stream that is not capturing");
  if (!r.invalidated.empty())
    throw std::logic_error("simt: the capture was invalidated (as cudaErrorStreamCaptureInvalidated): " +
                           r.invalidated);
  Graph g;
  g.nodes_ = std::move(r.nodes);
  return g;
}

void abort_capture(cudaStream_t s) noexcept {
  Recording r;
  try {
    take(s, &r);
  } catch (...) {
  }
}

bool is_capturing(cudaStream_t s) {
  if (g_n_open.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lk(g_mu);
  return find(s) != nullptr;
}

void invalidate_capture(cudaStream_t s, const std::string& why) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (Recording* r = find(s); r && r->invalidated.empty()) r->invalidated = why;
}

bool record_copy(cudaStream_t s, void* dst, const void* src, size_t n) {
  GraphNode node;
  node.kind = GraphNode::Kind::Copy;
  node.dst = dst;
  node.src = src;
  node.bytes = n;
  // Read at replay, as a memcpy node reads its source when the graph runs.
  node.run = [dst, src, n] {
    if (n) std::memmove(dst, src, n);
  };
  return append(s, std::move(node));
}

bool record_memset(cudaStream_t s, void* dst, int value, size_t n) {
  GraphNode node;
  node.kind = GraphNode::Kind::Memset;
  node.dst = dst;
  node.bytes = n;
  node.value = value;
  node.run = [dst, value, n] {
    if (n) std::memset(dst, value, n);
  };
  return append(s, std::move(node));
}

}  // namespace tandem::simt
