// The draft's final distributions q of one step's drafts, kept on the device (a backend with
// kernels::DeviceDecode): the draft model samples its tokens there (make_probs, then
// sample_probs with the request's counter-based noise), only the token ids and the draft's
// confidence come back to the host, and the verifier (verify/device_verifier.hpp)
// reads q from these rows in the same step. Without it every draft pass would download
// n_lanes x n_vocab floats (152k per lane for Qwen2.5) to sample on the host.
//
// Rows are handed out in order during a step (begin_step resets them); the store is sized
// for the whole step up front, so rows given earlier in the step stay valid.
//
// Token trees (draft/token_tree.hpp) take their nodes' children here too (tree_children):
// each fed node's best tokens (greedy, coupled) or its draws without replacement from q
// (rejection mode, q left in the store for the verifier) and their log probabilities under
// the draft come back, a few numbers instead of the row of n_vocab logits.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/device_decode.hpp"
#include "draft/token_tree.hpp"
#include "engine/sampling/device_rows.hpp"
#include "tandem/sampling.hpp"

namespace tandem {

class DraftProbs {
 public:
  // Null when the backend cannot sample on the device (the CPU backend).
  static std::unique_ptr<DraftProbs> for_backend(kernels::Backend& be);

  // A new step that will take at most `rows` rows of `cols` probabilities.
  void begin_step(int64_t rows, int64_t cols);

  struct Lane {
    int32_t logits_row;               // its row of the pass's logits
    const SamplingParams* sampling;   // the request's transforms
    std::span<const int32_t> history; // context + drafted so far (penalties)
    bool coupled;                     // Gumbel-max with the target's noise, else the draft's own draw
    uint64_t seed;
    int64_t position;                 // absolute position of the token being drafted
    int32_t draft_index;              // which draft of the step it is (kernels::kTagDraft - i keys its noise)
    // Constrained: the grammar's mask after history (q over what it allows, conf too);
    // empty: unconstrained.
    std::span<const uint64_t> mask = {};
  };
  struct Drawn {
    int32_t token;   // -1: no token is possible
    float conf;      // the draft's confidence (draft_p_min): q of its most likely token
    int32_t q_row;   // q's row in q()
  };
  // Samples one token for each lane from the pass's logits (the first `cols` columns of
  // `logits`' rows; a constrained lane's row masked in place first): q goes into the next
  // rows of the store (one per logits row: a pass's rows of host lanes are skipped, but take
  // their rows too). With subset_ids (a reduced draft vocabulary:
  // engine/model/output_subset.hpp), logit column j is token subset_ids[j]: the rows are
  // spread over `vocab` tokens first, -inf elsewhere (q = 0).
  std::vector<Drawn> sample(const kernels::Tensor& logits, std::span<const Lane> lanes,
                            const kernels::Tensor* subset_ids = nullptr, int64_t vocab = 0);

  // Every row of the store (verify_sampled's q).
  kernels::Tensor q() const;

  // Token trees: a node's children from its row of a pass's logits, as TreeBuilder::expand
  // chooses them on the host (kernels::DeviceDecode::top_rows, draw_rows).
  enum class TreeMode { Greedy, Coupled, Drawn };
  struct TreeRow {
    int32_t logits_row;                // its row of the pass's logits
    int32_t room;                      // how many children at most (1..kMaxTreeNodes)
    const SamplingParams* sampling;    // the request's transforms (q's)
    std::span<const int32_t> history;  // context + the node's path (coupled, drawn: penalties)
    TreeMode mode;                     // greedy: the most likely tokens at temperature 1
    uint64_t seed;                     // coupled: the target's noise; drawn: the request's
    int64_t position;                  // absolute position of the children
    int32_t tag = 0;                   // drawn: the first draw's tag (kernels::tree_draw_tag)
    // Drawn, sized by cost: how many to draw, from q's largest probabilities (descending).
    std::function<int32_t(std::span<const float>)> how_many = {};
    std::span<const uint64_t> mask = {};  // constrained: the node's children's mask; empty: none
  };
  struct TreeChildren {
    std::vector<TreeChild> kids;  // best first (drawn: in the order drawn)
    int32_t q_row = -1;           // drawn: q's row in q()
  };
  // Each row's children: the most likely tokens (greedy), gumbel_top's under the noise at
  // `position` (coupled), or draws without replacement from q (drawn: noise keyed by the
  // seed, the position and the tag, one tag a draw), over the first `cols` tokens (those a
  // constrained row's mask allows: masked in place first); fewer where fewer are possible.
  // subset_ids / vocab as for sample. Drawn rows take rows of the store, as sample does
  // (begin_step sizes it for them too).
  std::vector<TreeChildren> tree_children(const kernels::Tensor& logits, std::span<const TreeRow> rows, int64_t cols,
                                          const kernels::Tensor* subset_ids = nullptr, int64_t vocab = 0);

 private:
  DraftProbs(kernels::Backend& be, kernels::DeviceDecode& dd) : be_(be), dd_(dd) {}
  kernels::Backend& be_;
  kernels::DeviceDecode& dd_;
  // The rows spread over the whole vocabulary (a reduced draft vocabulary), else `logits`.
  kernels::Tensor full_rows(const kernels::Tensor& logits, const kernels::Tensor* subset_ids, int64_t vocab);
  std::unique_ptr<kernels::Buffer> store_, side_, full_, tree_side_, tree_probs_, masks_;
  int64_t cap_rows_ = 0, cols_ = 0, next_ = 0;
};

}  // namespace tandem
