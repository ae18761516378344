// CudaBackend: the backend seam (kernels/backend.hpp) on a CUDA device, over the thin
// runtime layer (runtime.hpp) and the kernels (ops.hpp). Built twice from the same source:
// cuda_dev (nvcc kernels, CUDA runtime, cuBLAS) and cuda_emu (the same kernels compiled as
// host C++ under the SIMT emulator, host memory, host GEMM), so CI runs every code path
// of this file without a GPU.
//
// Memory: one arena taken from the device at construction; every Buffer (weights copied
// in by wrap_host, KV caches, activations) and the backend's own scratch come from it.
//
// Batch invariance (a contract of the seam): for every op, token t's output row is the same
// bits whatever the other tokens of the call are. Quantized matmuls give the CPU's scalar
// reference bits through either of their kernels (matmul_small below mma_min_tokens tokens,
// the tensor-core matmul_mma from there on); float weights take matmul_small at every size.
// Only the opt-in dequantize + GEMM path (gemm_min_tokens > 0: cuBLAS picks its reduction
// by shape) is not invariant.
#pragma once
#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/device_decode.hpp"
#include "kernels/graph_capture.hpp"
#include "kernels/op_profile.hpp"
#include "kernels/cuda/arena.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/runtime.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {

struct CudaOptions {
  int device = 0;
  size_t arena_bytes = 0;           // 0: arena_fraction of the device's free memory
  double arena_fraction = 0.90;
  // Matmuls of at least this many tokens use dequantize + GEMM (cuBLAS SGEMM on a device):
  // not batch invariant, so off (0) unless asked for (TANDEM_CUDA_GEMM_MIN_TOKENS).
  int64_t gemm_min_tokens = 0;
  // Quantized matmuls of at least this many tokens use the tensor-core kernel (the same bits
  // as the small-M one, so this is a speed choice only; TANDEM_CUDA_MMA_MIN_TOKENS).
  int64_t mma_min_tokens = 17;
  // Every buffer its own device allocation instead of a range of the one arena (a debug
  // mode, TANDEM_CUDA_SEPARATE_BUFFERS=1): compute-sanitizer (or ASan under the emulator)
  // then sees a kernel reading or writing past its buffer, which inside the arena lands in
  // a neighbour. The arena still does the accounting, so limits and errors are unchanged.
  bool separate_buffers = false;
  // Q4_0, Q5_0, Q8_0 and Q6_K matmul weights repacked at load into planes
  // (weight_planes.hpp; the same bits, wider loads). TANDEM_PACK=0 keeps the file's layout.
  bool weight_planes = true;
};

// The device memory every Buffer of a backend lives in (the arena and the runtime that
// reserved it), shared by the backend and its buffers: released when the last of them
// goes, whichever that is. Allocation is thread-safe.
struct DevicePool {
  DevicePool(std::unique_ptr<DeviceRuntime> rt, size_t capacity, bool separate);
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;
  // The memory of `bytes` (a: its arena range, which names it for free).
  uint8_t* allocate(size_t bytes, const char* what, cuda_arena::Arena::Allocation* a);
  void free(size_t offset);

  std::unique_ptr<DeviceRuntime> rt;
  cuda_arena::Arena arena;
  uint8_t* base = nullptr;  // the arena's memory; null with separate buffers
  std::map<size_t, uint8_t*> separate;  // with separate buffers: arena offset -> its memory
  const bool separate_buffers;
  std::mutex mu;
};

class CudaBackend final : public Backend, public DeviceDecode, public GraphCapture {
 public:
  CudaBackend(std::unique_ptr<DeviceRuntime> rt, const CudaOptions& opt);
  ~CudaBackend() override;

  DeviceKind kind() const override { return DeviceKind::CUDA; }
  std::string name() const override;
  std::string description() const override;

  std::unique_ptr<Buffer> alloc(size_t bytes) override;
  std::unique_ptr<Buffer> alloc_zeroed(size_t bytes, const char* what = "a zeroed buffer") override;
  std::unique_ptr<Buffer> wrap_host(const void* data, size_t bytes) override;
  bool packs_weights(DType t) const override;
  RowLayout packed_layout(DType /*t*/) const override { return RowLayout::Packed; }
  size_t packed_row_stride(DType t, int64_t cols) const override;
  std::unique_ptr<Buffer> pack_weight(DType t, const void* src, int64_t rows, int64_t cols) override;
  void upload(const Tensor& dst, const void* src, size_t bytes) override;
  void download(void* dst, const Tensor& src, size_t bytes) override;
  void fill_zero(const Tensor& dst) override;
  void synchronize() override;

  void get_rows(const Tensor& dst, const Tensor& table, const Tensor& ids) override;
  void rms_norm(const Tensor& dst, const Tensor& x, const Tensor& w, float eps, float w_offset) override;
  void matmul(const Tensor& dst, const Tensor& w, const Tensor& x) override;
  void matmul_shared(const Tensor& x, const MatmulTarget* targets, int n) override;
  void add(const Tensor& dst, const Tensor& a, const Tensor& b) override;
  void mul(const Tensor& dst, const Tensor& a, const Tensor& b) override;
  void scale(const Tensor& dst, float s) override;
  void gated_act(const Tensor& dst, const Tensor& gate, const Tensor& up, Activation act) override;
  void rope(const Tensor& x, const Tensor& positions, int n_heads, int head_dim, int rope_dims, float theta,
            RopeStyle style) override;
  void kv_store(const KVLayer& cache, const Tensor& k, const Tensor& v, const PagedAttnMeta& meta) override;
  void kv_move(const KVLayer& cache, const Tensor& from, const Tensor& to) override;
  // Fused: one kernel for the attention inputs (models without per-head norms), the
  // residual add in the matmul's epilogue.
  void attention_inputs(const AttnInputs& a, const KVLayer& cache, const PagedAttnMeta& meta) override;
  void matmul_residual(const Tensor& dst, const Tensor& w, const Tensor& x, const Tensor& tmp) override;
  // The activation and the quantization the down projection reads in one kernel.
  void act_matmul_residual(const Tensor& dst, const Tensor& gate, const Tensor& up, Activation act, const Tensor& w,
                           const Tensor& tmp) override;
  void act_matmul(const Tensor& dst, const Tensor& gate, const Tensor& up, Activation act, const Tensor& w) override;
  // The norm and the quantization of its output for the projections in one kernel (a pending
  // residual added first in the same kernel).
  void norm_matmul_shared(const Tensor& h, const Tensor& x, const Tensor& norm_w, float eps, float w_offset,
                          const MatmulTarget* targets, int n, const PendingResidual* pending = nullptr) override;
  // The norm (with its quantization and a pending residual), then q/k/v in one launch whose
  // epilogue adds the biases, norms each head of q and k (the warp that completes a head),
  // rotates q and k and stores k and v into the cache: two launches.
  void norm_attention_inputs(const Tensor& h, const Tensor& x, const Tensor& norm_w, float eps, float w_offset,
                             const Tensor& wq, const Tensor& wk, const Tensor& wv, const AttnInputs& a,
                             const KVLayer& cache, const PagedAttnMeta& meta,
                             const PendingResidual* pending = nullptr) override;
  // The norm and the add in one kernel.
  void norm_residual(const Tensor& dst, const Tensor& x, const Tensor& w, float eps) override;
  // The attention quantizes its output for the output projection: two launches.
  void attention_residual(const Tensor& dst, const Tensor& wo, const Tensor& tmp, const Tensor& out, const Tensor& q,
                          const KVLayer& cache, const PagedAttnMeta& meta, const AttnShape& shape) override;
  void attention_matmul(const Tensor& dst, const Tensor& wo, const Tensor& out, const Tensor& q, const KVLayer& cache,
                        const PagedAttnMeta& meta, const AttnShape& shape) override;
  void paged_attention(const Tensor& out, const Tensor& q, const KVLayer& cache, const PagedAttnMeta& meta,
                       int n_heads, int n_kv_heads, int head_dim, float scale, int sliding_window,
                       float softcap) override;

  // DeviceDecode (kernels/device_decode.hpp).
  void argmax_rows(const Tensor& ids, const Tensor& logits) override;
  void verify_greedy(const Tensor& argmax, const Tensor& first_row, const Tensor& drafts, const Tensor& n_drafts,
                     const Tensor& n_accepted, const Tensor& out_tokens, const Tensor& parents) override;
  // (cuda_backend_sampling.cpp)
  void make_probs(const Tensor& probs, const Tensor& top, const Tensor& conf, const Tensor& logits,
                  const Tensor& params, const Tensor& penalties, const Tensor& rows = {}) override;
  void sample_probs(const Tensor& ids, const Tensor& probs, const Tensor& top, const Tensor& keys, int32_t tag,
                    bool coupled) override;
  void draw_rows(const Tensor& ids, const Tensor& vals, const Tensor& q, const Tensor& rows, const Tensor& counts,
                 const Tensor& keys, const Tensor& tags, int32_t w) override;
  void verify_sampled(const Tensor& p, const Tensor& q, const Tensor& seqs, const Tensor& drafts,
                      const Tensor& q_rows, const Tensor& n_accepted, const Tensor& out_tokens,
                      const Tensor& parents) override;
  void scatter_cols(const Tensor& dst, const Tensor& src, const Tensor& ids, float fill) override;
  void mask_rows(const Tensor& logits, const Tensor& rows, const Tensor& mask_of, const Tensor& masks) override;
  void logprob_rows(const Tensor& chosen_lp, const Tensor& ids, const Tensor& lps, const Tensor& w, const Tensor& p,
                    const Tensor& rows, const Tensor& chosen, int32_t n_top, const Tensor& scratch) override;
  void top_rows(const Tensor& ids, const Tensor& vals, const Tensor& lse, const Tensor& src, const Tensor& rows,
                const Tensor& keys, int32_t w) override;

  // GraphCapture (kernels/graph_capture.hpp): the runtime's stream capture. Allocation from
  // the arena and the GEMM path throw during a capture, in both builds (CUDA would not see
  // an arena allocation: the arena is one cudaMalloc taken at construction).
  void begin_capture() override;
  std::unique_ptr<CapturedGraph> end_capture() override;
  void abort_capture() noexcept override;
  uint64_t capture_epoch() const override { return scratch_epoch_; }
  // Sizes the scratch slots for such passes now (load time), so they do not move later.
  void reserve_scratch(const ScratchNeeds& need) override;
  int64_t max_capture_rows() const override;

  const cuda_arena::Arena& arena() const { return pool_->arena; }
  uint64_t launches() const { return launches_.load(std::memory_order_relaxed); }
  // Bytes downloaded to the host so far (what a step makes cross the bus).
  uint64_t bytes_to_host() const { return bytes_to_host_.load(std::memory_order_relaxed); }
  // Whether a matmul of this many tokens takes the opt-in dequantize + GEMM path.
  bool gemm_on(int64_t tokens) const;
  // Device-to-device copy bandwidth (GB/s, read + write counted once: bytes / time) over
  // `reps` copies of `bytes`: the reference the decode benchmark's weight bandwidth is
  // compared with.
  double measure_copy_gbps(size_t bytes, int reps);
  const DeviceInfo& device_info() const { return rt_->info(); }
  // A profile of the stream's work by op. From profile_ops(true) on, every launch, upload,
  // download and zeroing marks the stream; op_profile() waits for it and gives each op's
  // count and milliseconds, most first, and starts a new profile. An op's time is the
  // stream's from the mark before it to its own: its run, and any wait for the host before
  // it (a launch-bound pass shows as such). Replayed graphs make no marks, so a profile of
  // passes wants graphs off (TANDEM_CUDA_GRAPHS=0); captures make none either.
  void profile_ops(bool on);
  std::vector<OpTime> op_profile();

 private:
  class Scratch;
  uint8_t* ptr(const Tensor& t, const char* op) const;
  uint8_t* arena_alloc(size_t bytes, const char* what, cuda_arena::Arena::Allocation* a);
  uint8_t* scratch(int slot, size_t bytes);
  void launched(const char* op) {
    launches_.fetch_add(1, std::memory_order_relaxed);
    rt_->check_launch(op);
    if (profiling_) profile_mark(op);
  }
  // A matmul's launch: its profile entry names the weights' type(s) and shape.
  void launched_matmul(const char* op, const ops::MatmulWeight* ws, int n_w, int64_t cols);
  void profile_mark(std::string op, uint64_t weight_bytes = 0);
  void check_errors();
  // Activations quantized for one block size (q null: not yet), kept across the matmuls of a call.
  using QuantizedX = ops::ActQuant;
  void matmul_one(const Tensor& dst, const Tensor& w, const Tensor& x, QuantizedX* cache);
  // The checks of a matmul; the weight's rows and the destination for the kernels (w null
  // when there is nothing to compute).
  ops::MatmulWeight check_matmul(const Tensor& dst, const Tensor& w, const Tensor& x);
  QuantizedX quantize_x(const Tensor& x, int block, QuantizedX* cache);
  // The scratch slot of x's quantized activations for one block size.
  QuantizedX act_scratch(int64_t N, int64_t C, int block);
  // epi (null: none): targets[i]'s epilogue is member i of *epi.
  void matmul_shared_cached(const Tensor& x, const MatmulTarget* targets, int n, QuantizedX& q32, QuantizedX& qk,
                            const ops::QkvEpilogue* epi = nullptr);
  // One launch of the matmul kernels for matrices of type t sharing x.
  void launch_matmul(DType t, const ops::MatmulWeight* ws, int n_w, const Tensor& x, QuantizedX* cache,
                     bool accumulate = false, const ops::QkvEpilogue* epi = nullptr);
  // norm_matmul_shared's norm: with the quantized activations its targets read (q32, qk) where
  // one launch can write them, else rms_norm alone.
  void norm_for_matmuls(const Tensor& h, const Tensor& x, const Tensor& norm_w, float eps, float w_offset,
                        const MatmulTarget* targets, int n, QuantizedX& q32, QuantizedX& qk,
                        const PendingResidual* pending);
  // attention_residual (accumulate) and attention_matmul.
  void attention_projection(const Tensor& dst, const Tensor& wo, const Tensor& tmp, const Tensor& out, const Tensor& q,
                            const KVLayer& cache, const PagedAttnMeta& meta, const AttnShape& s, bool accumulate);
  // act_matmul_residual (accumulate) and act_matmul.
  void act_projection(const Tensor& dst, const Tensor& gate, const Tensor& up, Activation act, const Tensor& w,
                      const Tensor& tmp, bool accumulate);
  // The zeroed counters of the q/k/v epilogue's per-head norms (ops::QkvEpilogue::head_counts):
  // at least n; every launch leaves them zero again.
  int* head_counts(int64_t n);
  // attention_inputs' checks and the fused kernel's arguments.
  ops::AttnInputsArgs attn_inputs_args(const AttnInputs& a, const KVLayer& cache, const PagedAttnMeta& meta);
  // paged_attention, its output also quantized into *quant when given.
  void attention(const Tensor& out, const Tensor& q, const KVLayer& cache, const PagedAttnMeta& meta,
                 const AttnShape& shape, const QuantizedX* quant);

  std::shared_ptr<DevicePool> pool_;
  DeviceRuntime* rt_;  // pool_->rt
  std::unique_ptr<Gemm> gemm_;
  CudaOptions opt_;
  int* err_ = nullptr;  // the device error word (dev::ErrorBits)
  size_t err_offset_ = 0;
  struct ScratchSlot {
    size_t offset = 0, size = 0;
    uint8_t* p = nullptr;
  };
  ScratchSlot scratch_[5];
  std::atomic<uint64_t> bytes_to_host_{0};
  std::atomic<uint64_t> launches_{0};  // kernels launched (or recorded into a graph) through launched()
  uint64_t scratch_epoch_ = 0;  // bumped when a scratch slot moves (graphs captured before hold its old address)
  bool profiling_ = false, profile_started_ = false;
  struct ProfileMark {
    std::string op;
    uint64_t weight_bytes;
  };
  std::vector<ProfileMark> profile_ops_;  // the op of each mark after the first
};

// A CUDA backend of this build (throws std::runtime_error when there is no device).
std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& opt);

}  // namespace tandem::kernels::TANDEM_CUDA_NS
