// Small line charts as SVG, drawn by hand (no plotting library): axes with "nice" ticks,
// one polyline (or markers) per series, a legend, an optional horizontal reference line,
// rings around points called out. Series past the palette's colours repeat them dashed.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::cli {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in order
  bool markers_only = false;                      // no line: a single configuration
  int color = -1;                                 // palette index; -1 → the series' position
  std::string dash;                               // SVG stroke-dasharray, "" = solid
};

// A point called out on the chart (the recommended configuration): a ring and a legend line.
struct Marker {
  double x = 0.0, y = 0.0;
  std::string label;
};

struct Chart {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  std::vector<Marker> markers;
  double legend_width = 150;  // pixels right of the plot for the legend
  std::optional<double> reference_y;  // e.g. speedup 1.0
  bool y_from_zero = false;
  bool integer_x = false;  // x ticks at whole numbers only
};

std::string xml_escape(std::string_view s);
// Ticks covering [lo, hi] at 1, 2 or 5 × 10^n steps.
std::vector<double> nice_ticks(double lo, double hi, int target_count = 5, double min_step = 0.0);
// The chart as an SVG <g> element placed at (x, y), w × h pixels.
std::string render_chart(const Chart& chart, double x, double y, double w, double h);
// A complete SVG document holding the given elements.
std::string svg_document(double w, double h, const std::vector<std::string>& elements);

}  // namespace tandem::cli
