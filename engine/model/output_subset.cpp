#include "engine/model/output_subset.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "engine/model/requantize.hpp"

namespace tandem {

std::shared_ptr<const OutputSubset> make_output_subset(const Model& model, std::vector<int32_t> ids) {
  const ModelConfig& c = model.config();
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  if (ids.empty()) throw std::invalid_argument("an output subset needs at least one token");
  if (ids.front() < 0 || ids.back() >= c.n_vocab)
    throw std::invalid_argument("output subset: token id " + std::to_string(ids.front() < 0 ? ids.front() : ids.back()) +
                                " is outside the vocabulary (" + std::to_string(c.n_vocab) + ")");
  // The rows come from the file (the backend's copy may be device memory): the output
  // matrix, or the embeddings when the two are tied. Rows of a quantized type are whole
  // blocks (Model::load checked), so a row copies as bytes.
  const gguf::TensorInfo* ti = model.file().find_tensor(c.tied_embeddings ? "token_embd.weight" : "output.weight");
  if (!ti) throw std::runtime_error(model.file().path() + ": no output matrix");
  const size_t row = row_bytes(ti->type, c.n_embd);
  const auto* src = static_cast<const uint8_t*>(model.file().tensor_data(*ti));
  std::vector<uint8_t> host(row * ids.size());
  for (size_t i = 0; i < ids.size(); ++i) std::memcpy(host.data() + i * row, src + static_cast<size_t>(ids[i]) * row, row);
  // A re-quantized model's head is in its new type (Model::load did the same to the whole).
  DType type = ti->type;
  if (requantizes(model.weights(), type, c.n_embd)) {
    host = requantize_rows(type, host.data(), static_cast<int64_t>(ids.size()), c.n_embd, *model.weights().matmul_type);
    type = *model.weights().matmul_type;
  }

  auto s = std::make_shared<OutputSubset>();
  s->ids = std::move(ids);
  kernels::Backend& be = model.backend();
  s->head = upload_matrix(be, type, host.data(), c.n_embd, static_cast<int64_t>(s->ids.size()), s->buf);
  s->ids_buf = be.alloc(s->ids.size() * sizeof(int32_t));
  s->ids_on_backend = kernels::make_tensor(s->ids_buf.get(), DType::I32, static_cast<int64_t>(s->ids.size()));
  be.upload(s->ids_on_backend, s->ids.data(), s->ids.size() * sizeof(int32_t));
  be.synchronize();
  return s;
}

}  // namespace tandem
