#include "tests/support/drive.hpp"

#include <vector>

#include "engine/model/transformer.hpp"
#include "engine/runtime/sequence_run.hpp"

namespace tandem::test {

void drive_to_end(SequenceRun& run, Transformer& target) {
  std::vector<float> logits;
  Batch b;
  b.add(run.kv(), run.prefill_todo());
  target.forward(b, logits);
  while (!run.done()) {
    b.clear();
    b.add_all_logits(run.kv(), run.plan_step(1));
    target.forward(b, logits);
    run.finish_step(logits, 0.0);
  }
}

}  // namespace tandem::test
