// Policy selection: SpeculativeOptions::policy names one of the policies below; the engine
// builds one per request (per sequence) with make_policy.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "policies/cost_model.hpp"
#include "policies/overhead_tracker.hpp"
#include "policies/policy.hpp"
#include "policies/shape_choice.hpp"
#include "tandem/speculative.hpp"

namespace tandem {

// "fixed", "confidence", "adaptive", "goodput".
const std::vector<std::string>& policy_names();
bool is_policy_name(const std::string& name);  // "" counts as "fixed"
// adaptive and goodput decide with a cost model (the engine's, else the assumed default).
bool policy_uses_cost_model(const std::string& name);

// The options a request really runs with: confidence's default draft_p_min of 0.5.
SpeculativeOptions effective_options(const SpeculativeOptions& so);

// Throws std::invalid_argument for an unknown name. costs may be null (→ the assumed
// default); otherwise it must outlive the policy.
// `overhead`: shared step-timing evidence for the adaptive policies (null: a private one).
// `shapes`: shared evidence on token trees against chains (null: a private one).
std::unique_ptr<SpeculationPolicy> make_policy(const SpeculativeOptions& so, const CostModel* costs,
                                               std::shared_ptr<OverheadTracker> overhead = nullptr,
                                               std::shared_ptr<ShapeChoice> shapes = nullptr);

}  // namespace tandem
