// CudaBackend: memory, the elementwise ops, attention, device decoding and graphs, each call
// validated on the host, then its launches on the runtime's stream (matmuls: cuda_backend_matmul.cpp;
// fused steps: cuda_backend_fused.cpp; sampling: cuda_backend_sampling.cpp). See cuda_backend.hpp.
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/weight_planes.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend_detail.hpp"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {

using namespace backend_detail;

namespace {

constexpr size_t kEmulatedDefaultArena = size_t{256} << 20;
constexpr size_t kAttnScratchFloats = size_t{8} << 20;  // 32 MiB of span states per attention launch

class DeviceBuffer final : public Buffer {
 public:
  DeviceBuffer(std::shared_ptr<DevicePool> pool, uint8_t* p, size_t size, size_t offset)
      : pool_(std::move(pool)), p_(p), size_(size), offset_(offset) {}
  ~DeviceBuffer() override { pool_->free(offset_); }
  size_t size() const override { return size_; }
  DeviceKind device() const override { return DeviceKind::CUDA; }
  uint8_t* data() const { return p_; }
  const DevicePool* pool() const { return pool_.get(); }

 private:
  std::shared_ptr<DevicePool> pool_;
  uint8_t* p_;
  size_t size_, offset_;
};

size_t arena_capacity(DeviceRuntime& rt, const CudaOptions& opt) {
  if (opt.arena_bytes) return opt.arena_bytes;
  if (rt.info().emulated) return kEmulatedDefaultArena;
  const double f = std::clamp(opt.arena_fraction, 0.01, 0.99);
  return static_cast<size_t>(static_cast<double>(rt.info().free_bytes) * f);
}

}  // namespace

DevicePool::DevicePool(std::unique_ptr<DeviceRuntime> r, size_t capacity, bool sep)
    : rt(std::move(r)), arena(capacity), separate_buffers(sep) {
  if (!separate_buffers) base = static_cast<uint8_t*>(rt->reserve(arena.capacity()));
}

DevicePool::~DevicePool() {
  try {
    rt->synchronize();
  } catch (...) {
  }
  for (auto& [offset, p] : separate) rt->free_exact(p);
  if (base) rt->release(base);
}

uint8_t* DevicePool::allocate(size_t bytes, const char* what, cuda_arena::Arena::Allocation* a) {
  std::lock_guard<std::mutex> lk(mu);
  *a = arena.allocate(bytes, what);
  if (!separate_buffers) return base + a->offset;
  uint8_t* p = nullptr;
  try {
    p = static_cast<uint8_t*>(rt->allocate_exact(bytes));
  } catch (...) {
    arena.free(a->offset);
    throw;
  }
  a->fresh = false;  // memory of its own, of unknown content
  separate[a->offset] = p;
  return p;
}

void DevicePool::free(size_t offset) {
  std::lock_guard<std::mutex> lk(mu);
  arena.free(offset);
  if (!separate_buffers) return;
  const auto it = separate.find(offset);
  if (it == separate.end()) return;
  rt->free_exact(it->second);
  separate.erase(it);
}

namespace {
// A token-count setting from the environment (a whole number >= lo), or `fallback`.
int64_t env_tokens(const char* name, int64_t fallback, int64_t lo) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  if (*end != '\0' || n < lo)
    throw std::invalid_argument(std::string(name) + "=" + v + ": expected a whole number of tokens >= " +
                                std::to_string(lo));
  return n;
}
CudaOptions with_env(CudaOptions o) {
  o.gemm_min_tokens = env_tokens("TANDEM_CUDA_GEMM_MIN_TOKENS", o.gemm_min_tokens, 0);
  o.mma_min_tokens = env_tokens("TANDEM_CUDA_MMA_MIN_TOKENS", o.mma_min_tokens, 1);
  const char* sep = std::getenv("TANDEM_CUDA_SEPARATE_BUFFERS");
  if (sep && *sep) o.separate_buffers = std::strcmp(sep, "0") != 0;
  const char* pack = std::getenv("TANDEM_PACK");
  if (pack && std::strcmp(pack, "0") == 0) o.weight_planes = false;
  return o;
}
}  // namespace

CudaBackend::CudaBackend(std::unique_ptr<DeviceRuntime> rt, const CudaOptions& opt) : opt_(with_env(opt)) {
  const size_t capacity = arena_capacity(*rt, opt);
  pool_ = std::make_shared<DevicePool>(std::move(rt), capacity, opt_.separate_buffers);
  rt_ = pool_->rt.get();
  gemm_ = make_gemm(*rt_);
  cuda_arena::Arena::Allocation a;
  err_ = reinterpret_cast<int*>(arena_alloc(sizeof(int), "the error word", &a));
  err_offset_ = a.offset;
  rt_->zero(err_, sizeof(int));
}

// Buffers may outlive the backend: they keep the pool (memory and runtime) alive.
CudaBackend::~CudaBackend() {
  rt_->abort_capture();  // one left open by an exception: its recording goes
  try {
    rt_->synchronize();
  } catch (...) {
  }
  gemm_.reset();
  for (ScratchSlot& s : scratch_)
    if (s.p) pool_->free(s.offset);
  pool_->free(err_offset_);
}

std::string CudaBackend::name() const {
  const DeviceInfo& d = rt_->info();
  const cuda_arena::Arena& ar = pool_->arena;
  if (d.emulated) return "cuda-emulated (SIMT emulator, " + cuda_arena::Arena::human(ar.capacity()) + " arena)";
  return "cuda (" + d.name + ", sm_" + std::to_string(d.cc_major) + std::to_string(d.cc_minor) + ", " +
         cuda_arena::Arena::human(ar.capacity()) + " arena)";
}

std::string CudaBackend::description() const {
  const DeviceInfo& d = rt_->info();
  std::string s = std::string("backend: ") + kKind + "\n  device: " + d.name;
  if (!d.emulated)
    s += "\n  compute capability: " + std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor) + ", " +
         std::to_string(d.sm_count) + " SMs\n  memory: " + cuda_arena::Arena::human(d.total_bytes) + " total, " +
         cuda_arena::Arena::human(d.free_bytes) + " free at start";
  const cuda_arena::Arena& ar = pool_->arena;
  s += "\n  arena: " + cuda_arena::Arena::human(ar.capacity()) + " (" + cuda_arena::Arena::human(ar.used()) +
       " used, peak " + cuda_arena::Arena::human(ar.peak()) + ")";
  if (opt_.separate_buffers) s += ", every buffer its own allocation (TANDEM_CUDA_SEPARATE_BUFFERS: a debug mode)";
  s += "\n  kernels: get_rows, rms_norm, add/mul, scale, gated_act, rope, kv_store (f16/f32), "
       "matmul (quantized weights Q4_0..Q8_0, Q2_K..Q6_K: int8 activations, the CPU reference's bits; "
       "below " + std::to_string(opt_.mma_min_tokens) + " tokens __dp4a, from there on int8 tensor cores "
       "(mma.sync); float weights F32/F16/BF16: split-TF32 tensor cores at every size)";
  s += opt_.weight_planes ? "\n  weights: Q4_0, Q5_0, Q8_0 and Q6_K matrices repacked at load into aligned planes "
                            "(TANDEM_PACK=0 keeps them as stored)"
                          : "\n  weights: as stored (TANDEM_PACK=0)";
  if (opt_.gemm_min_tokens > 0)
    s += ", matmul GEMM (>= " + std::to_string(opt_.gemm_min_tokens) + " tokens: dequantized f32 tiles, " +
         (d.emulated ? std::string("host GEMM") : std::string("cuBLAS SGEMM, no TF32")) + ", not batch invariant)";
  s += ", paged attention (flash-decoding, fixed split of " + std::to_string(ops::kAttnSplit) +
       " positions, query tiles on split-TF32 tensor cores)";
  s += "\n  decoding on the device: argmax, final distributions (penalties, temperature, top-k/top-p by radix "
       "select, min-p), draws with counter-based noise, rejection and coupled verification of the batch; "
       "decode and verification passes replayed from CUDA graphs (TANDEM_CUDA_GRAPHS=0: off)";
  if (d.programmatic_launches) s += "; kernels as programmatic dependent launches (TANDEM_CUDA_PDL=1)";
  s += opt_.gemm_min_tokens > 0
           ? "\n  batch invariant: every op; matmul below " + std::to_string(opt_.gemm_min_tokens) + " tokens"
           : std::string("\n  batch invariant: every op at every batch size");
  return s;
}

// ---- memory -----------------------------------------------------------------------------------

uint8_t* CudaBackend::arena_alloc(size_t bytes, const char* what, cuda_arena::Arena::Allocation* a) {
  // A graph would hold the address of memory allocated during its capture, and nothing of the
  // allocation is replayed: everything a captured pass uses must exist before it.
  require(!rt_->capturing(), "alloc", std::string("allocating ") + what + " while a graph is being captured");
  return pool_->allocate(bytes, what, a);
}

std::unique_ptr<Buffer> CudaBackend::alloc(size_t bytes) {
  cuda_arena::Arena::Allocation a;
  uint8_t* p = arena_alloc(bytes, "a buffer", &a);
  return std::make_unique<DeviceBuffer>(pool_, p, bytes, a.offset);
}

// The arena is device memory taken up front, so zeroed memory costs its full size (the KV
// pool is sized to the budget for that reason); memory never handed out before is already
// zero when the runtime says fresh memory is (the emulator's fresh pages), else it is cleared.
std::unique_ptr<Buffer> CudaBackend::alloc_zeroed(size_t bytes, const char* what) {
  cuda_arena::Arena::Allocation a;
  uint8_t* p = arena_alloc(bytes, what, &a);
  if (!(a.fresh && rt_->fresh_is_zero())) rt_->zero(p, bytes);
  return std::make_unique<DeviceBuffer>(pool_, p, bytes, a.offset);
}

std::unique_ptr<Buffer> CudaBackend::wrap_host(const void* data, size_t bytes) {
  cuda_arena::Arena::Allocation a;
  uint8_t* p = arena_alloc(bytes, "weights", &a);
  auto buf = std::make_unique<DeviceBuffer>(pool_, p, bytes, a.offset);
  rt_->copy_to_device(p, data, bytes);
  return buf;
}

bool CudaBackend::packs_weights(DType t) const { return opt_.weight_planes && planes_type(t); }

size_t CudaBackend::packed_row_stride(DType t, int64_t cols) const {
  return packs_weights(t) ? planes_row_stride(t, cols) : row_bytes(t, cols);
}

std::unique_ptr<Buffer> CudaBackend::pack_weight(DType t, const void* src, int64_t rows, int64_t cols) {
  if (!packs_weights(t) || rows <= 0 || cols <= 0 || cols % dtype_info(t).block_size != 0) return nullptr;
  const size_t stride = planes_row_stride(t, cols), bytes = stride * static_cast<size_t>(rows);
  std::vector<uint8_t> host(bytes);
  to_planes(t, src, rows, cols, host.data());
  cuda_arena::Arena::Allocation a;
  uint8_t* p = arena_alloc(bytes, "weights", &a);
  auto buf = std::make_unique<DeviceBuffer>(pool_, p, bytes, a.offset);
  rt_->copy_to_device(p, host.data(), bytes);  // (never reads host after it returns)
  return buf;
}

uint8_t* CudaBackend::ptr(const Tensor& t, const char* op) const {
  auto* db = dynamic_cast<DeviceBuffer*>(t.buf);
  require(db && db->pool() == pool_.get(), op, "tensor is not in a buffer of this backend");
  require(t.offset + t.bytes() <= db->size(), op,
          "tensor view exceeds its buffer (" + std::to_string(t.offset) + " + " + std::to_string(t.bytes()) + " > " +
              std::to_string(db->size()) + ")");
  return db->data() + t.offset;
}

void CudaBackend::upload(const Tensor& dst, const void* src, size_t bytes) {
  auto* db = dynamic_cast<DeviceBuffer*>(dst.buf);
  require(db && db->pool() == pool_.get(), "upload", "into a foreign buffer");
  require(dst.offset + bytes <= db->size(), "upload", "past the end of the buffer");
  rt_->copy_to_device(db->data() + dst.offset, src, bytes);
  if (profiling_) profile_mark("upload");
}

void CudaBackend::download(void* dst, const Tensor& src, size_t bytes) {
  auto* db = dynamic_cast<DeviceBuffer*>(src.buf);
  require(db && db->pool() == pool_.get(), "download", "from a foreign buffer");
  require(src.offset + bytes <= db->size(), "download", "past the end of the buffer");
  rt_->copy_to_host(dst, db->data() + src.offset, bytes);
  if (profiling_) profile_mark("download");
  bytes_to_host_.fetch_add(bytes, std::memory_order_relaxed);
  check_errors();
}

void CudaBackend::fill_zero(const Tensor& dst) {
  rt_->zero(ptr(dst, "fill_zero"), dst.bytes());
  if (profiling_) profile_mark("fill_zero");
}

void CudaBackend::profile_ops(bool on) {
  if (profiling_) rt_->take_marks();  // a profile left unread
  profile_ops_.clear();
  profiling_ = on;
  profile_started_ = false;
  if (on && !rt_->capturing()) rt_->mark(), profile_started_ = true;  // where the first op's time starts
}

void CudaBackend::profile_mark(std::string op, uint64_t weight_bytes) {
  if (rt_->capturing()) return;  // recorded into a graph, not run now
  rt_->mark();
  if (profile_started_) profile_ops_.push_back({std::move(op), weight_bytes});
  profile_started_ = true;  // (begun while capturing: the first op after it only starts the clock)
}

std::vector<OpTime> CudaBackend::op_profile() {
  if (!profiling_) return {};
  const std::vector<double> ms = rt_->take_marks();
  // One mark more than ops: the start.
  std::map<std::string, OpTime> by_op;
  for (size_t i = 0; i < profile_ops_.size() && i < ms.size(); ++i) {
    OpTime& t = by_op[profile_ops_[i].op];
    t.op = profile_ops_[i].op, ++t.count, t.ms += ms[i], t.weight_bytes += profile_ops_[i].weight_bytes;
  }
  std::vector<OpTime> out;
  for (auto& [name, t] : by_op) out.push_back(std::move(t));
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  profile_ops(true);
  return out;
}

void CudaBackend::synchronize() {
  rt_->synchronize();
  check_errors();
}

// Bad indices found by kernels since the last check: reported once, as the CPU backend
// would have at the call (std::out_of_range).
void CudaBackend::check_errors() {
  int e = 0;
  rt_->copy_to_host(&e, err_, sizeof e);
  if (e == 0) return;
  rt_->zero(err_, sizeof(int));
  std::string what;
  auto add = [&](int bit, const char* msg) {
    if (e & bit) what += std::string(what.empty() ? "" : "; ") + msg;
  };
  add(1, "get_rows: token id out of range");
  add(2, "kv_store: slot out of range");
  add(4, "paged_attention: sequence index out of range");
  add(8, "paged_attention: position beyond the block table");
  add(16, "paged_attention: cache block out of range");
  add(32, "verification: draft count or rows out of range, or a draft the draft could not have drawn");
  add(64, "mask_rows: row or mask index out of range");
  throw std::out_of_range(std::string(kKind) + " backend: " + what + " (found by a kernel; the op did not write those rows)");
}

namespace {
// Attention span states: tokens in chunks of what kAttnScratchFloats holds.
int64_t attention_chunk(size_t per_token) {
  return std::max<int64_t>(1, static_cast<int64_t>(kAttnScratchFloats / per_token));
}
}  // namespace

void CudaBackend::reserve_scratch(const ScratchNeeds& n) {
  if (n.tokens <= 0) return;
  const int64_t small = gemm_on(n.tokens) ? std::min<int64_t>(n.tokens, opt_.gemm_min_tokens - 1) : n.tokens;
  if (small > 0 && n.max_cols > 0) {
    scratch(kScratchActQ, act_quant_bytes(small, n.max_cols, 32));
    scratch(kScratchActQ + 3, act_quant_bytes(small, n.max_cols, 256));
  }
  if (gemm_on(n.tokens) && n.max_cols > 0 && n.max_weight_elems > 0) {
    // The most any R x C weight with C <= max_cols and R x C <= max_weight_elems tiles.
    const int64_t floats = std::min<int64_t>(n.max_weight_elems, std::max<int64_t>(kGemmTileFloats, n.max_cols));
    scratch(kScratchTile, sizeof(float) * static_cast<size_t>(floats));
  }
  if (n.n_heads > 0 && n.n_kv_heads > 0)  // per-head norms' counters (norm_attention_inputs)
    head_counts(head_counters(n.n_heads + n.n_kv_heads, n.tokens));
  if (n.n_heads > 0 && n.n_kv_heads > 0 && n.head_dim > 0 && n.positions > 0) {
    ops::AttnParams a;
    a.n_tokens = 1;
    a.n_heads = n.n_heads;
    a.n_kv_heads = n.n_kv_heads;
    a.head_dim = n.head_dim;
    a.block_size = 1;
    a.bt_cols = n.positions;
    const size_t per_token = ops::attention_scratch_floats(a);
    scratch(kScratchAttn, sizeof(float) * per_token * static_cast<size_t>(std::min(attention_chunk(per_token), n.tokens)));
  }
}

uint8_t* CudaBackend::scratch(int slot, size_t bytes) {
  ScratchSlot& s = scratch_[slot];
  if (s.size < bytes) {
    const size_t want = std::max(bytes, s.size * 2);
    if (s.p) ++scratch_epoch_;
    if (s.p) pool_->free(s.offset);
    s.p = nullptr;
    s.size = 0;
    cuda_arena::Arena::Allocation a;
    s.p = arena_alloc(want, "backend scratch", &a);
    s.offset = a.offset;
    s.size = want;
  }
  return s.p;
}

// ---- ops --------------------------------------------------------------------------------------

void CudaBackend::get_rows(const Tensor& dst, const Tensor& table, const Tensor& ids) {
  require(dst.type == DType::F32 && ids.type == DType::I32, "get_rows", "dst F32, ids I32");
  require(dst.cols() == table.cols() && dst.rows() == ids.numel(), "get_rows", "shape mismatch");
  require(ops::weight_type_supported(table.type), "get_rows", std::string("unsupported type ") + dtype_name(table.type));
  require(table.layout == RowLayout::File, "get_rows", "a packed weight serves only matmul");
  uint8_t* d = ptr(dst, "get_rows");
  ops::get_rows(rt_->stream(), table.type, ptr(table, "get_rows"), table.row_stride(), table.rows(), table.cols(),
                reinterpret_cast<const int32_t*>(ptr(ids, "get_rows")), dst.rows(), rows_of(d, dst), err_);
  launched("get_rows");
}

void CudaBackend::rms_norm(const Tensor& dst, const Tensor& x, const Tensor& w, float eps, float w_offset) {
  require(x.type == DType::F32 && w.type == DType::F32 && dst.type == DType::F32, "rms_norm", "F32 only");
  require(w.numel() == x.cols() && dst.cols() == x.cols() && dst.rows() == x.rows(), "rms_norm", "shape mismatch");
  ops::rms_norm(rt_->stream(), rows_of(ptr(dst, "rms_norm"), dst), reinterpret_cast<const float*>(ptr(x, "rms_norm")),
                ld_of(x), reinterpret_cast<const float*>(ptr(w, "rms_norm")), x.rows(), x.cols(), eps, w_offset);
  launched("rms_norm");
}

void CudaBackend::add(const Tensor& dst, const Tensor& a, const Tensor& b) {
  check_binary("add", dst, a, b);
  const bool bcast = b.rows() == 1 && a.rows() != 1;
  ops::binary(rt_->stream(), ops::Binary::Add, rows_of(ptr(dst, "add"), dst), reinterpret_cast<const float*>(ptr(a, "add")),
              ld_of(a), reinterpret_cast<const float*>(ptr(b, "add")), bcast ? 0 : ld_of(b), a.rows(), a.cols());
  launched("add");
}

void CudaBackend::mul(const Tensor& dst, const Tensor& a, const Tensor& b) {
  check_binary("mul", dst, a, b);
  const bool bcast = b.rows() == 1 && a.rows() != 1;
  ops::binary(rt_->stream(), ops::Binary::Mul, rows_of(ptr(dst, "mul"), dst), reinterpret_cast<const float*>(ptr(a, "mul")),
              ld_of(a), reinterpret_cast<const float*>(ptr(b, "mul")), bcast ? 0 : ld_of(b), a.rows(), a.cols());
  launched("mul");
}

void CudaBackend::scale(const Tensor& dst, float s) {
  require(dst.type == DType::F32, "scale", "F32 only");
  ops::scale(rt_->stream(), rows_of(ptr(dst, "scale"), dst), dst.rows(), dst.cols(), s);
  launched("scale");
}

void CudaBackend::gated_act(const Tensor& dst, const Tensor& gate, const Tensor& up, Activation act) {
  check_binary("gated_act", dst, gate, up);
  require(up.rows() == gate.rows(), "gated_act", "gate/up rows differ");
  ops::gated_act(rt_->stream(), act, rows_of(ptr(dst, "gated_act"), dst),
                 reinterpret_cast<const float*>(ptr(gate, "gated_act")), ld_of(gate),
                 reinterpret_cast<const float*>(ptr(up, "gated_act")), ld_of(up), gate.rows(), gate.cols());
  launched("gated_act");
}

void CudaBackend::rope(const Tensor& x, const Tensor& positions, int n_heads, int head_dim, int rope_dims, float theta,
                       RopeStyle style) {
  require(x.type == DType::F32 && positions.type == DType::I32, "rope", "x F32, positions I32");
  require(x.cols() >= static_cast<int64_t>(n_heads) * head_dim, "rope", "row shorter than n_heads*head_dim");
  require(positions.numel() == x.rows(), "rope", "one position per row");
  require(rope_dims > 0 && rope_dims <= head_dim && rope_dims % 2 == 0, "rope", "bad rope_dims");
  ops::rope(rt_->stream(), rows_of(ptr(x, "rope"), x), reinterpret_cast<const int32_t*>(ptr(positions, "rope")), x.rows(),
            n_heads, head_dim, rope_dims, theta, style);
  launched("rope");
}

void CudaBackend::kv_store(const KVLayer& cache, const Tensor& k, const Tensor& v, const PagedAttnMeta& meta) {
  require(k.type == DType::F32 && v.type == DType::F32, "kv_store", "k, v must be F32");
  require(cache.k.type == cache.v.type && (cache.k.type == DType::F16 || cache.k.type == DType::F32), "kv_store",
          "cache must be F16 or F32");
  require(k.cols() == cache.k.cols() && v.cols() == cache.v.cols(), "kv_store", "row width mismatch");
  require(cache.k.row_stride() == cache.v.row_stride() && cache.k.rows() == cache.v.rows(), "kv_store",
          "k and v caches must have the same layout");
  require(meta.slot_mapping.numel() == k.rows() && k.rows() == v.rows(), "kv_store", "one slot per token");
  ops::kv_store(rt_->stream(), ptr(cache.k, "kv_store"), ptr(cache.v, "kv_store"), cache.k.row_stride(),
                cache.k.type == DType::F16, cache.k.rows(), reinterpret_cast<const float*>(ptr(k, "kv_store")), ld_of(k),
                reinterpret_cast<const float*>(ptr(v, "kv_store")), ld_of(v), k.rows(), k.cols(),
                reinterpret_cast<const int32_t*>(ptr(meta.slot_mapping, "kv_store")), err_);
  launched("kv_store");
}

void CudaBackend::kv_move(const KVLayer& cache, const Tensor& from, const Tensor& to) {
  require(from.type == DType::I32 && to.type == DType::I32 && from.numel() == to.numel(), "kv_move",
          "from and to must be I32 lists of one length");
  require(cache.k.row_stride() == cache.v.row_stride() && cache.k.rows() == cache.v.rows(), "kv_move",
          "k and v caches must have the same layout");
  ops::kv_move(rt_->stream(), ptr(cache.k, "kv_move"), ptr(cache.v, "kv_move"), cache.k.row_stride(), cache.k.rows(),
               reinterpret_cast<const int32_t*>(ptr(from, "kv_move")), reinterpret_cast<const int32_t*>(ptr(to, "kv_move")),
               from.numel(), err_);
  launched("kv_move");
}

void CudaBackend::paged_attention(const Tensor& out, const Tensor& q, const KVLayer& cache, const PagedAttnMeta& meta,
                                  int n_heads, int n_kv_heads, int head_dim, float scale, int sliding_window,
                                  float softcap) {
  AttnShape s;
  s.n_heads = n_heads, s.n_kv_heads = n_kv_heads, s.head_dim = head_dim;
  s.scale = scale, s.sliding_window = sliding_window, s.softcap = softcap;
  attention(out, q, cache, meta, s, nullptr);
}

void CudaBackend::attention(const Tensor& out, const Tensor& q, const KVLayer& cache, const PagedAttnMeta& meta,
                            const AttnShape& shape, const QuantizedX* quant) {
  const char* op = "paged_attention";
  const int n_heads = shape.n_heads, n_kv_heads = shape.n_kv_heads, head_dim = shape.head_dim;
  require(n_kv_heads > 0 && n_heads % n_kv_heads == 0, op, "n_heads must be a multiple of n_kv_heads");
  require(head_dim > 0 && head_dim <= 512, op, "head_dim must be in 1..512");
  require(q.type == DType::F32 && out.type == DType::F32, op, "q, out F32");
  require(q.cols() >= static_cast<int64_t>(n_heads) * head_dim && out.cols() >= static_cast<int64_t>(n_heads) * head_dim,
          op, "q/out rows too short");
  require(cache.k.type == cache.v.type && (cache.k.type == DType::F16 || cache.k.type == DType::F32), op,
          "cache must be F16 or F32");
  require(cache.k.cols() == static_cast<int64_t>(n_kv_heads) * head_dim, op, "cache width mismatch");
  require(cache.k.row_stride() == cache.v.row_stride() && cache.k.rows() == cache.v.rows(), op,
          "k and v caches must have the same layout");
  require(meta.positions.numel() == q.rows() && meta.seq_index.numel() == q.rows(), op,
          "positions/seq_index must have one entry per token");
  require(meta.block_size > 0, op, "block_size must be positive");
  if (meta.tree.buf)
    require(meta.tree.type == DType::I32 && meta.tree.numel() == q.rows() * kTreeFields, op,
            "tree must hold kTreeFields I32 per token");
  ops::AttnParams a;
  static_cast<PagedAttnArgs&>(a) = make_paged_attn_args(out, q, cache, meta, n_heads, n_kv_heads, head_dim, shape.scale,
                                                         shape.sliding_window, shape.softcap,
                                                         [&](const Tensor& t) { return ptr(t, op); });
  require(ops::attention_shared_bytes(a) <= 48 * 1024, op,
          "GQA group x (head_dim + " + std::to_string(ops::kAttnSplit) +
              ") floats and 8 staged K/V rows exceed 48 KiB of shared memory");
  // Tokens in chunks whose span states fit the scratch (each token is independent).
  a.n_tokens = 1;
  const size_t per_token = ops::attention_scratch_floats(a);
  const int64_t chunk = attention_chunk(per_token);
  const int64_t n_tokens = q.rows();
  float* states =
      reinterpret_cast<float*>(scratch(kScratchAttn, sizeof(float) * per_token * static_cast<size_t>(std::min(chunk, n_tokens))));
  for (int64_t t0 = 0; t0 < n_tokens; t0 += chunk) {
    ops::AttnParams c = a;
    c.n_tokens = std::min(chunk, n_tokens - t0);
    c.q += t0 * a.ldq;
    c.out += t0 * a.ldo;
    c.pos += t0;
    c.seq += t0;
    if (c.tree) c.tree += t0 * kTreeFields;
    if (quant) {
      const int64_t cols = static_cast<int64_t>(n_heads) * head_dim;
      c.quant = *quant;
      c.quant.q += t0 * cols;
      c.quant.d += t0 * (cols / quant->block);
      c.quant.s += t0 * (cols / 16);
    }
    for (int k = ops::paged_attention(rt_->stream(), c, states, err_); k > 0; --k) launched(op);
  }
}

void CudaBackend::argmax_rows(const Tensor& ids, const Tensor& logits) {
  require(logits.type == DType::F32 && ids.type == DType::I32, "argmax_rows", "logits F32, ids I32");
  require(ids.numel() == logits.rows(), "argmax_rows", "one id per row");
  require(logits.cols() > 0, "argmax_rows", "empty rows");
  ops::argmax_rows(rt_->stream(), reinterpret_cast<const float*>(ptr(logits, "argmax_rows")), ld_of(logits),
                   logits.rows(), logits.cols(), reinterpret_cast<int32_t*>(ptr(ids, "argmax_rows")));
  launched("argmax_rows");
}

void CudaBackend::verify_greedy(const Tensor& argmax, const Tensor& first_row, const Tensor& drafts,
                                const Tensor& n_drafts, const Tensor& n_accepted, const Tensor& out_tokens,
                                const Tensor& parents) {
  const char* op = "verify_greedy";
  for (const Tensor* t : {&argmax, &first_row, &drafts, &n_drafts, &n_accepted, &out_tokens})
    require(t->type == DType::I32, op, "I32 tensors only");
  const int64_t n = first_row.numel();
  require(drafts.rows() == n && n_drafts.numel() == n && n_accepted.numel() == n && out_tokens.rows() == n, op,
          "one row per sequence");
  require(out_tokens.cols() == drafts.cols() + 1, op, "out_tokens must be max_drafts + 1 wide");
  require(drafts.nb1 == 0 && out_tokens.nb1 == 0, op, "packed drafts and out_tokens");
  if (parents.buf)
    require(parents.type == DType::I32 && parents.cols() == drafts.cols() && parents.rows() == n && parents.nb1 == 0,
            op, "parents must be I32 and packed like drafts");
  auto i32 = [&](const Tensor& t) { return reinterpret_cast<int32_t*>(ptr(t, op)); };
  ops::verify_greedy(rt_->stream(), i32(argmax), argmax.numel(), i32(first_row), i32(drafts), i32(n_drafts),
                     static_cast<int>(drafts.cols()), static_cast<int>(n), i32(n_accepted), i32(out_tokens), err_,
                     parents.buf ? i32(parents) : nullptr);
  launched(op);
}

int64_t CudaBackend::max_capture_rows() const {
  return opt_.gemm_min_tokens > 0 ? opt_.gemm_min_tokens - 1 : std::numeric_limits<int32_t>::max();
}

// ---- graphs -----------------------------------------------------------------------------------

namespace {
// A graph keeps the device pool (and so the runtime and its stream) alive.
class CudaCapturedGraph final : public CapturedGraph {
 public:
  CudaCapturedGraph(std::shared_ptr<DevicePool> pool, std::unique_ptr<DeviceGraph> g)
      : pool_(std::move(pool)), g_(std::move(g)) {}
  void launch() override {
    require(!pool_->rt->capturing(), "graph launch", "launching a graph while another is being captured");
    g_->launch();
  }
  size_t nodes() const override { return g_->nodes(); }

 private:
  std::shared_ptr<DevicePool> pool_;
  std::unique_ptr<DeviceGraph> g_;
};
}  // namespace

void CudaBackend::begin_capture() { rt_->begin_capture(); }

std::unique_ptr<CapturedGraph> CudaBackend::end_capture() {
  return std::make_unique<CudaCapturedGraph>(pool_, rt_->end_capture());
}

void CudaBackend::abort_capture() noexcept { rt_->abort_capture(); }

double CudaBackend::measure_copy_gbps(size_t bytes, int reps) {
  auto a = alloc(bytes), b = alloc(bytes);
  uint8_t* pa = ptr(make_tensor(a.get(), DType::I8, static_cast<int64_t>(bytes)), "copy");
  uint8_t* pb = ptr(make_tensor(b.get(), DType::I8, static_cast<int64_t>(bytes)), "copy");
  rt_->zero(pa, bytes);
  rt_->copy_on_device(pb, pa, bytes);  // warm up
  rt_->synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) rt_->copy_on_device(i % 2 ? pa : pb, i % 2 ? pb : pa, bytes);
  rt_->synchronize();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(bytes) * reps / s / 1e9;
}

std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& opt) {
  return std::make_unique<CudaBackend>(make_runtime(opt.device), opt);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
