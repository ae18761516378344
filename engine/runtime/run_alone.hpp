// One request decoded by itself (Engine::generate): its SequenceRun stepped with nothing to
// batch with. The Scheduler (scheduler.hpp) is the other driver, for many requests at once;
// both take their runs from prepare_sequence (sequence_setup.hpp) and leave every decision
// about drafts, verification and output to the SequenceRun.
#pragma once

#include "draft/draft_probs.hpp"
#include "engine/model/transformer.hpp"

namespace tandem {

class SequenceRun;

// Steps a prepared run (sequence_setup.hpp) to its end by itself: the prompt in chunks, then
// one target pass per step, the draft reading its context in one go when it has to.
// draft_probs: the proposer's DraftProbs store, if it samples on the device.
void run_to_end(SequenceRun& run, Transformer& target, DraftProbs* draft_probs = nullptr);

}  // namespace tandem
