// A File assembled from GGUF metadata bytes and tensors held elsewhere (File::assemble): how
// a model stored in another format reaches the loader, the tokenizer and the chat template,
// which all read a gguf::File.
#include <limits>

#include "engine/gguf/gguf.hpp"
#include "engine/gguf/gguf_bytes.hpp"

namespace tandem::gguf {
using detail::quoted;

std::unique_ptr<File> File::assemble(const std::string& name, std::vector<uint8_t> metadata,
                                     std::vector<ExternalTensor> tensors, std::shared_ptr<const void> owner) {
  std::unique_ptr<File> f(new File());
  f->path_ = name;
  f->owned_bytes_ = std::move(metadata);
  f->base_ = f->owned_bytes_.empty() ? nullptr : f->owned_bytes_.data();
  f->size_ = f->owned_bytes_.size();
  f->parse();
  if (!f->tensors_.empty()) f->fail("assembled metadata must not carry tensors of its own");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const ExternalTensor& e = tensors[i];
    const std::string q = quoted(e.name);
    if (e.name.empty()) f->fail("a tensor has an empty name");
    if (e.dims.empty() || e.dims.size() > kMaxDims) f->fail("tensor " + q + " has " + std::to_string(e.dims.size()) + " dimensions");
    int64_t numel = 1;
    for (int64_t d : e.dims)
      if (d <= 0 || __builtin_mul_overflow(numel, d, &numel)) f->fail("tensor " + q + " has an invalid shape");
    const DTypeInfo& info = dtype_info(e.type);
    if (e.dims[0] % info.block_size != 0)
      f->fail("tensor " + q + " rows of " + std::to_string(e.dims[0]) + " are not whole " + info.name + " blocks");
    const size_t want = row_bytes(e.type, e.dims[0]) * static_cast<size_t>(numel / e.dims[0]);
    if (e.nbytes != want)
      f->fail("tensor " + q + " has " + std::to_string(e.nbytes) + " bytes, its shape needs " + std::to_string(want));
    if (e.data == nullptr) f->fail("tensor " + q + " has no data");
    if (f->tensor_index_.count(e.name)) f->fail("duplicate tensor name " + q);
    TensorInfo t;
    t.name = e.name;
    t.type = e.type;
    t.dims = e.dims;
    t.offset = i;  // the index into external_ (tensor_data)
    t.nbytes = e.nbytes;
    f->tensor_index_.emplace(t.name, f->tensors_.size());
    f->tensors_.push_back(std::move(t));
  }
  f->external_ = std::move(tensors);
  f->external_owner_ = std::move(owner);
  return f;
}

}  // namespace tandem::gguf
