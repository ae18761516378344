#include "kernels/backend_factory.hpp"

#include <cctype>
#include <cmath>
#include <stdexcept>

#include "kernels/cuda/cuda_backend_entry.hpp"

namespace tandem::kernels {

bool cuda_backend_built() {
#if TANDEM_WITH_CUDA_DEVICE
  return true;
#else
  return false;
#endif
}

#if !TANDEM_WITH_CUDA_EMULATED
// The emulated build's entry points where it is left out: none can be made, and no backend of
// this build is one.
namespace cuda_entry {
std::unique_ptr<Backend> make_emulated(size_t, int64_t) {
  throw std::runtime_error("cuda-emulated: this build leaves out the emulated CUDA backend (TANDEM_CUDA_EMULATED=OFF)");
}
double copy_gbps_emulated(Backend&, size_t, int) { return -1; }
int64_t launches_emulated(const Backend&) { return -1; }
int64_t bytes_to_host_emulated(const Backend&) { return -1; }
bool profile_ops_emulated(Backend&, bool) { return false; }
bool op_profile_emulated(Backend&, std::vector<OpTime>&) { return false; }
}  // namespace cuda_entry
#endif

std::unique_ptr<Backend> make_emulated_cuda_backend(size_t arena_bytes, int64_t gemm_min_tokens) {
  return cuda_entry::make_emulated(arena_bytes, gemm_min_tokens);
}

double cuda_copy_bandwidth_gbps(Backend& be, size_t bytes, int reps) {
  double g = cuda_entry::copy_gbps_emulated(be, bytes, reps);
#if TANDEM_WITH_CUDA_DEVICE
  if (g < 0) g = cuda_entry::copy_gbps_device(be, bytes, reps);
#endif
  return g < 0 ? 0.0 : g;
}

int64_t cuda_launch_count(const Backend& be) {
  int64_t n = cuda_entry::launches_emulated(be);
#if TANDEM_WITH_CUDA_DEVICE
  if (n < 0) n = cuda_entry::launches_device(be);
#endif
  return n;
}

int64_t cuda_bytes_to_host(const Backend& be) {
  int64_t n = cuda_entry::bytes_to_host_emulated(be);
#if TANDEM_WITH_CUDA_DEVICE
  if (n < 0) n = cuda_entry::bytes_to_host_device(be);
#endif
  return n;
}

bool cuda_profile_ops(Backend& be, bool on) {
  bool ok = cuda_entry::profile_ops_emulated(be, on);
#if TANDEM_WITH_CUDA_DEVICE
  if (!ok) ok = cuda_entry::profile_ops_device(be, on);
#endif
  return ok;
}

std::vector<OpTime> cuda_op_profile(Backend& be) {
  std::vector<OpTime> out;
  bool ok = cuda_entry::op_profile_emulated(be, out);
#if TANDEM_WITH_CUDA_DEVICE
  if (!ok) cuda_entry::op_profile_device(be, out);
#endif
  return out;
}

BackendChoice choose_backend(const BackendOptions& opt) {
  BackendChoice c;
  if (opt.device == "cpu") {
    c.backend = make_cpu_backend(opt.cpu_threads, opt.pin_threads);
    return c;
  }
  if (opt.device == "cuda-emulated") {
    c.backend = make_emulated_cuda_backend(opt.gpu_mem_bytes ? opt.gpu_mem_bytes : size_t{256} << 20,
                                           opt.gemm_min_tokens);
    return c;
  }
  if (opt.device != "cuda" && opt.device != "auto")
    throw std::invalid_argument("unknown device '" + opt.device + "' (expected cpu, cuda, auto or cuda-emulated)");
  std::string why;
#if TANDEM_WITH_CUDA_DEVICE
  try {
    c.backend = cuda_entry::make_device(opt.cuda_device, opt.gpu_mem_bytes, opt.gpu_mem_fraction, opt.gemm_min_tokens);
    return c;
  } catch (const std::runtime_error& e) {
    if (opt.device == "cuda") throw;
    why = e.what();
  }
#else
  why = "cuda: this build has no CUDA backend (configured without a CUDA toolkit or with TANDEM_CUDA=OFF)";
  if (opt.device == "cuda") throw std::runtime_error(why);
#endif
  c.backend = make_cpu_backend(opt.cpu_threads, opt.pin_threads);
  c.reason = why + "; using the CPU backend";
  return c;
}

std::unique_ptr<Backend> make_backend(const BackendOptions& opt, std::string* reason) {
  BackendChoice c = choose_backend(opt);
  if (reason) *reason = c.reason;
  return std::move(c.backend);
}

size_t parse_memory_size(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) throw std::invalid_argument("bad memory size '" + s + "' (e.g. 24G, 512M)");
  const double v = std::stod(s.substr(0, i));
  std::string u = s.substr(i);
  for (auto& ch : u) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  double mul = 1;
  if (u.empty() || u == "B") mul = 1;
  else if (u == "K" || u == "KB" || u == "KIB") mul = 1024.0;
  else if (u == "M" || u == "MB" || u == "MIB") mul = 1024.0 * 1024;
  else if (u == "G" || u == "GB" || u == "GIB") mul = 1024.0 * 1024 * 1024;
  else if (u == "T" || u == "TB" || u == "TIB") mul = 1024.0 * 1024 * 1024 * 1024;
  else throw std::invalid_argument("bad memory size unit in '" + s + "' (B, K, M, G, T)");
  return static_cast<size_t>(std::llround(v * mul));
}

}  // namespace tandem::kernels
