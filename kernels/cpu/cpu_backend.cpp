// CpuBackend: construction, memory and host transfers.
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/cpu_features.hpp"

#include <cstring>
#include <stdexcept>

#include "kernels/cpu/host_buffer.hpp"
#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/quant.hpp"

namespace tandem::kernels::cpu {

CpuBackend::CpuBackend(int n_threads, bool pin_threads)
    : pool_(n_threads > 0 ? n_threads : ThreadPool::default_threads(), pin_threads) {}

std::string CpuBackend::name() const {
  const std::string amx = amx_path() == AmxPath::Off ? "" : " + " + amx_name(amx_path());
  return "cpu (" + isa_name(detected_isa()) + amx + ", " + std::to_string(pool_.size()) + " threads" +
         (pool_.pinned() ? ", pinned" : "") + ")";
}

std::string CpuBackend::description() const {
  std::string built = "scalar";
  if (mm::avx2_kernels()) built += " avx2";
  if (mm::avx512_kernels()) built += " avx512-vnni";
  std::string s = "backend: cpu\n  kernels: " + isa_name(detected_isa()) + " (built: " + built +
                  "; chosen at start from the CPU features below, capped by TANDEM_ISA)\n  threads: " + std::to_string(pool_.size()) +
                  (pool_.pinned() ? " (workers pinned to cores)" : "");
  if (amx_path() != AmxPath::Off)
    s += "\n  amx: " + amx_name(amx_path()) + " tiles for tiled weights in passes of " +
         std::to_string(mm::kAmxMinTokens) + "+ tokens (TANDEM_AMX=0 keeps the VNNI kernels)";
  else if (amx_available())
    s += "\n  amx: off (TANDEM_AMX=0, or a kernel level below avx512)";
  else
    s += "\n  amx: not usable here (no AMX, below avx512, not granted by the OS, or results other than the VNNI kernels')";
  std::string tiled, packed;
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    if (tiles_rows(t)) tiled += std::string(" ") + dtype_name(t);
    else if (packs_rows(t)) packed += std::string(" ") + dtype_name(t);
  }
  if (tiled.empty() && packed.empty())
    s += "\n  weights: as stored (no packed kernels at this level, or TANDEM_PACK=0)";
  else
    s += "\n  weights:" + (tiled.empty() ? std::string() : tiled + " in 16-row tiles") +
         (packed.empty() ? std::string() : (tiled.empty() ? "" : ";") + packed + " rows packed") +
         " at load (TANDEM_PACK=0 keeps them as stored)";
  s += "\n  cpu features:";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) s += " avx2";
  if (__builtin_cpu_supports("fma")) s += " fma";
  if (tandem::cpu::cpu_has_f16c()) s += " f16c";
  if (__builtin_cpu_supports("bmi2")) s += " bmi2";
  if (__builtin_cpu_supports("avx512f")) s += " avx512f";
  if (__builtin_cpu_supports("avx512bw")) s += " avx512bw";
  if (__builtin_cpu_supports("avx512vl")) s += " avx512vl";
  if (__builtin_cpu_supports("avx512dq")) s += " avx512dq";
  if (__builtin_cpu_supports("avx512vnni")) s += " avx512vnni";
  if (tandem::cpu::cpu_has_amx_int8()) s += " amx_tile amx_int8";
  return s;
}

std::unique_ptr<Buffer> CpuBackend::alloc(size_t bytes) { return std::make_unique<HostBuffer>(bytes); }

std::unique_ptr<Buffer> CpuBackend::alloc_zeroed(size_t bytes, const char* /*what*/) {
  return std::make_unique<HostBuffer>(bytes, HostBuffer::kZeroedPages);
}

std::unique_ptr<Buffer> CpuBackend::wrap_host(const void* data, size_t bytes) {
  return std::make_unique<HostBuffer>(data, bytes);
}

void CpuBackend::upload(const Tensor& dst, const void* src, size_t bytes) {
  auto* hb = dynamic_cast<HostBuffer*>(dst.buf);
  if (!hb || !hb->writable()) throw std::logic_error("cpu backend: upload into a read-only or foreign buffer");
  if (dst.offset + bytes > hb->size()) throw std::logic_error("cpu backend: upload past the end of the buffer");
  std::memcpy(hb->data() + dst.offset, src, bytes);
}

void CpuBackend::download(void* dst, const Tensor& src, size_t bytes) {
  auto* hb = dynamic_cast<HostBuffer*>(src.buf);
  if (!hb) throw std::logic_error("cpu backend: download from a foreign buffer");
  if (src.offset + bytes > hb->size()) throw std::logic_error("cpu backend: download past the end of the buffer");
  std::memcpy(dst, hb->data() + src.offset, bytes);
}

bool CpuBackend::packs_weights(DType t) const { return tiles_rows(t) || packs_rows(t); }
RowLayout CpuBackend::packed_layout(DType t) const { return tiles_rows(t) ? RowLayout::Tiled : RowLayout::Packed; }

std::unique_ptr<Buffer> CpuBackend::pack_weight(DType t, const void* src, int64_t rows, int64_t cols) {
  if (!packs_weights(t) || rows <= 0 || cols % dtype_info(t).block_size != 0) return nullptr;
  const size_t rb = tandem::row_bytes(t, cols);
  auto buf = std::make_unique<HostBuffer>(rb * static_cast<size_t>(rows));
  if (tiles_rows(t)) tile_rows(pool_, t, src, rb, buf->data(), rows, cols);
  else pack_rows(pool_, t, src, rb, buf->data(), rows, cols);
  return buf;
}

void CpuBackend::fill_zero(const Tensor& dst) { std::memset(host_ptr(dst), 0, dst.bytes()); }

}  // namespace tandem::kernels

namespace tandem::kernels {
std::unique_ptr<Backend> make_cpu_backend(int n_threads, bool pin_threads) {
  return std::make_unique<cpu::CpuBackend>(n_threads, pin_threads);
}
}  // namespace tandem::kernels
