// Names of the public speculative-decoding options (CLI flags, server fields, configs).
#include <algorithm>
#include <stdexcept>

#include "tandem/speculative.hpp"

namespace tandem {

const char* to_string(VerifyMode m) { return m == VerifyMode::Coupled ? "coupled" : "rejection"; }

VerifyMode parse_verify_mode(const std::string& name) {
  if (name == "rejection") return VerifyMode::Rejection;
  if (name == "coupled") return VerifyMode::Coupled;
  throw std::invalid_argument("verification mode must be rejection or coupled, not '" + name + "'");
}

int32_t SpeculativeOptions::tree_budget() const {
  if (tree_width < 2) return 0;
  return tree_nodes > 0 ? tree_nodes : std::min(kMaxTreeNodes, tree_width * std::max(draft_max, 1));
}

}  // namespace tandem
