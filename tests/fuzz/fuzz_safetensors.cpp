// safetensors reader: arbitrary bytes as a weight file. Everything File::from_memory accepts
// must then be safe to use: every tensor found by name, its bytes inside the buffer and
// exactly what its shape and dtype need, no two overlapping; and every name mapped (or
// refused with the documented error) as a Hugging Face checkpoint's tensor of each
// architecture.
#include <algorithm>
#include <string>
#include <vector>

#include "engine/hf/hf_weights.hpp"
#include "engine/hf/safetensors.hpp"
#include "tests/fuzz/fuzz_target.hpp"

using namespace tandem;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz_quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<st::File> f;
  try {
    f = st::File::from_memory(data, size, "fuzz.safetensors");
  } catch (const st::Error&) {
    return 0;
  }
  volatile uint8_t sink = 0;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const st::TensorInfo& t : f->tensors()) {
    fuzz_check(f->find(t.name) == &t);
    fuzz_check(static_cast<uint64_t>(t.numel()) * st::dtype_size(t.dtype) == t.end - t.begin);
    const uint8_t* p = f->data(t);
    fuzz_check(p >= data && t.nbytes() <= size && p - data <= static_cast<std::ptrdiff_t>(size - t.nbytes()));
    if (t.nbytes() > 0) {
      sink = sink + p[0] + p[t.nbytes() - 1];  // inside the buffer (ASan checks)
      ranges.emplace_back(t.begin, t.end);
    }
    (void)st::engine_type(t.dtype);
    for (const char* arch : {"qwen2", "llama", "gemma3"}) {
      try {
        (void)hf::gguf_tensor_name(t.name, arch);
      } catch (const std::runtime_error&) {
      }
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) fuzz_check(ranges[i].first >= ranges[i - 1].second);
  (void)sink;
  return 0;
}
