#include "engine/model/requantize.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <thread>

#include "kernels/cpu/quant.hpp"

namespace tandem {

namespace {
constexpr DType kChoices[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
}  // namespace

WeightOptions parse_weight_options(const std::string& s) {
  const std::string v = lower(s);
  WeightOptions w;
  if (v.empty() || v == "keep") return w;
  if (v == "auto") {
    w.matmul_type = DType::Q4_0;
    w.wide_only = true;
    return w;
  }
  for (DType t : kChoices)
    if (v == lower(dtype_name(t))) {
      w.matmul_type = t;
      return w;
    }
  throw std::invalid_argument("unknown draft weight type '" + s + "' (use auto, keep, q4_0, q4_1, q5_0, q5_1, q8_0 or q4_k)");
}

WeightOptions parse_target_weight_options(const std::string& s) {
  if (lower(s) == "auto") throw std::invalid_argument("weight type 'auto' is for drafts; use keep, q4_0, q4_1, q5_0, q5_1, q8_0 or q4_k");
  try {
    return parse_weight_options(s);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument("unknown weight type '" + s + "' (use keep, q4_0, q4_1, q5_0, q5_1, q8_0 or q4_k)");
  }
}

std::string weight_options_name(const WeightOptions& w) {
  if (!w.matmul_type) return "keep";
  if (w.wide_only) return "auto";
  return lower(dtype_name(*w.matmul_type));
}

bool names_explicit_weight_type(const std::string& s) {
  const WeightOptions w = parse_weight_options(s);
  return w.matmul_type && !w.wide_only;
}

bool wide_quantized(DType t) {
  const DTypeInfo& i = dtype_info(t);
  return i.block_size > 1 && static_cast<double>(i.type_size) * 8.0 / i.block_size > 5.0;
}

std::vector<uint8_t> requantize_rows(DType from, const void* src, int64_t rows, int64_t cols, DType to,
                                     int threads) {
  if (!kernels::cpu::can_quantize_to(to))
    throw std::invalid_argument(std::string("cannot re-quantize to ") + dtype_name(to));
  if (cols % dtype_info(to).block_size != 0 || cols % dtype_info(from).block_size != 0)
    throw std::invalid_argument("re-quantize: rows of " + std::to_string(cols) + " elements are not whole blocks");
  const size_t in_row = row_bytes(from, cols), out_row = row_bytes(to, cols);
  std::vector<uint8_t> out(out_row * static_cast<size_t>(rows));
  const auto* in = static_cast<const uint8_t*>(src);
  const int n = std::max(1, std::min<int>(threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency()),
                                          static_cast<int>(std::max<int64_t>(rows / 64, 1))));
  auto work = [&](int64_t r0, int64_t r1) {
    std::vector<float> tmp(static_cast<size_t>(cols));
    for (int64_t r = r0; r < r1; ++r) {
      kernels::cpu::dequantize_row(from, in + static_cast<size_t>(r) * in_row, tmp.data(), cols);
      kernels::cpu::quantize_row(to, tmp.data(), out.data() + static_cast<size_t>(r) * out_row, cols);
    }
  };
  std::vector<std::thread> pool;
  const int64_t per = (rows + n - 1) / n;
  for (int i = 1; i < n; ++i) {
    const int64_t r0 = std::min(rows, i * per), r1 = std::min(rows, r0 + per);
    if (r0 < r1) pool.emplace_back(work, r0, r1);
  }
  work(0, std::min(rows, per));
  for (auto& t : pool) t.join();
  return out;
}

}  // namespace tandem
