#include "apps/tune/svg_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace tandem::cli {
namespace {

// Colour-blind-safe palette (Okabe–Ito).
constexpr const char* kColors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

std::string tick_label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", std::fabs(v) < 1e-12 ? 0.0 : v);
  return buf;
}

}  // namespace

std::string xml_escape(std::string_view s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::vector<double> nice_ticks(double lo, double hi, int target_count, double min_step) {
  if (!(hi > lo)) {
    hi = lo + 1.0;
  }
  const double raw = (hi - lo) / std::max(1, target_count);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  step = std::max(step, min_step);
  std::vector<double> t;
  for (double v = std::floor(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push_back(v);
  if (t.empty() || t.back() < hi - step * 1e-9) t.push_back(t.empty() ? lo : t.back() + step);
  return t;
}

std::string render_chart(const Chart& c, double x, double y, double w, double h) {
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin, ymin = xmin, ymax = -xmin;
  for (const Series& s : c.series)
    for (auto [px, py] : s.points) {
      if (!std::isfinite(px) || !std::isfinite(py)) continue;
      xmin = std::min(xmin, px);
      xmax = std::max(xmax, px);
      ymin = std::min(ymin, py);
      ymax = std::max(ymax, py);
    }
  if (!std::isfinite(xmin)) xmin = 0, xmax = 1, ymin = 0, ymax = 1;
  if (c.reference_y) ymin = std::min(ymin, *c.reference_y), ymax = std::max(ymax, *c.reference_y);
  if (c.y_from_zero) ymin = std::min(0.0, ymin);
  if (xmax - xmin < 1e-9) xmin -= 0.5, xmax += 0.5;
  if (ymax - ymin < 1e-9) ymin -= 0.5, ymax += 0.5;
  const std::vector<double> xt = nice_ticks(xmin, xmax, 8, c.integer_x ? 1.0 : 0.0), yt = nice_ticks(ymin, ymax, 5);
  xmin = std::min(xmin, xt.front()), xmax = std::max(xmax, xt.back());
  ymin = std::min(ymin, yt.front()), ymax = std::max(ymax, yt.back());

  // Plot area inside the panel: room for the title, axis labels, ticks and the legend.
  const double left = x + 60, top = y + 34, right = x + w - c.legend_width, bottom = y + h - 46;
  auto sx = [&](double v) { return left + (v - xmin) / (xmax - xmin) * (right - left); };
  auto sy = [&](double v) { return bottom - (v - ymin) / (ymax - ymin) * (bottom - top); };

  std::string g = "<g class=\"chart\">\n";
  g += "<text class=\"title\" x=\"" + num((left + right) / 2) + "\" y=\"" + num(y + 20) +
       "\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">" + xml_escape(c.title) + "</text>\n";
  g += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(right - left) + "\" height=\"" +
       num(bottom - top) + "\" fill=\"none\" stroke=\"#444\"/>\n";
  for (double v : xt) {
    g += "<line x1=\"" + num(sx(v)) + "\" y1=\"" + num(bottom) + "\" x2=\"" + num(sx(v)) + "\" y2=\"" + num(bottom + 5) +
         "\" stroke=\"#444\"/>\n";
    g += "<text x=\"" + num(sx(v)) + "\" y=\"" + num(bottom + 18) + "\" text-anchor=\"middle\" font-size=\"11\">" +
         tick_label(v) + "</text>\n";
  }
  for (double v : yt) {
    g += "<line x1=\"" + num(left) + "\" y1=\"" + num(sy(v)) + "\" x2=\"" + num(right) + "\" y2=\"" + num(sy(v)) +
         "\" stroke=\"#ddd\"/>\n";
    g += "<text x=\"" + num(left - 8) + "\" y=\"" + num(sy(v) + 4) + "\" text-anchor=\"end\" font-size=\"11\">" +
         tick_label(v) + "</text>\n";
  }
  g += "<text x=\"" + num((left + right) / 2) + "\" y=\"" + num(bottom + 38) +
       "\" text-anchor=\"middle\" font-size=\"12\">" + xml_escape(c.x_label) + "</text>\n";
  g += "<text x=\"" + num(x + 16) + "\" y=\"" + num((top + bottom) / 2) + "\" text-anchor=\"middle\" font-size=\"12\" " +
       "transform=\"rotate(-90 " + num(x + 16) + " " + num((top + bottom) / 2) + ")\">" + xml_escape(c.y_label) +
       "</text>\n";
  if (c.reference_y) {
    g += "<line class=\"reference\" x1=\"" + num(left) + "\" y1=\"" + num(sy(*c.reference_y)) + "\" x2=\"" +
         num(right) + "\" y2=\"" + num(sy(*c.reference_y)) + "\" stroke=\"#888\" stroke-dasharray=\"6 4\"/>\n";
  }
  constexpr size_t kPalette = sizeof kColors / sizeof kColors[0];
  constexpr const char* kRepeatDashes[] = {"", "7 4", "2 3", "10 3 2 3"};
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& s = c.series[i];
    const size_t ci = s.color >= 0 ? static_cast<size_t>(s.color) : i;
    const std::string color = kColors[ci % kPalette];
    // Past the palette a colour comes back with a dash of its own, so no two series look alike.
    const std::string dash_pattern = !s.dash.empty() ? s.dash : kRepeatDashes[(ci / kPalette) % 4];
    const std::string dash = dash_pattern.empty() ? "" : " stroke-dasharray=\"" + xml_escape(dash_pattern) + "\"";
    std::string pts;
    for (auto [px, py] : s.points)
      if (std::isfinite(px) && std::isfinite(py)) pts += num(sx(px)) + "," + num(sy(py)) + " ";
    if (!s.markers_only && s.points.size() > 1)
      g += "<polyline class=\"series\" points=\"" + pts + "\" fill=\"none\" stroke=\"" + color +
           "\" stroke-width=\"2\"" + dash + "/>\n";
    for (auto [px, py] : s.points)
      if (std::isfinite(px) && std::isfinite(py))
        g += "<circle cx=\"" + num(sx(px)) + "\" cy=\"" + num(sy(py)) + "\" r=\"" + (s.markers_only ? "5" : "3") +
             "\" fill=\"" + (dash_pattern.empty() ? color : "white") + "\" stroke=\"" + color + "\" stroke-width=\"2\"/>\n";
    const double ly = top + 8 + 18 * static_cast<double>(i);
    if (s.markers_only)
      g += "<circle cx=\"" + num(right + 18) + "\" cy=\"" + num(ly) + "\" r=\"5\" fill=\"" +
           (dash_pattern.empty() ? color : "white") + "\" stroke=\"" + color + "\" stroke-width=\"2\"/>\n";
    else
      g += "<line x1=\"" + num(right + 8) + "\" y1=\"" + num(ly) + "\" x2=\"" + num(right + 26) + "\" y2=\"" + num(ly) +
           "\" stroke=\"" + color + "\" stroke-width=\"2\"" + dash + "/>\n";
    g += "<text class=\"legend\" x=\"" + num(right + 30) + "\" y=\"" + num(ly + 4) + "\" font-size=\"11\">" +
         xml_escape(s.name) + "</text>\n";
  }
  for (size_t i = 0; i < c.markers.size(); ++i) {
    const Marker& m = c.markers[i];
    if (!std::isfinite(m.x) || !std::isfinite(m.y)) continue;
    g += "<circle class=\"marker\" cx=\"" + num(sx(m.x)) + "\" cy=\"" + num(sy(m.y)) +
         "\" r=\"9\" fill=\"none\" stroke=\"#000\" stroke-width=\"2.5\"/>\n";
    const double ly = top + 8 + 18 * static_cast<double>(c.series.size() + i);
    g += "<circle cx=\"" + num(right + 18) + "\" cy=\"" + num(ly) + "\" r=\"6\" fill=\"none\" stroke=\"#000\" "
         "stroke-width=\"2.5\"/>\n";
    g += "<text class=\"legend\" x=\"" + num(right + 30) + "\" y=\"" + num(ly + 4) +
         "\" font-size=\"11\" font-weight=\"bold\">" + xml_escape(m.label) + "</text>\n";
  }
  g += "</g>\n";
  return g;
}

std::string svg_document(double w, double h, const std::vector<std::string>& elements) {
  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                  num(w) + "\" height=\"" + num(h) + "\" viewBox=\"0 0 " + num(w) + " " + num(h) +
                  "\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  for (const std::string& e : elements) s += e;
  s += "</svg>\n";
  return s;
}

}  // namespace tandem::cli
