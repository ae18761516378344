// Runs a SequenceRun to its end on a target model, one sequence per pass (run_to_end of
// engine/runtime/run_alone.hpp), for tests that build the run themselves (their own
// proposer, policy or options) and then inspect it.
#pragma once

namespace tandem {
class SequenceRun;
class Transformer;
}  // namespace tandem

namespace tandem::test {

void drive_to_end(SequenceRun& run, Transformer& target);

}  // namespace tandem::test
