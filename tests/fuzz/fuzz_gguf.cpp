// GGUF reader: arbitrary bytes as a model file. Everything File::from_memory accepts must
// then be safe to use: every metadata key read with every getter, every tensor's bytes
// inside the buffer, and the tokenizer and chat template built from the metadata fail
// (if they do) with their documented errors.
#include <string>

#include "engine/chat/chat_template.hpp"
#include "engine/gguf/gguf.hpp"
#include "engine/text/tokenizer.hpp"
#include "tests/fuzz/fuzz_target.hpp"

using namespace tandem;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz_quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<gguf::File> f;
  try {
    f = gguf::File::from_memory(data, size, "fuzz.gguf");
  } catch (const gguf::Error&) {
    return 0;
  }
  fuzz_check(f->data_offset() <= size);
  for (const std::string& key : f->keys()) {
    fuzz_check(f->has(key));
    (void)f->type_of(key);
    (void)f->value_to_string(key, 4);
    (void)f->array_size(key);
    try { (void)f->get_int(key); } catch (const gguf::Error&) {}
    try { (void)f->get_float(key); } catch (const gguf::Error&) {}
    try { (void)f->get_bool(key); } catch (const gguf::Error&) {}
    try { (void)f->get_string(key); } catch (const gguf::Error&) {}
    try { (void)f->get_string_array(key); } catch (const gguf::Error&) {}
    try { (void)f->get_float_array(key); } catch (const gguf::Error&) {}
    try { (void)f->get_int_array(key); } catch (const gguf::Error&) {}
    try { (void)f->array_type_of(key); } catch (const gguf::Error&) {}
  }
  try { (void)f->architecture(); } catch (const gguf::Error&) {}
  volatile uint8_t sink = 0;
  for (const gguf::TensorInfo& t : f->tensors()) {
    fuzz_check(f->find_tensor(t.name) != nullptr);
    (void)t.numel();
    const uint8_t* p = f->tensor_data(t);
    fuzz_check(p >= data && t.nbytes <= size && p - data <= static_cast<std::ptrdiff_t>(size - t.nbytes));
    if (t.nbytes > 0) sink = sink + p[0] + p[t.nbytes - 1];  // inside the buffer (ASan checks)
  }
  try {
    const auto tok = Tokenizer::from_gguf(*f);
    const std::vector<int32_t> ids = tok->encode("Hello, world! <|im_start|>", true, true);
    (void)tok->decode(ids);
  } catch (const std::runtime_error&) {  // gguf::Error too
  }
  try {
    if (auto t = ChatTemplate::from_gguf(*f)) {
      t->set_limits({1 << 20, kFuzzTemplateIterations, kFuzzTemplateWorkBytes});
      (void)t->render({{"user", "hi"}}, true, "<s>", "</s>");
    }
  } catch (const std::runtime_error&) {  // ChatTemplateError, gguf::Error
  }
  return 0;
}
