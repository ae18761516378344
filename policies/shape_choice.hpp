// Token trees or chains: which way of drafting has committed more tokens per millisecond so
// far (rate_choice.hpp: the tree is the first way, both are tried, a losing tree is retried
// after a wait that doubles while it keeps losing, and a winning tree's chain is re-timed now
// and then). A greedy tree step also tells what the chain would have committed in its place
// (a deterministic tree keeps the chain whole: its spine of first children,
// draft/token_tree.hpp), so trees are compared with chains step for step, not only by
// separate records that a few lucky tree steps can tilt. One record is shared by every sequence
// that decides with the same cost model (the engine keeps it next to the model, as it keeps
// the OverheadTracker), so each request starts from what earlier ones measured: on a machine
// where verifying more tokens costs little (AMX, a GPU) trees win, elsewhere chains.
// Thread-safe: the server's sequences report from one scheduler thread, generate() calls may
// run on several.
#pragma once
#include <cstdint>
#include <mutex>

#include "policies/rate_choice.hpp"

namespace tandem {

class ShapeChoice {
 public:
  bool prefer_tree() {
    std::lock_guard<std::mutex> lk(mu_);
    return choice_.prefer_first();
  }
  // A verified draft-model step that could have been a tree: whether it was, the drafts the
  // target accepted, and its time (draft passes and the target's pass). chain_accepted (a
  // tree step, where known; -1 otherwise): the drafts the chain would have had accepted in
  // the same step, which then counts for the chain at its mean step time.
  void observe(bool tree, int32_t accepted, double step_ms, int32_t chain_accepted = -1) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!tree) return choice_.observe_second(accepted, step_ms);
    if (chain_accepted >= 0) choice_.observe_second_instead(chain_accepted);
    choice_.observe_first(accepted, step_ms);
  }
  // What was learned so far, and taking it up in a new engine (policies/shape_cache.hpp).
  RateChoice::State state() {
    std::lock_guard<std::mutex> lk(mu_);
    return choice_.state();
  }
  void restore(const RateChoice::State& s) {
    std::lock_guard<std::mutex> lk(mu_);
    choice_.restore(s);
  }

 private:
  std::mutex mu_;
  RateChoice choice_{true, true, true};
};

}  // namespace tandem
