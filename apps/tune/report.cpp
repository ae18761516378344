#include "apps/tune/report.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <map>
#include <tuple>

#include "apps/tune/svg_plot.hpp"
#include "policies/factory.hpp"

namespace tandem::cli {
namespace json = boost::json;

namespace {

std::string fmt(double v, int prec = 3) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

std::string temp_name(float t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "T=%g", t);
  return buf;
}

double tidy(float v) { return std::round(static_cast<double>(v) * 1e6) / 1e6; }

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::map<std::string, double> per_category(const ConfigResult& c) {
  std::map<std::string, std::pair<double, int>> acc;
  for (const auto& p : c.prompts) {
    acc[p.category].first += p.speedup;
    ++acc[p.category].second;
  }
  std::map<std::string, double> out;
  for (const auto& [k, v] : acc) out[k] = v.first / v.second;
  return out;
}

}  // namespace

double r_model(const ConfigResult& c, const CostModel& costs) {
  double sum = 0, n = 0;
  const auto& steps = c.metrics.steps_per_k;
  for (size_t k = 1; k < steps.size(); ++k) {
    sum += steps[k] * costs.r(static_cast<int32_t>(k));
    n += steps[k];
  }
  return n > 0 ? sum / n : 1.0;
}

std::string report_json(const TuneReport& r) {
  json::object o;
  o["format"] = "tandem-tune-report";
  o["version"] = 1;
  o["created"] = r.created;
  o["target"] = r.target;
  o["draft"] = r.draft;
  o["backend"] = r.backend;
  o["n_tokens"] = r.n_tokens;
  o["reps"] = r.reps;
  o["draft_vocab"] = r.draft_vocab;
  o["draft_vocab_counts"] = r.draft_vocab_counts;
  o["draft_type"] = r.draft_type;
  o["elapsed_s"] = r.elapsed_s;
  json::array prompts;
  for (const auto& p : r.prompts) prompts.push_back(json::object{{"category", p.category}, {"text", p.text}});
  o["prompts"] = std::move(prompts);
  o["cost_model"] = r.costs ? json::parse(r.costs->to_json()) : json::value(nullptr);
  json::array results;
  for (const ConfigResult& c : r.results) {
    json::object e;
    e["temp"] = tidy(c.temp);
    e["draft_vocab"] = c.draft_vocab;
    e["draft_type"] = c.draft_type;
    e["policy"] = c.policy;
    e["k"] = c.k;
    e["tree_width"] = c.tree_width;
    e["tokens"] = c.tokens;
    e["tokens_per_s"] = c.tokens_per_s();
    e["ar_tokens_per_s"] = c.ar_tokens_per_s();
    e["speedup"] = c.speedup();
    e["e2e_speedup"] = c.e2e_speedup();
    e["cpu_speedup"] = c.cpu_speedup();
    e["min_prompt_speedup"] = c.min_prompt_speedup();
    e["acceptance_rate"] = c.metrics.acceptance_rate();
    e["alpha"] = c.alpha();
    e["mean_accepted_length"] = c.metrics.mean_accepted_length();
    e["acceptance_per_position"] = json::value_from(c.acceptance_per_position());
    e["c"] = c.c();
    e["r_measured"] = c.r_measured();
    e["predicted_speedup_r1"] = c.predicted_r1();
    if (r.costs) {
      e["r_model"] = r_model(c, *r.costs);
      e["predicted_speedup"] = c.predicted(*r.costs);
      e["gap"] = c.speedup() - c.predicted(*r.costs);
    } else {
      e["r_model"] = nullptr;
      e["predicted_speedup"] = nullptr;
      e["gap"] = nullptr;
    }
    if (c.replayed > 0.0) {
      e["replayed_speedup"] = c.replayed;
    } else {
      e["replayed_speedup"] = nullptr;
    }
    e["steps_per_k"] = json::value_from(c.metrics.steps_per_k);
    e["steps_off_fraction"] = c.steps_off_fraction();
    json::object cats;
    for (const auto& [k, v] : per_category(c)) cats[k] = v;
    e["speedup_per_category"] = std::move(cats);
    json::array per, per_cpu;
    for (const auto& p : c.prompts) {
      per.push_back(p.speedup);
      per_cpu.push_back(p.cpu_speedup);
    }
    e["speedup_per_prompt"] = std::move(per);
    e["cpu_speedup_per_prompt"] = std::move(per_cpu);
    e["drafts"] = c.metrics.drafts;
    e["drafted_tokens"] = c.metrics.drafted_tokens;
    e["accepted_tokens"] = c.metrics.accepted_tokens;
    results.push_back(std::move(e));
  }
  o["results"] = std::move(results);
  json::array recs;
  for (const Recommendation& rc : r.recommendations)
    recs.push_back(json::object{
        {"temp", tidy(rc.temp)}, {"draft_vocab", rc.draft_vocab}, {"draft_type", rc.draft_type}, {"policy", rc.policy}, {"k", rc.k}, {"tree_width", rc.tree_width}, {"speedup", rc.speedup}, {"alpha", rc.alpha},
        {"off_fraction", rc.off_fraction}});
  o["recommendations"] = std::move(recs);
  json::array conc;
  for (const ConcurrencyResult& c : r.concurrency)
    conc.push_back(json::object{{"temp", tidy(c.temp)}, {"policy", c.policy}, {"k", c.k}, {"streams", c.streams},
                                {"tokens", c.tokens}, {"plain_tokens_per_s", c.plain_tok_s},
                                {"tokens_per_s", c.spec_tok_s}, {"ratio", c.ratio()},
                                {"drafted_tokens", c.metrics.drafted_tokens},
                                {"accepted_tokens", c.metrics.accepted_tokens}});
  if (!conc.empty()) o["concurrency"] = std::move(conc);
  return json::serialize(o);
}

std::string report_csv(const TuneReport& r) {
  std::string s =
      "temp,policy,k,tokens,tokens_per_s,ar_tokens_per_s,speedup,e2e_speedup,cpu_speedup,min_prompt_speedup,"
      "acceptance_rate,"
      "alpha,mean_accepted_length,c,r_model,r_measured,predicted_speedup_r1,predicted_speedup,gap,"
      "steps_off_fraction,acceptance_per_position,draft_vocab,draft_type,replayed_speedup,tree_width\n";
  for (const ConfigResult& c : r.results) {
    std::string acc;
    for (double a : c.acceptance_per_position()) {
      if (!acc.empty()) acc += ';';
      acc += fmt(a, 4);
    }
    const bool cm = r.costs != nullptr;
    s += fmt(c.temp, 2) + "," + c.policy + "," + std::to_string(c.k) + "," + std::to_string(c.tokens) + "," +
         fmt(c.tokens_per_s()) + "," + fmt(c.ar_tokens_per_s()) + "," + fmt(c.speedup(), 4) + "," +
         fmt(c.e2e_speedup(), 4) + "," + fmt(c.cpu_speedup(), 4) + "," + fmt(c.min_prompt_speedup(), 4) + "," + fmt(c.metrics.acceptance_rate(), 4) +
         "," + fmt(c.alpha(), 4) + "," + fmt(c.metrics.mean_accepted_length(), 4) + "," + fmt(c.c(), 4) + "," +
         (cm ? fmt(r_model(c, *r.costs), 4) : "") + "," + fmt(c.r_measured(), 4) + "," + fmt(c.predicted_r1(), 4) +
         "," + (cm ? fmt(c.predicted(*r.costs), 4) : "") + "," +
         (cm ? fmt(c.speedup() - c.predicted(*r.costs), 4) : "") + "," + fmt(c.steps_off_fraction(), 4) + "," + acc +
         "," + std::to_string(c.draft_vocab) + "," + c.draft_type + "," + (c.replayed > 0.0 ? fmt(c.replayed, 4) : "") +
         "," + std::to_string(c.tree_width) +
         "\n";
  }
  return s;
}

std::string report_svg(const TuneReport& r) {
  // One configuration a series: a policy with a draft variant (vocabulary, weight type). The
  // colour says the variant, the style the policy (fixed: a solid line, confidence: dashed,
  // adaptive: filled points, goodput: hollow ones), the same in every panel, each labelled;
  // the recommended configuration is circled.
  struct Config {
    std::string policy;
    int32_t vocab;
    std::string type;
    int32_t tree_width;
    bool operator<(const Config& o) const {
      return std::tie(policy, vocab, type, tree_width) < std::tie(o.policy, o.vocab, o.type, o.tree_width);
    }
  };
  std::map<std::pair<int32_t, std::string>, int> variants;
  for (const ConfigResult& c : r.results) variants.emplace(std::make_pair(c.draft_vocab, c.draft_type), 0);
  {
    int i = 0;
    for (auto& [v, col] : variants) col = i++;
  }
  const auto policy_dash = [](const std::string& policy) {
    return policy == "confidence" ? std::string("7 4") : policy == "goodput" ? std::string("2 3") : std::string();
  };
  const auto variant_name = [&](int32_t vocab, const std::string& type) {
    if (variants.size() <= 1) return std::string();
    std::string v = vocab > 0 ? "vocab " + std::to_string(vocab) : std::string("whole vocab");
    return v + ", " + (type == "keep" ? std::string("as stored") : type);
  };
  const auto label = [&](const std::string& policy, int32_t vocab, const std::string& type, int32_t tree_width) {
    const std::string v = variant_name(vocab, type);
    const std::string p = tree_width > 1 ? policy + " tree " + std::to_string(tree_width) : policy;
    return v.empty() ? p : p + ", " + v;
  };
  const double w = 900, h = 360, legend = 250;
  std::vector<std::string> parts;
  double y = 44;
  for (size_t ti = 0; ti < r.temps.size(); ++ti) {
    const float t = r.temps[ti];
    Chart speed;
    speed.title = "Speedup over plain decoding, " + temp_name(t);
    speed.x_label = "k (draft tokens per step; adaptive policies: largest k allowed)";
    speed.y_label = "decode speedup";
    speed.reference_y = 1.0;
    speed.integer_x = true;
    speed.legend_width = legend;
    std::map<Config, Series> by_config;
    for (const ConfigResult& c : r.results) {
      if (c.temp != t) continue;
      const Config key{c.policy, c.draft_vocab, c.draft_type, c.tree_width};
      Series& s = by_config[key];
      s.name = label(c.policy, c.draft_vocab, c.draft_type, c.tree_width);
      s.markers_only = policy_uses_cost_model(c.policy) || c.tree_width > 1;  // (one k each)
      s.color = variants[{c.draft_vocab, c.draft_type}];
      s.dash = c.tree_width > 1 ? "9 3 2 3" : policy_dash(c.policy);
      s.points.emplace_back(c.k, c.speedup());
    }
    for (auto& [key, s] : by_config) {
      std::sort(s.points.begin(), s.points.end());
      speed.series.push_back(std::move(s));
    }
    for (const Recommendation& rc : r.recommendations) {
      if (rc.temp != t || rc.policy == "none") continue;
      for (const ConfigResult& c : r.results)
        if (c.temp == t && c.policy == rc.policy && c.k == rc.k && c.draft_vocab == rc.draft_vocab &&
            c.draft_type == rc.draft_type && c.tree_width == rc.tree_width)
          speed.markers.push_back({static_cast<double>(c.k), c.speedup(),
                                   "recommended: " + rc.policy + " k=" + std::to_string(rc.k) +
                                       (rc.tree_width > 1 ? " tree " + std::to_string(rc.tree_width) : "")});
    }
    parts.push_back(render_chart(speed, 0, y, w, h));
    y += h;
  }
  // Acceptance at each draft position: for every draft variant, its fixed-k run that drafted
  // furthest, at each temperature (line style).
  Chart acc;
  acc.title = "Acceptance at each draft position";
  acc.x_label = "draft position";
  acc.y_label = "accepted / drafted";
  acc.y_from_zero = true;
  acc.integer_x = true;
  acc.legend_width = legend;
  const char* dashes[] = {"", "7 4", "2 3", "10 3 2 3"};
  int vi = 0;
  for (const auto& [variant, unused] : variants) {
    (void)unused;
    for (size_t ti = 0; ti < r.temps.size(); ++ti) {
      const ConfigResult* widest = nullptr;
      for (const ConfigResult& c : r.results)
        if (c.temp == r.temps[ti] && c.draft_vocab == variant.first && c.draft_type == variant.second &&
            !policy_uses_cost_model(c.policy) && c.tree_width == 1 &&
            (!widest || c.acceptance_per_position().size() > widest->acceptance_per_position().size()))
          widest = &c;
      if (!widest) continue;
      Series a;
      const std::string v = variant_name(variant.first, variant.second);
      a.name = (v.empty() ? widest->policy + " k=" + std::to_string(widest->k) : v) + ", " + temp_name(r.temps[ti]);
      a.color = vi;
      a.dash = dashes[ti % 4];
      const auto per = widest->acceptance_per_position();
      for (size_t i = 0; i < per.size(); ++i) a.points.emplace_back(static_cast<double>(i + 1), per[i]);
      acc.series.push_back(std::move(a));
    }
    ++vi;
  }
  parts.push_back(render_chart(acc, 0, y, w, h));
  y += h;
  // Two header lines: the model names can be long.
  // (Appended piece by piece: `"literal" + std::string&&` trips a GCC 12 -Wrestrict false positive.)
  std::string title = "tandem tune: target ";
  title += base_name(r.target);
  title += ", draft ";
  title += base_name(r.draft);
  std::string sub = r.backend;
  sub += ", ";
  sub += std::to_string(r.n_tokens);
  sub += " tokens per run, ";
  sub += std::to_string(r.prompts.size());
  sub += " prompts";
  std::string header = "<text x=\"20\" y=\"18\" font-size=\"12\">";
  header += xml_escape(title);
  header += "</text>\n<text x=\"20\" y=\"34\" font-size=\"12\">";
  header += xml_escape(sub);
  header += "</text>\n";
  parts.insert(parts.begin(), header);
  return svg_document(w, y, parts);
}

namespace {
// The table's vocab column: the vocabulary ("all" or its size), and "/q4_0" when the draft's
// weights were re-quantized.
std::string draft_variant(const ConfigResult& c) {
  return (c.draft_vocab > 0 ? std::to_string(c.draft_vocab) : std::string("all")) +
         (c.draft_type != "keep" ? "/" + c.draft_type : std::string());
}
}  // namespace

void print_table(const TuneReport& r, std::FILE* out) {
  std::fprintf(out, "target %s\ndraft  %s\nbackend %s, %d tokens per run, %zu prompts x %d\n\n", r.target.c_str(),
               r.draft.c_str(), r.backend.c_str(), r.n_tokens, r.prompts.size(), r.reps);
  std::fprintf(out, "%-5s %11s %-10s %2s %7s %7s %7s %6s %6s %6s %6s %6s %5s %5s %5s %5s %6s %6s %6s %5s %6s\n", "temp",
               "vocab", "policy", "k", "tok/s", "plain", "speedup", "worst", "e2e", "cpu", "acc", "alpha", "E", "c", "r(k)", "r_ms", "S(r=1)", "S_pred",
               "gap", "off%", "replay");
  for (const ConfigResult& c : r.results) {
    const bool cm = r.costs != nullptr;
    const std::string off = policy_uses_cost_model(c.policy) ? fmt(100.0 * c.steps_off_fraction(), 1) : "-";
    const std::string policy = c.tree_width > 1 ? c.policy + "/t" + std::to_string(c.tree_width) : c.policy;
    std::fprintf(out,
                 "%-5.2f %11s %-10s %2d %7.2f %7.2f %7.3f %6.3f %6.3f %6.3f %6.3f %6.3f %5.2f %5.3f %5s %5.2f %6.2f %6s %6s %5s %6s\n",
                 c.temp, draft_variant(c).c_str(), policy.c_str(), c.k, c.tokens_per_s(), c.ar_tokens_per_s(), c.speedup(),
                 c.min_prompt_speedup(), c.e2e_speedup(), c.cpu_speedup(), c.metrics.acceptance_rate(), c.alpha(), c.metrics.mean_accepted_length(),
                 c.c(), cm ? fmt(r_model(c, *r.costs), 2).c_str() : "-", c.r_measured(), c.predicted_r1(),
                 cm ? fmt(c.predicted(*r.costs), 2).c_str() : "-",
                 cm ? fmt(c.speedup() - c.predicted(*r.costs), 2).c_str() : "-", off.c_str(),
                 c.replayed > 0.0 ? fmt(c.replayed, 3).c_str() : "-");
  }
  std::fprintf(out,
               "\nspeedup: decode tokens/s over plain decoding of the same prompts, run in between; worst: the "
               "worst prompt;\ne2e: the same over prefill + decode time; cpu: over decode CPU time (robust to machine "
               "load with -t 1);\nacc: accepted/drafted; alpha: per-token acceptance (tried positions); E: mean "
               "accepted length;\nc: draft forward / plain target pass; r(k): cost model, r_ms: measured "
               "verification pass / plain pass;\nS(r=1) = E/(k·c+1), S_pred = E/(k·c+r(k)) over the k each step "
               "chose; gap = speedup − S_pred;\noff%%: adaptive policies' steps with speculation off (k = 0); vocab: the "
               "draft's reduced vocabulary (/type: its re-quantized weights); policy/tW: token trees of width W;\nreplay: greedy, the speedup the "
               "configuration gets replayed over the fixed k = max runs' acceptance under the cost model\n(no timing "
               "noise; started at once, no overhead beyond the passes; bench_policies replay).\n\n");
  if (r.draft_type != "auto") std::fprintf(out, "recommended draft weights: --draft-type %s\n", r.draft_type.c_str());
  if (r.draft_vocab > 0)
    std::fprintf(out, "recommended draft vocabulary: --draft-vocab %d%s%s\n", r.draft_vocab,
                 r.draft_vocab_counts.empty() ? "" : " --draft-vocab-counts ", r.draft_vocab_counts.c_str());
  for (const Recommendation& rc : r.recommendations) {
    if (rc.policy == "none")
      std::fprintf(out, "recommended at T=%.2f: plain decoding (no configuration beat it)\n", rc.temp);
    else
      std::fprintf(out, "recommended at T=%.2f: --policy %s --draft-max %d%s (speedup %.3f%s)\n", rc.temp,
                   rc.policy.c_str(), rc.k,
                   rc.tree_width > 1 ? (" --tree-width " + std::to_string(rc.tree_width)).c_str() : "", rc.speedup,
                   rc.off_fraction > 0.99 ? "; it kept speculation off: plain decoding, measured with noise" : "");
  }
  if (!r.concurrency.empty()) {
    std::fprintf(out,
                 "\nin the server's batches (tune --concurrency): output tokens/s of all requests, plain decoding run "
                 "before and after each\n| T | policy | k | streams | plain tok/s | tok/s | ratio | acceptance |\n"
                 "|---|---|---|---|---|---|---|---|\n");
    for (const ConcurrencyResult& c : r.concurrency)
      std::fprintf(out, "| %.2f | %s | %d | %d | %.1f | %.1f | %.2fx | %s |\n", c.temp, c.policy.c_str(), c.k,
                   c.streams, c.plain_tok_s, c.spec_tok_s, c.ratio(),
                   c.metrics.drafted_tokens ? std::to_string(c.metrics.acceptance_rate()).substr(0, 4).c_str() : "-");
  }
}

}  // namespace tandem::cli
