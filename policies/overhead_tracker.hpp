// How much dearer real speculative steps are than the cost model predicts, relative to
// plain steps: the cost model times bare forward passes, while a real step also pays
// sampling and verification of k+1 positions, KV bookkeeping and longer contexts. One
// tracker is shared by every sequence that decides with the same cost model (the engine
// keeps it next to the model), so short requests benefit from what earlier ones measured.
// Thread-safe: the server's sequences report from one scheduler thread, generate() calls
// may run on several.
#pragma once
#include <mutex>

namespace tandem {

class OverheadTracker {
 public:
  explicit OverheadTracker(double decay = 0.9) : decay_(decay) {}

  // One step: measured time over the time the cost model predicts for it.
  void add(bool plain, double measured_over_predicted);
  // Speculative over plain ratio (moving averages), clamped to [1/1.5, 2]; 1 until enough
  // speculative steps were timed. Without timed plain steps the plain ratio is taken as 1,
  // but only when the model is in real milliseconds (`absolute`): a ratio-only model has
  // no time scale to compare with.
  double overhead(bool absolute) const;
  void reset();

 private:
  mutable std::mutex mu_;
  double decay_;
  double spec_ = 0.0, plain_ = 0.0;      // weighted sums of ratios
  double spec_w_ = 0.0, plain_w_ = 0.0;  // their weights (0..1)
};

}  // namespace tandem
