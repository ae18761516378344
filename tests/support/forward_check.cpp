#include "tests/support/forward_check.hpp"

#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "engine/model/transformer.hpp"
#include "tests/support/paths.hpp"

namespace tandem::test {

std::vector<float> engine_logits(const std::string& path, const std::vector<int32_t>& tokens, DType kv_type,
                                 int threads) {
  auto be = kernels::make_cpu_backend(threads);
  auto model = Model::load(path, *be);
  KVCacheOptions o;
  o.block_size = 4;  // small blocks: several per sequence even in short tests
  o.max_tokens = static_cast<int64_t>(tokens.size()) + 8;
  o.dtype = kv_type;
  KVCache cache(*be, model->config(), o);
  Transformer tf(*model, cache);
  SequenceKV seq(cache);
  Batch b;
  b.add_all_logits(seq, tokens);
  std::vector<float> logits;
  tf.forward(b, logits);
  return logits;
}

std::vector<float> reference_logits(const std::string& model, const std::vector<int32_t>& tokens, bool act_quant) {
  const std::string out = scratch_dir("ref-logits") + "/logits.f32";
  std::string ids;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i) ids += ',';
    ids += std::to_string(tokens[i]);
  }
  std::string log;
  const int rc = run_python("tests/python/forward_ref.py", model + (act_quant ? " --act-quant" : "") + " --tokens " + ids + " --out " + out + " 2>&1", &log);
  EXPECT_EQ(rc, 0) << "reference forward failed:\n" << log;
  if (rc != 0) return {};
  std::ifstream f(out, std::ios::binary | std::ios::ate);
  std::vector<float> v(static_cast<size_t>(f.tellg()) / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

LogitDiff compare_logits(const std::vector<float>& a, const std::vector<float>& ref, int64_t n_vocab) {
  LogitDiff d;
  EXPECT_EQ(a.size(), ref.size());
  if (a.size() != ref.size() || ref.empty()) return d;
  double ss = 0, sd = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double diff = double(a[i]) - ref[i];
    d.max_abs = std::max(d.max_abs, std::abs(diff));
    sd += diff * diff;
    ss += double(ref[i]) * ref[i];
  }
  d.scale = std::sqrt(ss / double(ref.size()));
  d.rms = std::sqrt(sd / double(ref.size()));
  for (size_t r = 0; r < ref.size() / size_t(n_vocab); ++r) {
    auto row_max = [&](const std::vector<float>& v) {
      const float* p = v.data() + r * n_vocab;
      return std::max_element(p, p + n_vocab) - p;
    };
    if (row_max(a) != row_max(ref)) ++d.argmax_mismatches;
  }
  return d;
}

::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want,
                                     int64_t row_len) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size() << " floats";
  auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
  };
  size_t first = got.size(), n_diff = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (bits(got[i]) == bits(want[i])) continue;
    if (n_diff++ == 0) first = i;
  }
  if (n_diff == 0) return ::testing::AssertionSuccess();
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.9g (0x%08" PRIx32 ") vs %.9g (0x%08" PRIx32 ")", got[first], bits(got[first]),
                want[first], bits(want[first]));
  const int64_t row = static_cast<int64_t>(first) / row_len, col = static_cast<int64_t>(first) % row_len;
  return ::testing::AssertionFailure() << n_diff << " of " << got.size() << " floats differ; first at index " << first
                                       << " (row " << row << ", column " << col << "): " << buf;
}

}  // namespace tandem::test
