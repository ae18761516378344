// `tandem tune`'s outputs: the report as JSON (everything), CSV (one row per
// configuration), a text table for the terminal, and the SVG plot (speedup against k per
// temperature; acceptance at each draft position).
#pragma once
#include <cstdio>
#include <string>

#include "apps/tune/runner.hpp"

namespace tandem::cli {

std::string report_json(const TuneReport& r);
std::string report_csv(const TuneReport& r);
std::string report_svg(const TuneReport& r);
void print_table(const TuneReport& r, std::FILE* out);

// The cost model's r(k) averaged over the steps that drafted (1 when no step drafted).
double r_model(const ConfigResult& c, const CostModel& costs);

}  // namespace tandem::cli
