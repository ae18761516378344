#include "policies/factory.hpp"

#include <algorithm>
#include <stdexcept>

#include "policies/adaptive_policy.hpp"

namespace tandem {
namespace {

constexpr float kDefaultPMin = 0.5f;
constexpr double kDefaultAlphaPrior = 0.6;

// The caller keeps `costs` alive for the policy's lifetime; the default is static.
std::unique_ptr<SpeculationPolicy> make_adaptive(const SpeculativeOptions& so, const CostModel* costs,
                                                 bool batch_aware, std::shared_ptr<OverheadTracker> overhead,
                                                 std::shared_ptr<ShapeChoice> shapes) {
  AdaptiveConfig cfg;
  cfg.alpha_prior = so.alpha_prior > 0.0f ? std::min(1.0, static_cast<double>(so.alpha_prior)) : kDefaultAlphaPrior;
  if (so.start_budget != 0.0f) cfg.start_budget = so.start_budget < 0.0f ? -1.0 : static_cast<double>(so.start_budget);
  cfg.batch_aware = batch_aware;
  cfg.draft_free = so.mode == DraftMode::Ngram;
  return std::make_unique<AdaptivePolicy>(costs ? *costs : CostModel::assumed_default(), cfg,
                                          costs ? std::move(overhead) : nullptr, costs ? std::move(shapes) : nullptr);
}

}  // namespace

const std::vector<std::string>& policy_names() {
  static const std::vector<std::string> names = {"fixed", "confidence", "adaptive", "goodput"};
  return names;
}

bool is_policy_name(const std::string& name) {
  const auto& n = policy_names();
  return name.empty() || std::find(n.begin(), n.end(), name) != n.end();
}

bool policy_uses_cost_model(const std::string& name) { return name == "adaptive" || name == "goodput"; }

SpeculativeOptions effective_options(const SpeculativeOptions& so) {
  SpeculativeOptions e = so;
  if (e.policy == "confidence" && e.draft_p_min <= 0.0f) e.draft_p_min = kDefaultPMin;
  return e;
}

std::unique_ptr<SpeculationPolicy> make_policy(const SpeculativeOptions& so, const CostModel* costs,
                                               std::shared_ptr<OverheadTracker> overhead,
                                               std::shared_ptr<ShapeChoice> shapes) {
  const std::string& p = so.policy;
  if (p.empty() || p == "fixed") return std::make_unique<FixedPolicy>();
  if (p == "confidence") return std::make_unique<FixedPolicy>("confidence");
  if (p == "adaptive") return make_adaptive(so, costs, false, std::move(overhead), std::move(shapes));
  if (p == "goodput") return make_adaptive(so, costs, true, std::move(overhead), std::move(shapes));
  throw std::invalid_argument("unknown speculation policy '" + p + "' (use fixed, confidence, adaptive or goodput)");
}

}  // namespace tandem
