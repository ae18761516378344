#include "engine/model/transformer.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/model/transformer_scratch.hpp"
#include "kernels/graph_capture.hpp"
#include "kernels/tree_keys.hpp"

namespace tandem {

using kernels::Tensor;

namespace {
// TANDEM_CUDA_GRAPHS=0 (off, false, no) turns decode graphs off for every model.
bool graphs_allowed_by_env() {
  const char* e = std::getenv("TANDEM_CUDA_GRAPHS");
  if (!e) return true;
  const std::string v(e);
  return !(v == "0" || v == "off" || v == "false" || v == "no");
}
}  // namespace

Transformer::Transformer(const Model& model, KVCache& cache)
    : model_(model), cache_(cache), be_(model.backend()), s_(std::make_unique<Scratch>()) {
  graphs_on_ = kernels::graph_capture(be_) != nullptr && graphs_allowed_by_env();
}

Transformer::~Transformer() = default;

void Transformer::reserve(const PassLimits& l) {
  if (l.tokens <= 0 || l.seqs <= 0 || l.blocks <= 0 || l.outputs <= 0)
    throw std::invalid_argument("Transformer::reserve: limits must be positive");
  const PassLimits g = with_graph_buckets(l);
  ensure_scratch(g.tokens, g.seqs, g.blocks, g.outputs);
  const ModelConfig& c = model_.config();
  kernels::Backend::ScratchNeeds need;
  need.tokens = g.tokens;
  need.max_cols = std::max({int64_t{c.n_embd}, int64_t{c.n_ff}, c.q_width()});
  need.max_weight_elems = static_cast<int64_t>(n_logits()) * c.n_embd;
  for (int64_t rows : {c.q_width(), c.kv_width(), int64_t{c.n_embd}, int64_t{c.n_ff}})
    need.max_weight_elems = std::max(need.max_weight_elems, rows * std::max(c.n_embd, c.n_ff));
  need.n_heads = c.n_head;
  need.n_kv_heads = c.n_head_kv;
  need.head_dim = c.head_dim;
  need.positions = static_cast<int64_t>(g.blocks) * cache_.block_size();
  be_.reserve_scratch(need);
}

bool Transformer::ensure_scratch(int32_t n, int32_t n_seqs, int32_t max_blocks, int32_t n_out) {
  Scratch& s = *s_;
  if (n <= s.cap_tokens && n_seqs <= s.cap_seqs && max_blocks <= s.cap_blocks && n_out <= s.cap_out) return false;
  const int32_t nt = std::max(n, s.cap_tokens);
  const int32_t ns = std::max(n_seqs, s.cap_seqs);
  const int32_t nb = std::max(max_blocks, s.cap_blocks);
  const int32_t no = std::max(n_out, s.cap_out);
  const ModelConfig& c = model_.config();
  if (!s.bufs.empty()) ++scratch_generation_;
  s.bufs.clear();
  auto make = [&](DType t, int64_t cols, int64_t rows) {
    s.bufs.push_back(be_.alloc(row_bytes(t, cols) * static_cast<size_t>(rows)));
    return kernels::make_tensor(s.bufs.back().get(), t, cols, rows);
  };
  s.x = make(DType::F32, c.n_embd, nt);
  s.h = make(DType::F32, c.n_embd, nt);
  s.q = make(DType::F32, c.q_width(), nt);
  s.k = make(DType::F32, c.kv_width(), nt);
  s.v = make(DType::F32, c.kv_width(), nt);
  s.attn = make(DType::F32, c.q_width(), nt);
  s.o = make(DType::F32, c.n_embd, nt);
  s.gate = make(DType::F32, c.n_ff, nt);
  s.up = make(DType::F32, c.n_ff, nt);
  s.out_rows = make(DType::F32, c.n_embd, no);
  s.logits = make(DType::F32, c.n_vocab, no);
  s.tokens = make(DType::I32, nt, 1);
  s.positions = make(DType::I32, nt, 1);
  s.seq_index = make(DType::I32, nt, 1);
  s.slots = make(DType::I32, nt, 1);
  s.block_table = make(DType::I32, nb, ns);
  s.out_idx = make(DType::I32, no, 1);
  s.tree = make(DType::I32, static_cast<int64_t>(nt) * kernels::kTreeFields, 1);
  s.moves = make(DType::I32, 2 * kernels::kMaxTreeNodes, 1);
  s.graph_in = make(DType::I32, 5 * static_cast<int64_t>(nt) + static_cast<int64_t>(ns) * nb, 1);
  s.cap_tokens = nt;
  s.cap_seqs = ns;
  s.cap_blocks = nb;
  s.cap_out = no;
  return true;
}

void Transformer::forward(const Batch& batch, std::vector<float>& logits, bool download) {
  const ModelConfig& c = model_.config();
  const int32_t n = batch.n_tokens();
  const int32_t n_out = batch.n_outputs();
  logits.clear();
  last_logits_ = kernels::Tensor{};
  if (n == 0) return;
  for (int32_t t : batch.tokens_)
    if (t < 0 || t >= c.n_vocab)
      throw std::invalid_argument("token id " + std::to_string(t) + " is outside the vocabulary (" +
                                  std::to_string(c.n_vocab) + ")");

  // New KV goes into blocks of the sequence's own only (new blocks always are).
  for (const auto& e : batch.entries_) e.seq->check_writable(e.start_pos, e.count);
  // Reserve every sequence's blocks up front; on failure undo what this call reserved.
  std::vector<int32_t> old_caps;
  for (const auto& e : batch.entries_) {
    old_caps.push_back(e.seq->length());
    if (!e.seq->reserve(e.start_pos + e.count)) {
      for (size_t i = 0; i < old_caps.size(); ++i) batch.entries_[i].seq->truncate(old_caps[i]);
      throw KVCacheFull("KV cache full: " + std::to_string(cache_.blocks().num_free()) +
                        " free blocks, sequence needs " + std::to_string(e.start_pos + e.count) + " positions");
    }
  }

  int32_t max_blocks = 1;
  for (const auto& e : batch.entries_)
    max_blocks = std::max(max_blocks, static_cast<int32_t>(e.seq->block_table().size()));
  Tensor out_logits;
  if (!graph_pass(batch, max_blocks, &out_logits)) out_logits = direct_pass(batch, max_blocks);

  for (const auto& e : batch.entries_) e.seq->set_length(e.start_pos + e.count);
  if (n_out == 0) return;
  last_logits_ = out_logits;
  if (!download) return;
  logits.resize(static_cast<size_t>(n_out) * static_cast<size_t>(n_logits()));
  be_.download(logits.data(), out_logits, logits.size() * sizeof(float));
  be_.synchronize();
}

// The pass as it comes: its exact shapes, metadata uploaded one array at a time.
Tensor Transformer::direct_pass(const Batch& batch, int32_t max_blocks) {
  const int32_t n = batch.n_tokens();
  const int32_t n_out = batch.n_outputs();
  const int32_t n_seqs = static_cast<int32_t>(batch.entries_.size());
  if (ensure_scratch(n, n_seqs, max_blocks, std::max(n_out, 1))) ++growths_;
  Scratch& s = *s_;

  // Metadata: slot of every new token, block tables padded to max_blocks.
  std::vector<int32_t> slots(static_cast<size_t>(n));
  std::vector<int32_t> table(static_cast<size_t>(n_seqs) * max_blocks, 0);
  for (int32_t si = 0; si < n_seqs; ++si) {
    const auto& e = batch.entries_[static_cast<size_t>(si)];
    const auto& bt = e.seq->block_table();
    std::copy(bt.begin(), bt.end(), table.begin() + static_cast<ptrdiff_t>(si) * max_blocks);
    for (int32_t i = 0; i < e.count; ++i) slots[static_cast<size_t>(e.first + i)] = e.seq->slot(e.start_pos + i);
  }
  PassInputs in;
  in.n = n;
  in.n_out = n_out;
  in.tokens = s.tokens;
  in.positions = s.positions;
  in.seq_index = s.seq_index;
  in.slots = s.slots;
  in.tokens.ne[0] = in.positions.ne[0] = in.seq_index.ne[0] = in.slots.ne[0] = n;
  in.block_table = s.block_table;
  in.block_table.ne[0] = max_blocks;
  in.block_table.nb1 = 0;
  in.block_table.ne[1] = n_seqs;
  in.out_idx = s.out_idx;
  in.out_idx.ne[0] = n_out;
  be_.upload(in.tokens, batch.tokens_.data(), sizeof(int32_t) * n);
  be_.upload(in.positions, batch.positions_.data(), sizeof(int32_t) * n);
  be_.upload(in.seq_index, batch.seq_index_.data(), sizeof(int32_t) * n);
  be_.upload(in.slots, slots.data(), sizeof(int32_t) * n);
  be_.upload(in.block_table, table.data(), sizeof(int32_t) * table.size());
  if (n_out > 0) be_.upload(in.out_idx, batch.output_rows_.data(), sizeof(int32_t) * n_out);
  if (batch.has_tree()) {
    in.tree = s.tree;
    in.tree.ne[0] = static_cast<int64_t>(n) * kernels::kTreeFields;
    be_.upload(in.tree, batch.tree_.data(), sizeof(int32_t) * batch.tree_.size());
  }
  return encode(in);
}

void Transformer::move_kv(SequenceKV& seq, std::span<const int32_t> from, int32_t to) {
  if (from.size() > static_cast<size_t>(kernels::kMaxTreeNodes))
    throw std::invalid_argument("Transformer::move_kv: more rows than a tree holds");
  std::vector<int32_t> slots;  // from, then to
  bool moves = false;
  for (size_t i = 0; i < from.size(); ++i) {
    const int32_t dst = to + static_cast<int32_t>(i);
    if (from[i] < dst || (i > 0 && from[i] <= from[i - 1]) || from[i] >= seq.length())
      throw std::invalid_argument("Transformer::move_kv: rows must move down, in order, within the sequence");
    moves = moves || from[i] != dst;
  }
  if (!moves) return;
  seq.check_writable(to, static_cast<int32_t>(from.size()));
  for (int32_t f : from) slots.push_back(seq.slot(f));
  for (size_t i = 0; i < from.size(); ++i) slots.push_back(seq.slot(to + static_cast<int32_t>(i)));
  if (!s_->moves.buf) ensure_scratch(1, 1, 1, 1);
  const auto n = static_cast<int64_t>(from.size());
  kernels::Tensor f = s_->moves.slice_rows(0, 1), t = f;
  f.ne[0] = t.ne[0] = n;
  t.offset += sizeof(int32_t) * static_cast<size_t>(n);
  be_.upload(s_->moves.slice_rows(0, 1), slots.data(), sizeof(int32_t) * slots.size());
  for (int il = 0; il < model_.config().n_layer; ++il) be_.kv_move(cache_.layer(il), f, t);
  be_.synchronize();
}

Tensor Transformer::encode(const PassInputs& in) {
  const ModelConfig& c = model_.config();
  Scratch& s = *s_;
  const int32_t n = in.n, n_out = in.n_out;
  kernels::PagedAttnMeta meta{in.positions, in.seq_index, in.block_table, in.slots, cache_.block_size(), in.tree};
  const Tensor& positions = in.positions;
  auto rows = [](const Tensor& t, int64_t r) { return t.slice_rows(0, r); };
  const Tensor x = rows(s.x, n), h = rows(s.h, n), q = rows(s.q, n), k = rows(s.k, n), v = rows(s.v, n);
  const Tensor attn = rows(s.attn, n), o = rows(s.o, n), gate = rows(s.gate, n), up = rows(s.up, n);

  be_.get_rows(x, model_.tok_embd, in.tokens);
  if (c.embd_scale != 1.0f) be_.scale(x, c.embd_scale);
  // A post-normed block's output (Gemma 3) joins the residual stream in the next norm's kernel.
  kernels::Backend::PendingResidual post;
  const kernels::Backend::PendingResidual* pending = nullptr;
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& L = model_.layers[static_cast<size_t>(il)];
    const bool local = c.layer_is_local[static_cast<size_t>(il)];
    // --- attention block
    {
      kernels::Backend::AttnInputs ai;
      ai.q = q, ai.k = k, ai.v = v;
      ai.bq = L.bq, ai.bk = L.bk, ai.bv = L.bv;
      if (c.qk_norm) ai.q_norm = L.q_norm, ai.k_norm = L.k_norm;
      ai.norm_eps = c.rms_eps;
      ai.positions = positions;
      ai.n_heads = c.n_head, ai.n_kv_heads = c.n_head_kv, ai.head_dim = c.head_dim, ai.rope_dims = c.rope_dims;
      ai.theta = local ? c.rope_theta_local : c.rope_theta;
      ai.style = c.rope_style;
      be_.norm_attention_inputs(h, x, L.attn_norm, c.rms_eps, 0.0f, L.wq, L.wk, L.wv, ai, cache_.layer(il), meta,
                                pending);
    }
    kernels::Backend::AttnShape as;
    as.n_heads = c.n_head, as.n_kv_heads = c.n_head_kv, as.head_dim = c.head_dim;
    as.scale = c.attention_scale(), as.sliding_window = local ? c.sliding_window : 0;
    if (c.post_norms) {
      be_.attention_matmul(o, L.wo, attn, q, cache_.layer(il), meta, as);
      post = {o, L.post_attn_norm, c.rms_eps}, pending = &post;
    } else {
      be_.attention_residual(x, L.wo, o, attn, q, cache_.layer(il), meta, as);
    }
    // --- feed-forward block
    {
      const kernels::Backend::MatmulTarget gate_up[] = {{gate, L.w_gate}, {up, L.w_up}};
      be_.norm_matmul_shared(h, x, L.ffn_norm, c.rms_eps, 0.0f, gate_up, 2, pending);
      pending = nullptr;
    }
    if (c.post_norms) {
      be_.act_matmul(o, gate, up, c.activation, L.w_down);
      post = {o, L.post_ffn_norm, c.rms_eps}, pending = &post;
    } else {
      be_.act_matmul_residual(x, gate, up, c.activation, L.w_down, o);
    }
  }
  if (pending) be_.norm_residual(x, pending->src, pending->w, pending->eps);

  if (n_out == 0) return {};

  // Only the rows that need logits go through the final norm and the vocabulary matmul.
  const int32_t width = n_logits();
  const Tensor out_rows = rows(s.out_rows, n_out);
  const Tensor out_logits = kernels::make_tensor(s.logits.buf, DType::F32, width, n_out, s.logits.offset);
  be_.get_rows(out_rows, x, in.out_idx);
  be_.rms_norm(out_rows, out_rows, model_.output_norm, c.rms_eps);
  be_.matmul(out_logits, subset_ ? subset_->head : model_.head(), out_rows);
  return out_logits;
}

}  // namespace tandem
