#include "tests/support/drive.hpp"

#include <vector>

#include "engine/model/transformer.hpp"
#include "engine/runtime/run_alone.hpp"
#include "engine/runtime/sequence_run.hpp"

namespace tandem::test {

void drive_to_end(SequenceRun& run, Transformer& target) { run_to_end(run, target); }

}  // namespace tandem::test
