#include "engine/model/model.hpp"

#include <stdexcept>
#include <vector>

#include "engine/hf/model_file.hpp"
#include "engine/model/requantize.hpp"

namespace tandem {
namespace {

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

}  // namespace

kernels::Tensor upload_matrix(kernels::Backend& be, DType t, const void* host, int64_t cols, int64_t rows,
                              std::unique_ptr<kernels::Buffer>& owner, bool pack) {
  if (pack && (owner = be.pack_weight(t, host, rows, cols))) {
    kernels::Tensor w = kernels::make_tensor(owner.get(), t, cols, rows);
    w.layout = be.packed_layout(t);
    if (const size_t stride = be.packed_row_stride(t, cols); stride != w.row_stride()) w.nb1 = stride;
    return w;
  }
  const size_t bytes = row_bytes(t, cols) * static_cast<size_t>(rows);
  owner = be.alloc(bytes);
  const kernels::Tensor w = kernels::make_tensor(owner.get(), t, cols, rows);
  be.upload(w, host, bytes);
  return w;
}

const kernels::Tensor& Model::head() const {
  std::call_once(head_once_, [this] {
    head_ = output;
    if (output.layout != kernels::RowLayout::File || !backend_->packs_weights(output.type)) return;
    std::vector<uint8_t> host(output.bytes());
    backend_->download(host.data(), output, host.size());
    head_ = upload_matrix(*backend_, output.type, host.data(), output.cols(), output.rows(), head_buf_);
    // A tied embedding stays mapped for its row lookups, which fault back in only the rows
    // they read; the whole table the download above touched can go.
    if (const gguf::TensorInfo* ti = file_->find_tensor("token_embd.weight"); ti && config_.tied_embeddings)
      file_->release(*ti);
  });
  return head_;
}

kernels::Tensor Model::bind(const std::string& name, std::vector<int64_t> dims, bool required, bool f32_only,
                            bool matmul, bool pack) {
  const gguf::TensorInfo* ti = file_->find_tensor(name);
  if (!ti) {
    if (required) throw std::runtime_error(file_->path() + ": missing tensor '" + name + "'");
    return {};
  }
  // 1-D weights may be stored as [n] or [n, 1].
  std::vector<int64_t> have = ti->dims;
  while (have.size() > dims.size() && have.back() == 1) have.pop_back();
  if (have != dims)
    throw std::runtime_error(file_->path() + ": tensor '" + name + "' has shape " + dims_str(ti->dims) +
                             ", expected " + dims_str(dims));
  const DTypeInfo& info = dtype_info(ti->type);
  if (!info.weight_ok || (f32_only && ti->type != DType::F32))
    throw std::runtime_error(file_->path() + ": tensor '" + name + "' has type " + info.name +
                             (f32_only ? ", expected F32" : ", which the engine cannot compute with"));
  if (dims[0] % info.block_size != 0)
    throw std::runtime_error(file_->path() + ": tensor '" + name + "' rows of " + std::to_string(dims[0]) +
                             " elements are not a whole number of " + info.name + " blocks");
  const int64_t cols = dims[0], rows = dims.size() > 1 ? dims[1] : 1;
  if (matmul && requantizes(weights_, ti->type, cols)) {
    const DType to = *weights_.matmul_type;
    const std::vector<uint8_t> q = requantize_rows(ti->type, file_->tensor_data(*ti), rows, cols, to);
    std::unique_ptr<kernels::Buffer> buf;
    const kernels::Tensor t = upload_matrix(*backend_, to, q.data(), cols, rows, buf, pack);
    buffers_.push_back(std::move(buf));
    weight_bytes_ += q.size();
    file_->release(*ti);  // read once, into q
    return t;
  }
  if (pack && backend_->packs_weights(ti->type)) {
    std::unique_ptr<kernels::Buffer> buf;
    const kernels::Tensor t = upload_matrix(*backend_, ti->type, file_->tensor_data(*ti), cols, rows, buf);
    buffers_.push_back(std::move(buf));
    weight_bytes_ += ti->nbytes;
    file_->release(*ti);  // the backend holds its own copy (packed, or as stored)
    return t;
  }
  buffers_.push_back(backend_->wrap_host(file_->tensor_data(*ti), ti->nbytes));
  weight_bytes_ += ti->nbytes;
  return kernels::make_tensor(buffers_.back().get(), ti->type, cols, rows);
}

std::unique_ptr<Model> Model::load(const std::string& path, kernels::Backend& backend,
                                   const WeightOptions& weights) {
  std::unique_ptr<Model> m(new Model());
  m->weights_ = weights;
  m->file_ = open_model_file(path);
  m->backend_ = &backend;
  m->config_ = read_model_config(*m->file_);
  const ModelConfig& c = m->config_;
  const int64_t d = c.n_embd, qw = c.q_width(), kvw = c.kv_width(), ff = c.n_ff, hd = c.head_dim;

  // A tied embedding is also the output head: re-quantized with the other matrices.
  m->tok_embd = m->bind("token_embd.weight", {d, c.n_vocab}, true, false, c.tied_embeddings);
  m->output_norm = m->bind("output_norm.weight", {d}, true, true);
  m->output = c.tied_embeddings ? m->tok_embd : m->bind("output.weight", {d, c.n_vocab}, true, false, true, true);
  m->layers.resize(static_cast<size_t>(c.n_layer));
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LayerWeights& L = m->layers[static_cast<size_t>(il)];
    L.attn_norm = m->bind(p + "attn_norm.weight", {d}, true, true);
    L.wq = m->bind(p + "attn_q.weight", {d, qw}, true, false, true, true);
    L.wk = m->bind(p + "attn_k.weight", {d, kvw}, true, false, true, true);
    L.wv = m->bind(p + "attn_v.weight", {d, kvw}, true, false, true, true);
    L.wo = m->bind(p + "attn_output.weight", {qw, d}, true, false, true, true);
    L.bq = m->bind(p + "attn_q.bias", {qw}, c.qkv_bias, true);
    L.bk = m->bind(p + "attn_k.bias", {kvw}, c.qkv_bias, true);
    L.bv = m->bind(p + "attn_v.bias", {kvw}, c.qkv_bias, true);
    if (c.qk_norm) {
      L.q_norm = m->bind(p + "attn_q_norm.weight", {hd}, true, true);
      L.k_norm = m->bind(p + "attn_k_norm.weight", {hd}, true, true);
    }
    if (c.post_norms) {
      L.post_attn_norm = m->bind(p + "post_attention_norm.weight", {d}, true, true);
      L.post_ffn_norm = m->bind(p + "post_ffw_norm.weight", {d}, true, true);
    }
    L.ffn_norm = m->bind(p + "ffn_norm.weight", {d}, true, true);
    L.w_gate = m->bind(p + "ffn_gate.weight", {d, ff}, true, false, true, true);
    L.w_up = m->bind(p + "ffn_up.weight", {d, ff}, true, false, true, true);
    L.w_down = m->bind(p + "ffn_down.weight", {ff, d}, true, false, true, true);
  }
  return m;
}

}  // namespace tandem
