// Engine-internal access to a loaded Engine's parts, for code inside the library that
// drives the models itself (the server's Scheduler). Not part of the public API.
#pragma once
#include <memory>
#include <mutex>

#include "draft/draft_probs.hpp"
#include "engine/model/transformer.hpp"
#include "engine/runtime/grammar_cache.hpp"
#include "engine/text/tokenizer.hpp"
#include "policies/cost_model.hpp"
#include "policies/output_lengths.hpp"
#include "policies/overhead_tracker.hpp"
#include "policies/shape_choice.hpp"
#include "tandem/engine.hpp"

namespace tandem {

struct EngineParts {
  Transformer& target;
  const Tokenizer& tokenizer;
  Transformer* draft;  // null without a draft model
  int32_t context;
  std::mutex& mu;      // held by whoever runs the models (Engine::generate or a Scheduler)
  GrammarCache& grammars;  // constrained requests' compiled grammars (thread-safe)
  // Where draft-model drafts sample on the device and leave q for the device verifier (null:
  // on the host; the CPU backend). One store for every sequence of a step.
  DraftProbs* draft_probs = nullptr;
};

// What the speculation policies decide with: the engine's cost model (null: their
// default) and the step-overhead tracker shared by every sequence using that model.
struct PolicyCosts {
  std::shared_ptr<const CostModel> model;
  std::shared_ptr<OverheadTracker> overhead;
  std::shared_ptr<ShapeChoice> shapes;  // token trees against chains (policies/shape_choice.hpp)
  std::shared_ptr<OutputLengths> lengths;  // how long outputs run (policies/output_lengths.hpp)
};

struct EngineAccess {
  static EngineParts parts(Engine& e);
  static PolicyCosts policy_costs(const Engine& e);
};

}  // namespace tandem
