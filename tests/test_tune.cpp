// `tandem tune` end to end on tiny fixture models (a target in F32 and the same weights in
// F16 as a close draft): the measurement run, its JSON / CSV / SVG outputs, the config
// file and `generate --config`'s reading of it; and the small parsers.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "apps/tune/config.hpp"
#include "apps/tune/report.hpp"
#include "apps/tune/runner.hpp"
#include "apps/tune/svg_plot.hpp"
#include "engine/runtime/engine_calibration.hpp"
#include "policies/cost_model.hpp"
#include "tandem/engine.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/tiny_model.hpp"

namespace tandem::cli {
namespace {
namespace json = boost::json;

// Target (F32) and a close draft (the same weights in F16).
const test::TinyPair& models() {
  static const test::TinyPair m = [] {
    test::TinyModelSpec t;
    t.arch = "qwen2";
    t.tied_embeddings = false;
    t.seed = 11;
    return test::write_tiny_pair(test::scratch_dir("tune-models"), t);
  }();
  return m;
}

std::unique_ptr<Engine> load_pair() {
  LoadOptions o;
  o.model_path = models().target;
  o.draft_model_path = models().close_draft;
  o.threads = 1;
  o.context = 256;
  return Engine::load(o);
}

// Checks that every tag is closed in order (self-closing tags aside) and counts elements.
bool well_formed(const std::string& xml, std::map<std::string, int>& counts) {
  std::vector<std::string> stack;
  size_t i = 0;
  while ((i = xml.find('<', i)) != std::string::npos) {
    const size_t end = xml.find('>', i);
    if (end == std::string::npos) return false;
    std::string tag = xml.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty() || tag[0] == '?' || tag[0] == '!') continue;
    if (tag[0] == '/') {
      if (stack.empty() || stack.back() != tag.substr(1)) return false;
      stack.pop_back();
      continue;
    }
    const bool self_closing = tag.back() == '/';
    const std::string name = tag.substr(0, tag.find_first_of(" /"));
    ++counts[name];
    if (!self_closing) stack.push_back(name);
  }
  return stack.empty();
}

std::vector<std::string> split_line(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.push_back("");
  return out;
}

TEST(Tune, ParsesListsAndPromptFiles) {
  EXPECT_EQ(parse_k_list("1..4"), (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(parse_k_list("4,1, 2,2"), (std::vector<int32_t>{1, 2, 4}));
  EXPECT_EQ(parse_k_list("1..2,6"), (std::vector<int32_t>{1, 2, 6}));
  EXPECT_THROW(parse_k_list("0"), std::invalid_argument);
  EXPECT_THROW(parse_k_list("3..1"), std::invalid_argument);
  EXPECT_THROW(parse_k_list("x"), std::invalid_argument);
  EXPECT_EQ(parse_float_list("0,0.7"), (std::vector<float>{0.0f, 0.7f}));
  EXPECT_THROW(parse_float_list("-1"), std::invalid_argument);
  EXPECT_EQ(parse_name_list("fixed, adaptive"), (std::vector<std::string>{"fixed", "adaptive"}));

  const std::string dir = test::scratch_dir("tune-prompts");
  std::ofstream(dir + "/p.jsonl") << "{\"prompt\": \"a\\nb\", \"category\": \"code\"}\n\n{\"text\": \"c\"}\n";
  const auto p = load_prompts(dir + "/p.jsonl");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].text, "a\nb");
  EXPECT_EQ(p[0].category, "code");
  EXPECT_EQ(p[1].category, "file");
  std::ofstream(dir + "/p.txt") << "first\\nline\nsecond\n";
  const auto t = load_prompts(dir + "/p.txt");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].text, "first\nline");
  std::ofstream(dir + "/bad.jsonl") << "{\"prompt\": 3}\n";
  EXPECT_THROW(load_prompts(dir + "/bad.jsonl"), std::runtime_error);
  EXPECT_THROW(load_prompts(dir + "/missing.txt"), std::runtime_error);
  EXPECT_GE(builtin_prompts().size(), 9u);
}

TEST(Tune, SvgChartIsWellFormed) {
  Chart c;
  c.title = "a < b & c";
  Series s1, s2;
  s1.name = "s1";
  s1.points = {{1, 0.5}, {2, 1.5}};
  s2.name = "s2";
  s2.points = {{3, 1.0}};
  s2.markers_only = true;
  c.series = {s1, s2};
  c.reference_y = 1.0;
  const std::string svg = svg_document(400, 300, {render_chart(c, 0, 0, 400, 300)});
  std::map<std::string, int> n;
  EXPECT_TRUE(well_formed(svg, n)) << svg;
  EXPECT_EQ(n["svg"], 1);
  EXPECT_EQ(n["polyline"], 1);
  EXPECT_EQ(n["circle"], 4);  // three points and the marker series's legend entry
  EXPECT_NE(svg.find("a &lt; b &amp; c"), std::string::npos);
  const auto ticks = nice_ticks(0.13, 0.97);
  EXPECT_LE(ticks.front(), 0.13);
  EXPECT_GE(ticks.back(), 0.97);
}

// The chart of a tune over two draft vocabularies and two weight types: every configuration
// (policy × vocabulary × weight type) its own look (colour: the draft variant; line, dash or
// points: the policy) and its own legend line, one
// speedup panel per temperature, the recommendation circled and named; rsvg-convert renders
// it to a PNG of the document's size (the PNG is written next to the test's scratch files, to
// look at).
TEST(Tune, ChartTellsEveryConfigurationApartAndMarksTheRecommendation) {
  TuneReport rep;
  rep.target = "/m/target.gguf";
  rep.draft = "/m/draft.gguf";
  rep.backend = "cpu";
  rep.n_tokens = 64;
  rep.temps = {0.0f, 0.7f};
  int configs = 0;
  for (int32_t vocab : {0, 16384})
    for (const char* type : {"keep", "q4_0"})
      for (const char* policy : {"fixed", "adaptive"}) {
        ++configs;
        for (float t : rep.temps)
          for (int32_t k = 1; k <= (std::string(policy) == "fixed" ? 4 : 1); ++k) {
            ConfigResult c;
            c.draft_vocab = vocab;
            c.draft_type = type;
            c.policy = policy;
            c.k = k == 1 && std::string(policy) == "adaptive" ? 4 : k;
            c.temp = t;
            c.tokens = c.ar_tokens = 100;
            c.ar_decode_ms = 1000;
            c.decode_ms = 1000.0 / (1.0 + 0.05 * k + 0.1 * (vocab > 0) + 0.07 * (std::string(type) == "q4_0") + t * 0.1);
            c.metrics.drafted_per_position = {10, 10, 10, 10};
            c.metrics.accepted_per_position = {8, 6, 4, 2};
            rep.results.push_back(c);
          }
      }
  Recommendation rec;
  rec.temp = 0.0f;
  rec.policy = "fixed";
  rec.k = 4;
  rec.draft_vocab = 16384;
  rec.draft_type = "q4_0";
  rep.recommendations = {rec};
  const std::string svg = report_svg(rep);
  std::map<std::string, int> n;
  ASSERT_TRUE(well_formed(svg, n)) << svg;
  // Two speedup panels (one per temperature) and the acceptance chart.
  EXPECT_NE(svg.find("Speedup over plain decoding, T=0<"), std::string::npos);
  EXPECT_NE(svg.find("Speedup over plain decoding, T=0.7<"), std::string::npos);
  // Every configuration's legend line, in each panel.
  for (const char* label : {"fixed, whole vocab, as stored", "fixed, vocab 16384, q4_0",
                            "adaptive, vocab 16384, as stored", "adaptive, whole vocab, q4_0"}) {
    size_t count = 0;
    for (size_t at = svg.find(std::string(">") + label + "<"); at != std::string::npos;
         at = svg.find(std::string(">") + label + "<", at + 1))
      ++count;
    EXPECT_EQ(count, 2u) << label;
  }
  // The lines of one panel: each configuration a distinct (colour, dash) pair.
  const size_t panel_end = svg.find("Speedup over plain decoding, T=0.7<");
  std::set<std::string> styles;
  size_t lines = 0;
  for (size_t at = svg.find("<polyline class=\"series\""); at != std::string::npos && at < panel_end;
       at = svg.find("<polyline class=\"series\"", at + 1)) {
    const size_t end = svg.find("/>", at);
    const std::string tag = svg.substr(at, end - at);
    const size_t st = tag.find("stroke=\""), da = tag.find("stroke-dasharray=\"");
    std::string style = tag.substr(st, tag.find('"', st + 8) - st);
    if (da != std::string::npos) style += tag.substr(da, tag.find('"', da + 18) - da);
    styles.insert(style);
    ++lines;
  }
  EXPECT_EQ(lines, static_cast<size_t>(configs / 2)) << "one line per fixed-k configuration";
  ASSERT_NE(panel_end, std::string::npos);
  EXPECT_EQ(styles.size(), lines) << "two configurations drawn alike";
  EXPECT_NE(svg.find("recommended: fixed k=4"), std::string::npos);
  EXPECT_EQ(n["circle"] > 0, true);
  EXPECT_NE(svg.find("class=\"marker\""), std::string::npos);

  // Rendered: rsvg-convert (librsvg2-bin, scripts/setup.sh) must be there; a machine without
  // it fails here rather than skipping the check.
  const std::string dir = test::scratch_dir("tune_chart");
  const std::string svg_path = dir + "/tune.svg", png_path = dir + "/tune.png";
  {
    std::ofstream f(svg_path);
    f << svg;
  }
  const std::string cmd = "rsvg-convert -o '" + png_path + "' '" + svg_path + "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "rsvg-convert failed or is missing (bash scripts/setup.sh installs it)";
  std::ifstream png(png_path, std::ios::binary);
  std::string head(24, '\0');
  png.read(head.data(), 24);
  ASSERT_EQ(head.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  auto be32 = [&](size_t at) {
    return (static_cast<uint32_t>(static_cast<unsigned char>(head[at])) << 24) |
           (static_cast<uint32_t>(static_cast<unsigned char>(head[at + 1])) << 16) |
           (static_cast<uint32_t>(static_cast<unsigned char>(head[at + 2])) << 8) |
           static_cast<uint32_t>(static_cast<unsigned char>(head[at + 3]));
  };
  EXPECT_EQ(be32(16), 900u);                      // width
  EXPECT_EQ(be32(20), 44u + 3u * 360u);           // height: header, two panels, acceptance
}

TEST(Tune, EndToEndOnTinyModels) {
  auto engine = load_pair();
  const std::string dir = test::scratch_dir("tune-run");
  CalibrationOptions co;
  co.k_max = 3;
  co.extra_n = {8};
  co.reps = 2;
  co.context = 8;
  co.cache_path = dir + "/cost.json";
  engine->set_cost_model(calibrate_cost_model(*engine, co));

  TuneOptions o;
  o.prompts = {{"chat", "Hello there, how are you today?"}, {"code", "def add(a, b):\n    return"}};
  o.k_values = {1, 3};
  o.temps = {0.0f, 0.8f};
  o.policies = {"fixed", "confidence", "adaptive", "goodput"};
  o.n_tokens = 12;
  o.ar_every = 2;
  int64_t last_done = 0, total = 0;
  o.progress = [&](int64_t done, int64_t all, const std::string&) {
    EXPECT_EQ(done, last_done + 1);
    last_done = done;
    total = all;
  };
  const TuneReport rep = run_tune(*engine, o);
  EXPECT_EQ(last_done, total);
  // fixed and confidence at k = 1, 3; adaptive and goodput at k = 3; per temperature.
  ASSERT_EQ(rep.results.size(), 2u * 6u);
  for (const ConfigResult& c : rep.results) {
    EXPECT_EQ(c.prompts.size(), 2u);
    EXPECT_EQ(c.tokens, 2 * 11);  // n − 1 decode tokens per prompt
    EXPECT_GT(c.speedup(), 0.0);
    EXPECT_GT(c.e2e_speedup(), 0.0);
    EXPECT_GT(c.cpu_speedup(), 0.0);
    EXPECT_GE(c.alpha(), 0.0);
    EXPECT_LE(c.alpha(), 1.0);
    EXPECT_GT(c.ar_pass_ms(), 0.0);
    EXPECT_GT(c.predicted(*rep.costs), 0.0);
    // Replayed over the greedy fixed k = 3 runs' steps: every greedy configuration but the
    // confidence policy's (its p_min needs the draft's probabilities); no sampled one.
    if (c.temp == 0.0f && c.policy != "confidence") {
      EXPECT_GT(c.replayed, 0.0) << c.policy << " k=" << c.k;
      EXPECT_LE(c.replayed, c.k + 1.0) << c.policy << " k=" << c.k;
    } else {
      EXPECT_EQ(c.replayed, 0.0) << c.policy << " k=" << c.k << " T=" << c.temp;
    }
    EXPECT_TRUE(c.metrics.steps.empty()) << "the recorded steps are not kept in the metrics";
    if (c.policy == "fixed" && c.temp == 0.0f) {
      EXPECT_GT(c.metrics.accepted_tokens, 0) << "the F16 copy should agree with its F32 original";
      EXPECT_EQ(c.acceptance_per_position().size(), static_cast<size_t>(c.k));
    }
  }
  ASSERT_EQ(rep.recommendations.size(), 2u);

  // JSON: parses, and holds what the table shows.
  const json::value j = json::parse(report_json(rep));
  const json::object& o_ = j.as_object();
  EXPECT_EQ(o_.at("format").as_string(), "tandem-tune-report");
  const json::array& results = o_.at("results").as_array();
  ASSERT_EQ(results.size(), rep.results.size());
  for (const char* key : {"temp", "policy", "k", "speedup", "alpha", "acceptance_rate", "mean_accepted_length", "c",
                          "r_model", "predicted_speedup", "predicted_speedup_r1", "gap", "acceptance_per_position",
                          "steps_per_k", "speedup_per_category", "replayed_speedup"})
    EXPECT_TRUE(results[0].as_object().contains(key)) << key;
  EXPECT_TRUE(o_.at("cost_model").is_object());
  EXPECT_EQ(o_.at("recommendations").as_array().size(), 2u);

  // CSV: a header and one row per configuration with as many cells.
  std::stringstream csv(report_csv(rep));
  std::string line;
  std::getline(csv, line);
  const auto header = split_line(line);
  for (const char* col : {"temp", "policy", "k", "speedup", "e2e_speedup", "cpu_speedup", "alpha", "c", "r_model",
                          "predicted_speedup", "gap", "acceptance_per_position", "draft_vocab", "draft_type",
                          "replayed_speedup"})
    EXPECT_NE(std::find(header.begin(), header.end(), col), header.end()) << col;
  int rows = 0;
  while (std::getline(csv, line)) {
    EXPECT_EQ(split_line(line).size(), header.size()) << line;
    ++rows;
  }
  EXPECT_EQ(rows, static_cast<int>(rep.results.size()));

  // SVG: well formed, a speedup chart per temperature and the acceptance chart, a line per
  // fixed-k policy and temperature.
  std::map<std::string, int> n;
  const std::string svg = report_svg(rep);
  EXPECT_TRUE(well_formed(svg, n));
  EXPECT_EQ(n["svg"], 1);
  EXPECT_EQ(n["g"], static_cast<int>(rep.temps.size()) + 1);
  EXPECT_GE(n["polyline"], 4);
  EXPECT_GE(n["circle"], 8);

  // The table prints without trouble.
  std::FILE* f = std::tmpfile();
  print_table(rep, f);
  EXPECT_GT(std::ftell(f), 200);
  std::fclose(f);

  // The config: written, read back, applied per temperature with explicit flags winning.
  const TandemConfig cfg = config_from_report(rep, "model");
  save_config(dir + "/tandem.json", cfg);
  const TandemConfig back = load_config(dir + "/tandem.json");
  ASSERT_EQ(back.per_temperature.size(), 2u);
  ASSERT_TRUE(back.cost_model);
  EXPECT_EQ(back.cost_model->key(), rep.costs->key());
  EXPECT_EQ(back.draft, models().close_draft);
  for (size_t i = 0; i < 2; ++i) {
    const Recommendation& r = rep.recommendations[i];
    const SpecSettings& s = back.for_temperature(r.temp);
    EXPECT_EQ(s.draft, r.policy == "none" ? "none" : "model");
    if (r.policy != "none") {
      EXPECT_EQ(s.policy, r.policy);
      EXPECT_EQ(s.draft_max, r.k);
    }
  }
  std::string mode;
  SpeculativeOptions so;
  so.draft_max = 7;
  apply_config(back, 0.0f, ExplicitFlags{false, true, false, false}, mode, so);
  EXPECT_EQ(so.draft_max, 7) << "an explicit --draft-max wins";
  EXPECT_EQ(mode, back.for_temperature(0.0f).draft);
  EXPECT_EQ(so.policy, back.for_temperature(0.0f).policy);

  // generate's cost-model helper takes the config's model for this engine.
  auto fresh = load_pair();
  SpeculativeOptions adaptive;
  adaptive.mode = DraftMode::Model;
  adaptive.policy = "adaptive";
  adaptive.draft_max = 3;
  EXPECT_EQ(ensure_cost_model(*fresh, adaptive, &back), "cost model: from the config file");
  EXPECT_EQ(fresh->cost_model()->key(), back.cost_model->key());
}

// Token trees against chains (tune --tree-widths): each policy at the largest k with trees
// of each width, reported with its width; the chosen width goes into the config file and
// back into the options, an explicit --tree-width winning.
TEST(Tune, TreesAreMeasuredBesideChainsAndTheirWidthIsKept) {
  auto engine = load_pair();
  TuneOptions o;
  o.prompts = {{"code", "def add(a, b):\n    return"}};
  o.k_values = {2, 3};
  o.temps = {0.0f};
  o.policies = {"fixed"};
  o.tree_widths = {1, 3};
  o.n_tokens = 12;
  const TuneReport rep = run_tune(*engine, o);
  ASSERT_EQ(rep.results.size(), 3u);  // fixed k = 2, 3, and fixed k = 3 with trees
  const ConfigResult& tree = rep.results.back();
  EXPECT_EQ(tree.tree_width, 3);
  EXPECT_EQ(tree.k, 3);
  EXPECT_GT(tree.metrics.tree_steps, 0);
  for (size_t i = 0; i + 1 < rep.results.size(); ++i) {
    EXPECT_EQ(rep.results[i].tree_width, 1);
    EXPECT_EQ(rep.results[i].metrics.tree_steps, 0);
  }
  const json::value j = json::parse(report_json(rep));
  EXPECT_EQ(j.at("results").as_array().back().at("tree_width").as_int64(), 3);
  EXPECT_NE(report_csv(rep).find(",tree_width\n"), std::string::npos);

  TuneReport chosen = rep;
  chosen.recommendations = {Recommendation{}};
  chosen.recommendations[0].policy = "fixed";
  chosen.recommendations[0].k = 3;
  chosen.recommendations[0].tree_width = 3;
  const std::string path = test::scratch_dir("tune-trees") + "/tandem.json";
  save_config(path, config_from_report(chosen, "model"));
  const TandemConfig back = load_config(path);
  EXPECT_EQ(back.for_temperature(0.0f).tree_width, 3);
  std::string mode;
  SpeculativeOptions so;
  apply_config(back, 0.0f, ExplicitFlags{}, mode, so);
  EXPECT_EQ(so.tree_width, 3);
  so.tree_width = 1;
  ExplicitFlags given;
  given.tree_width = true;
  apply_config(back, 0.0f, given, mode, so);
  EXPECT_EQ(so.tree_width, 1) << "an explicit --tree-width wins";
}

TEST(Tune, ConfigRejectsWhatItCannotUse) {
  EXPECT_THROW(config_from_json("[]"), std::runtime_error);
  EXPECT_THROW(config_from_json("{\"format\": \"other\"}"), std::runtime_error);
  EXPECT_THROW(config_from_json("{\"format\": \"tandem-config\", \"speculative\": {\"policy\": \"nope\"}}"),
               std::runtime_error);
  EXPECT_THROW(config_from_json("{\"format\": \"tandem-config\", \"speculative\": {\"draft\": \"maybe\"}}"),
               std::runtime_error);
  const TandemConfig c = config_from_json(
      "{\"format\": \"tandem-config\", \"speculative\": {\"draft\": \"model\", \"policy\": \"adaptive\", "
      "\"draft_max\": 5}}");
  EXPECT_EQ(c.for_temperature(0.3f).policy, "adaptive");
  EXPECT_EQ(c.for_temperature(0.3f).draft_max, 5);
  EXPECT_EQ(c.cost_model, nullptr);
  EXPECT_THROW(load_config("/nonexistent/tandem.json"), std::runtime_error);
}

// A made-up measurement of fixed k = 3: speedup = tokens/s over the plain runs' tokens/s.
ConfigResult measured(const std::string& type, int32_t vocab, float temp, double speedup) {
  ConfigResult r;
  r.draft_type = type;
  r.draft_vocab = vocab;
  r.policy = "fixed";
  r.k = 3;
  r.temp = temp;
  r.tokens = r.ar_tokens = 100;
  r.decode_ms = 1000.0 / speedup;
  r.ar_decode_ms = 1000.0;
  return r;
}

// The draft vocabulary sizes tune compares (FR-Spec): parsing, choosing one for the load
// (the best speedups averaged over temperatures), and the config file carrying it.
TEST(Tune, DraftVocabularyIsChosenAndCarriedInTheConfig) {
  EXPECT_EQ(parse_draft_vocab_list("32768,0,16384,0"), (std::vector<int32_t>{0, 16384, 32768}));
  for (const char* bad : {"", "abc", "100", "-1", "16384,", "1e5"})
    EXPECT_THROW(parse_draft_vocab_list(bad), std::invalid_argument) << bad;

  auto result = [](int32_t vocab, float temp, double speedup) { return measured("keep", vocab, temp, speedup); };
  const std::vector<float> temps = {0.0f, 0.7f};
  // 16384 is best at T = 0 but loses at T = 0.7; 32768 is best on average.
  const std::vector<ConfigResult> rs = {result(0, 0.0f, 1.30), result(0, 0.7f, 1.05), result(16384, 0.0f, 1.60),
                                        result(16384, 0.7f, 0.90), result(32768, 0.0f, 1.50),
                                        result(32768, 0.7f, 1.10)};
  EXPECT_EQ(best_draft_vocab(rs, temps), 32768);
  // A tie goes to the larger vocabulary (the whole one largest of all).
  EXPECT_EQ(best_draft_vocab({result(0, 0.0f, 1.2), result(8192, 0.0f, 1.2)}, {0.0f}), 0);
  EXPECT_EQ(best_draft_vocab({result(16384, 0.0f, 1.2), result(8192, 0.0f, 1.2)}, {0.0f}), 16384);
  const auto recs = recommend(rs, temps);
  EXPECT_EQ(recs[0].draft_vocab, 16384);

  TuneReport rep;
  rep.draft_vocab = 32768;
  rep.draft_vocab_counts = "/data/counts.txt";
  rep.recommendations = {recs[0]};
  const TandemConfig c = config_from_json(config_to_json(config_from_report(rep, "model")));
  EXPECT_EQ(c.draft_vocab, 32768);
  EXPECT_EQ(c.draft_vocab_counts, "/data/counts.txt");
  // Into the load options, unless --draft-vocab was given, and only with a draft model.
  LoadOptions load;
  apply_config_load(c, {}, load);
  EXPECT_EQ(load.draft_vocab, 0) << "no draft model";
  load.draft_model_path = "draft.gguf";
  ExplicitFlags given;
  given.draft_vocab = true;
  apply_config_load(c, given, load);
  EXPECT_EQ(load.draft_vocab, 0) << "--draft-vocab wins";
  apply_config_load(c, {}, load);
  EXPECT_EQ(load.draft_vocab, 32768);
  EXPECT_EQ(load.draft_vocab_counts, "/data/counts.txt");
  EXPECT_THROW(config_from_json("{\"format\": \"tandem-config\", \"draft_vocab\": -3}"), std::runtime_error);
}

// The draft weight types tune compares (--draft-types): parsing, choosing the
// (type, vocabulary) pair for the load, and the config file carrying the type.
TEST(Tune, DraftWeightTypeIsChosenWithTheVocabularyAndCarriedInTheConfig) {
  EXPECT_EQ(parse_draft_type_list("keep,Q4_0,q8_0,q4_0"), (std::vector<std::string>{"keep", "q4_0", "q8_0"}));
  EXPECT_EQ(parse_draft_type_list("AUTO,keep"), (std::vector<std::string>{"auto", "keep"}));
  EXPECT_EQ(parse_draft_type_list("q4_k,keep"), (std::vector<std::string>{"q4_k", "keep"}));
  for (const char* bad : {"", "q6_k", "keep,", "f16"})
    EXPECT_THROW(parse_draft_type_list(bad), std::invalid_argument) << bad;
  // Unasked, tune compares the default (auto) with the stored weights; --draft-type narrows
  // it to one.
  EXPECT_EQ(default_draft_types(false, "auto"), (std::vector<std::string>{"auto", "keep"}));
  EXPECT_EQ(default_draft_types(true, "Q8_0"), (std::vector<std::string>{"q8_0"}));
  EXPECT_EQ(default_draft_types(true, "keep"), (std::vector<std::string>{"keep"}));
  EXPECT_EQ(default_draft_types(true, ""), (std::vector<std::string>{"keep"}));
  const auto& result = measured;
  const std::vector<float> temps = {0.0f, 0.7f};
  // q4_0 with 16384 tokens is best on average; keep with 16384 best at T = 0 alone.
  const std::vector<ConfigResult> rs = {
      result("keep", 0, 0.0f, 1.30),     result("keep", 0, 0.7f, 1.05),     result("keep", 16384, 0.0f, 1.70),
      result("keep", 16384, 0.7f, 0.95), result("q4_0", 0, 0.0f, 1.40),     result("q4_0", 0, 0.7f, 1.10),
      result("q4_0", 16384, 0.0f, 1.60), result("q4_0", 16384, 0.7f, 1.20)};
  EXPECT_EQ(best_draft_variant(rs, temps), (DraftVariant{"q4_0", 16384}));
  // Ties: the stored weights first, then the larger vocabulary.
  EXPECT_EQ(best_draft_variant({result("q8_0", 0, 0.0f, 1.2), result("keep", 8192, 0.0f, 1.2)}, {0.0f}),
            (DraftVariant{"keep", 8192}));
  EXPECT_EQ(best_draft_variant({result("keep", 8192, 0.0f, 1.2), result("keep", 0, 0.0f, 1.2)}, {0.0f}),
            (DraftVariant{"keep", 0}));
  const auto recs = recommend(rs, temps);
  EXPECT_EQ(recs[0].draft_type, "keep");
  EXPECT_EQ(recs[1].draft_type, "q4_0");

  TuneReport rep;
  rep.draft_type = "q4_0";
  rep.recommendations = {recs[1]};
  EXPECT_NE(report_json(rep).find("\"draft_type\":\"q4_0\""), std::string::npos);
  const TandemConfig c = config_from_json(config_to_json(config_from_report(rep, "model")));
  EXPECT_EQ(c.draft_type, "q4_0");
  LoadOptions load;
  apply_config_load(c, {}, load);
  EXPECT_EQ(load.draft_type, "auto") << "no draft model";
  load.draft_model_path = "draft.gguf";
  ExplicitFlags given;
  given.draft_type = true;
  load.draft_type = "keep";
  apply_config_load(c, given, load);
  EXPECT_EQ(load.draft_type, "keep") << "--draft-type wins";
  apply_config_load(c, {}, load);
  EXPECT_EQ(load.draft_type, "q4_0");
  EXPECT_THROW(config_from_json("{\"format\": \"tandem-config\", \"draft_type\": \"q9\"}"), std::runtime_error);
  // A config file from before draft types loads as "keep".
  EXPECT_EQ(config_from_json("{\"format\": \"tandem-config\"}").draft_type, "keep");
  // A config measured with the stored weights keeps them, though the default is auto.
  LoadOptions fresh;
  fresh.draft_model_path = "draft.gguf";
  apply_config_load(config_from_json("{\"format\": \"tandem-config\", \"draft_type\": \"keep\"}"), {}, fresh);
  EXPECT_EQ(fresh.draft_type, "keep");
}

}  // namespace
}  // namespace tandem::cli

namespace tandem::cli {
namespace {

// tune --concurrency: each configuration is served through the scheduler at each stream
// count, plain decoding of the same requests beside it; every request generates exactly its
// tokens, and the report carries the side-by-side figures (JSON and table).
TEST(Tune, ConcurrencyServesEachConfigurationBesidePlainDecoding) {
  auto engine = load_pair();
  SpeculativeOptions goodput;
  goodput.mode = DraftMode::Model;
  goodput.policy = "goodput";
  goodput.draft_max = 3;
  SpeculativeOptions fixed = goodput;
  fixed.policy = "fixed";
  ConcurrencyOptions co;
  co.streams = {1, 3};
  co.n_tokens = 12;
  const std::vector<std::string> prompts = {"a b c d", "one two three", "x y z w v"};
  const auto res = measure_concurrency(*engine, prompts, {{0.0f, fixed}, {0.7f, goodput}}, co);
  ASSERT_EQ(res.size(), 4u);
  for (size_t i = 0; i < res.size(); ++i) {
    const ConcurrencyResult& r = res[i];
    EXPECT_EQ(r.streams, co.streams[i % 2]) << i;
    EXPECT_EQ(r.policy, i < 2 ? "fixed" : "goodput") << i;
    EXPECT_FLOAT_EQ(r.temp, i < 2 ? 0.0f : 0.7f);
    EXPECT_EQ(r.tokens, static_cast<int64_t>(std::max(2, co.waves * r.streams)) * co.n_tokens) << i;
    EXPECT_GT(r.plain_tok_s, 0.0) << i;
    EXPECT_GT(r.spec_tok_s, 0.0) << i;
    EXPECT_NEAR(r.ratio(), r.spec_tok_s / r.plain_tok_s, 1e-12);
  }
  EXPECT_GT(res[0].metrics.drafted_tokens, 0) << "fixed k drafts whatever the batch";
  TuneReport rep;
  rep.concurrency = res;
  const json::value v = json::parse(report_json(rep));
  ASSERT_EQ(v.at("concurrency").as_array().size(), 4u);
  EXPECT_EQ(v.at("concurrency").at(3).at("streams").as_int64(), 3);
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  print_table(rep, f);
  std::fclose(f);
  const std::string table(buf, len);
  std::free(buf);
  EXPECT_NE(table.find("in the server's batches"), std::string::npos) << table;
  EXPECT_NE(table.find("| 0.70 | goodput | 3 | 3 |"), std::string::npos) << table;
}

}  // namespace
}  // namespace tandem::cli
