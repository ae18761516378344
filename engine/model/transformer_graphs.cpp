// Decode passes replayed from graphs (see transformer.hpp, decode_buckets.hpp).
//
// A decode pass (one token per sequence) or a verification pass (several tokens per sequence,
// each wanting its logits) is padded to its bucket (tokens, table width); its inputs
// go into the scratch's fixed graph_in buffer in one upload, and the bucket's graph (every
// kernel from the embedding lookup to the output head, reading those addresses) is launched.
// On a bucket's first use the pass runs directly once, which also brings the backend's
// scratch to the size the pass needs (nothing may be allocated inside a capture), and is
// then captured without running. Padding lanes write into a free cache block taken for the
// pass alone (PadBlock). A graph holds the addresses of the weights, the cache, this model's
// scratch and the backend's scratch: it is dropped when the scratch is re-allocated
// (either), when the output head changes, or to stay within max_graphs.
#include <algorithm>
#include <optional>
#include <vector>

#include "engine/model/decode_buckets.hpp"
#include "engine/model/transformer.hpp"
#include "engine/model/transformer_scratch.hpp"
#include "kernels/graph_capture.hpp"

namespace tandem {

using kernels::Tensor;

namespace {
// Decode batches of more sequences run directly: graphs are for the launch-bound small
// passes, and the scratch is sized for the largest bucket (its logits rows: 48 x n_vocab).
constexpr int64_t kMaxGraphLanes = 48;

// A free block of the cache for the padding lanes of one pass to read (they store nothing:
// kernels::kNoKvSlot): taken after the pass's sequences have reserved theirs, given back
// when the pass has been issued. Its id is an input of the pass, not part of the graph, so
// any free block will do each time; whoever gets it next writes it after the pass on the
// same stream.
class PadBlock {
 public:
  explicit PadBlock(BlockAllocator& a) : a_(a), id_(a.allocate()) {}
  ~PadBlock() {
    if (id_ >= 0) a_.release(id_);
  }
  PadBlock(const PadBlock&) = delete;
  PadBlock& operator=(const PadBlock&) = delete;
  int32_t id() const { return id_; }

 private:
  BlockAllocator& a_;
  int32_t id_;
};
}  // namespace

void Transformer::set_graphs(bool on, size_t max_graphs) {
  graphs_on_ = on && kernels::graph_capture(be_) != nullptr;
  graphs_.set_capacity(max_graphs);
  if (!graphs_on_) graphs_.clear();
}

void Transformer::drop_graphs() { graphs_.clear(); }

// A decode pass through a graph takes scratch for the largest batch bucket and a bucketed
// block-table width (graph_pass): reserve that too.
Transformer::PassLimits Transformer::with_graph_buckets(PassLimits l) const {
  kernels::GraphCapture* gc = graphs_on_ ? kernels::graph_capture(be_) : nullptr;
  if (!gc) return l;
  const int32_t max_rows = static_cast<int32_t>(std::min<int64_t>(gc->max_capture_rows(), kMaxGraphLanes));
  if (max_rows < 1) return l;
  const int32_t largest = largest_decode_bucket(max_rows);
  l.tokens = std::max(l.tokens, largest);
  l.seqs = std::max(l.seqs, largest);
  l.outputs = std::max(l.outputs, largest);
  l.blocks = std::max(l.blocks, table_width_bucket(l.blocks));
  return l;
}

bool Transformer::graph_pass(const Batch& batch, int32_t max_blocks, Tensor* logits) {
  kernels::GraphCapture* gc = graphs_on_ ? kernels::graph_capture(be_) : nullptr;
  if (!gc) return false;
  const int32_t n = batch.n_tokens(), n_out = batch.n_outputs();
  // A decode pass (one token per sequence, some logits wanted) or a verification pass (every
  // token's logits wanted: the rows the graph computes anyway); no tree node (its keys are
  // not its sequence's positions).
  const bool decode = n == static_cast<int32_t>(batch.entries_.size());
  if (n_out == 0 || (!decode && n_out != n) || batch.has_tree()) return false;
  const int32_t max_rows = static_cast<int32_t>(std::min<int64_t>(gc->max_capture_rows(), kMaxGraphLanes));
  if (max_rows < 1) return false;
  const int32_t batch_bucket = decode_batch_bucket(n, max_rows);
  if (batch_bucket == 0) return false;
  std::optional<PadBlock> pad;
  if (batch_bucket > n) {
    pad.emplace(cache_.blocks());
    if (pad->id() < 0) return false;  // no free block (or budget) for padding lanes now
  }
  const int32_t width = table_width_bucket(max_blocks);
  // Scratch for the largest bucket at once, so that a batch that grows does not re-allocate
  // it (and drop every graph) bucket by bucket.
  const int32_t largest = largest_decode_bucket(max_rows);
  if (ensure_scratch(largest, largest, width, largest)) ++growths_;
  Scratch& s = *s_;

  const DecodeInputLayout layout = decode_input_layout(batch_bucket, width);
  std::vector<DecodeLane> lanes(static_cast<size_t>(n));
  for (size_t si = 0; si < batch.entries_.size(); ++si) {
    const auto& e = batch.entries_[si];
    for (int32_t i = 0; i < e.count; ++i)
      lanes[static_cast<size_t>(e.first + i)] = {batch.tokens_[static_cast<size_t>(e.first + i)], batch.positions_[static_cast<size_t>(e.first + i)],
                                                 e.seq->slot(e.start_pos + i),
                                                 std::span<const int32_t>(e.seq->block_table()), static_cast<int32_t>(si)};
  }
  std::vector<int32_t> host;
  fill_decode_inputs(layout, lanes, batch.output_rows_, pad ? pad->id() : -1, host);
  be_.upload(kernels::make_tensor(s.graph_in.buf, DType::I32, static_cast<int64_t>(layout.total), 1, s.graph_in.offset),
             host.data(), sizeof(int32_t) * host.size());

  auto at = [&](size_t off, int64_t cols, int64_t rows = 1) {
    return kernels::make_tensor(s.graph_in.buf, DType::I32, cols, rows, s.graph_in.offset + sizeof(int32_t) * off);
  };
  PassInputs in;
  in.n = in.n_out = batch_bucket;
  in.tokens = at(layout.tokens, batch_bucket);
  in.positions = at(layout.positions, batch_bucket);
  in.seq_index = at(layout.seq_index, batch_bucket);
  in.slots = at(layout.slots, batch_bucket);
  in.out_idx = at(layout.out_rows, batch_bucket);
  in.block_table = at(layout.table, width, batch_bucket);

  const GraphKey key{batch_bucket, width};
  graphs_.validate({gc->capture_epoch(), scratch_generation_});
  Tensor out;
  if (kernels::CapturedGraph* g = graphs_.find(key)) {
    g->launch();
    out = kernels::make_tensor(s.logits.buf, DType::F32, n_logits(), batch_bucket, s.logits.offset);
  } else {
    out = encode(in);  // this pass's result; sizes the backend's scratch for the capture
    graphs_.validate({gc->capture_epoch(), scratch_generation_});
    gc->begin_capture();
    try {
      encode(in);
    } catch (...) {
      gc->abort_capture();
      throw;
    }
    graphs_.insert(key, gc->end_capture());
  }
  *logits = out.slice_rows(0, n_out);
  return true;
}

}  // namespace tandem
