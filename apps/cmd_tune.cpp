// `tandem tune`: measures speculative decoding against plain decoding on this machine for
// every policy × draft length × temperature, prints the table (or JSON when stdout is not
// a terminal), recommends a configuration per temperature and writes the reports and the
// config file that `generate --config` reads. The measuring lives in apps/tune/.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <unistd.h>

#include "apps/commands.hpp"
#include "apps/common_options.hpp"
#include "apps/tune/config.hpp"
#include "apps/tune/report.hpp"
#include "apps/tune/runner.hpp"
#include "engine/runtime/engine_calibration.hpp"
#include "policies/cost_model.hpp"
#include "tandem/engine.hpp"

namespace tandem::cli {
namespace {

struct TuneArgs {
  LoadOptions load;
  std::string draft_mode;  // "", "model", "ngram"
  std::string prompts_file, k_list = "1..8", temps = "0,0.7", policies = "fixed,adaptive";
  std::string tree_widths = "1,3";
  std::string draft_vocabs;  // "" → automatic (see add_tune)
  std::string draft_types;   // "" → default_draft_types
  std::string concurrency;   // "" → single sequences only
  bool draft_type_given = false;  // --draft-type was on the command line
  int32_t n_tokens = 64, reps = 1, ar_every = 3, calib_reps = 5;
  uint64_t seed = 1;
  float alpha_prior = 0.0f;
  std::string out_json, out_csv, out_svg, out_config, cost_cache;
  bool json = false, table = false, quiet = false, recalibrate = false, no_calibrate = false;
};

// Progress on stderr: a bar on a terminal, JSON lines otherwise (for scripts and logs).
class Progress {
 public:
  explicit Progress(bool quiet) : quiet_(quiet), tty_(isatty(STDERR_FILENO) == 1) {}
  void update(const char* phase, double fraction, const std::string& what) {
    if (quiet_) return;
    const auto now = std::chrono::steady_clock::now();
    if (tty_) {
      const int width = 30, fill = static_cast<int>(fraction * width + 0.5);
      std::string bar(static_cast<size_t>(fill), '#');
      bar.resize(width, '.');
      const double el = std::chrono::duration<double>(now - start_).count();
      const double eta = fraction > 0.01 ? el * (1 - fraction) / fraction : 0;
      std::fprintf(stderr, "\r\033[K%s [%s] %3.0f%% eta %4.0fs  %s", phase, bar.c_str(), 100 * fraction, eta,
                   what.substr(0, 40).c_str());
      if (fraction >= 1.0) std::fputc('\n', stderr);
    } else {
      std::fprintf(stderr, "{\"event\":\"progress\",\"phase\":\"%s\",\"fraction\":%.4f,\"what\":\"%s\"}\n", phase,
                   fraction, what.c_str());
    }
    std::fflush(stderr);
  }
  void phase_start() { start_ = std::chrono::steady_clock::now(); }

 private:
  bool quiet_, tty_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + path);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

int run_tune_command(const TuneArgs& a) {
  TuneOptions o;
  if (!a.prompts_file.empty()) o.prompts = load_prompts(a.prompts_file);
  o.k_values = parse_k_list(a.k_list);
  o.temps = parse_float_list(a.temps);
  o.policies = parse_name_list(a.policies);
  o.tree_widths = parse_k_list(a.tree_widths);
  o.n_tokens = a.n_tokens;
  o.reps = a.reps;
  o.ar_every = a.ar_every;
  o.seed = a.seed;
  o.alpha_prior = a.alpha_prior;
  if (a.draft_mode == "ngram") {
    o.mode = DraftMode::Ngram;
  } else if (a.draft_mode.empty() || a.draft_mode == "model") {
    if (a.load.draft_model_path.empty()) throw std::invalid_argument("tune needs --model-draft (or --draft ngram)");
    o.mode = DraftMode::Model;
  } else {
    throw std::invalid_argument("--draft must be model or ngram");
  }
  const std::string draft_mode = o.mode == DraftMode::Ngram ? "ngram" : "model";

  LoadOptions load = a.load;
  if (o.mode == DraftMode::Ngram) load.draft_model_path.clear();
  // The draft weight types to compare (--draft-types): each is a load of its own, the draft
  // re-quantized as it loads (engine/model/requantize.hpp).
  std::vector<std::string> types = {"keep"};
  if (o.mode == DraftMode::Model)
    types = a.draft_types.empty() ? default_draft_types(a.draft_type_given, load.draft_type)
                                  : parse_draft_type_list(a.draft_types);
  load.draft_type = types.front();
  auto engine = Engine::load(load);
  print_backend_note(engine->info());
  Progress progress(a.quiet);

  // The draft vocabularies to compare (FR-Spec): as given, else, for a vocabulary large
  // enough that the draft's head is a big part of its cost, the whole one and two reduced
  // sizes; else the one loaded.
  std::vector<int32_t> vocabs;
  if (o.mode != DraftMode::Model) {
    vocabs = {0};
  } else if (!a.draft_vocabs.empty()) {
    vocabs = parse_draft_vocab_list(a.draft_vocabs);
  } else if (a.load.draft_vocab > 0) {
    vocabs = {a.load.draft_vocab};
  } else {
    vocabs = engine->info().n_vocab > 65536 ? std::vector<int32_t>{0, 16384, 32768} : std::vector<int32_t>{0};
  }
  // The cost model: the adaptive policies decide with it, the report predicts with it. Its
  // cache key includes the draft vocabulary, so each size is calibrated once.
  auto calibrate = [&](bool announce) {
    if (a.no_calibrate) return;
    CalibrationOptions co;
    co.k_max = o.k_values.back();
    co.reps = a.calib_reps;
    co.cache_path = a.cost_cache.empty() ? default_cost_cache_path() : a.cost_cache;
    co.force = a.recalibrate && announce;
    progress.phase_start();
    co.progress = [&](double f) { progress.update("calibrating", f, "forward passes"); };
    const bool cached = calibrate_and_install(*engine, co);
    if (announce && cached && !a.quiet)
      std::fprintf(stderr, "cost model: cached in %s (--recalibrate to measure again)\n", co.cache_path.c_str());
  };
  TuneReport report;
  bool first = true;
  for (size_t ti = 0; ti < types.size(); ++ti) {
    if (ti > 0) {
      engine.reset();  // the previous draft's memory goes first
      load.draft_type = types[ti];
      engine = Engine::load(load);
    }
    for (size_t vi = 0; vi < vocabs.size(); ++vi) {
      if (o.mode == DraftMode::Model) engine->set_draft_vocab(vocabs[vi]);
      if ((vocabs.size() > 1 || types.size() > 1) && !a.quiet)
        std::fprintf(stderr, "draft weights %s, vocabulary %s (%zu of %zu)\n", types[ti].c_str(),
                     vocabs[vi] ? std::to_string(vocabs[vi]).c_str() : "whole", ti * vocabs.size() + vi + 1,
                     types.size() * vocabs.size());
      calibrate(true);
      progress.phase_start();
      o.progress = [&](int64_t done, int64_t total, const std::string& what) {
        progress.update("measuring", static_cast<double>(done) / static_cast<double>(total), what);
      };
      TuneReport part = run_tune(*engine, o);
      if (first) {
        report = std::move(part);
        first = false;
      } else {
        report.results.insert(report.results.end(), part.results.begin(), part.results.end());
        report.elapsed_s += part.elapsed_s;
      }
    }
  }
  // One weight type and vocabulary for the draft (they are load settings), then the best
  // configuration with them per temperature.
  const DraftVariant best = best_draft_variant(report.results, report.temps);
  report.draft_type = best.type;
  report.draft_vocab = best.vocab;
  report.draft_vocab_counts = report.draft_vocab > 0 ? a.load.draft_vocab_counts : "";
  std::vector<ConfigResult> chosen;
  for (const ConfigResult& r : report.results)
    if (r.draft_vocab == report.draft_vocab && r.draft_type == report.draft_type) chosen.push_back(r);
  report.recommendations = recommend(chosen, report.temps);
  if (o.mode == DraftMode::Model && (report.draft_vocab != vocabs.back() || report.draft_type != types.back())) {
    // The report's (and the config file's) cost model is the chosen draft's: cached by now.
    if (report.draft_type != types.back()) {
      engine.reset();
      load.draft_type = report.draft_type;
      engine = Engine::load(load);
    }
    engine->set_draft_vocab(report.draft_vocab);
    calibrate(false);
    report.costs = engine->cost_model();
  }

  if (!a.concurrency.empty() && o.mode != DraftMode::None) {
    // Each recommendation as the server would run it, and the server's default policy
    // (goodput: the step budget) at the same k; where nothing beat plain decoding, goodput
    // at the largest k measured.
    std::vector<std::pair<float, SpeculativeOptions>> configs;
    for (const Recommendation& rc : report.recommendations) {
      SpeculativeOptions so;
      so.mode = o.mode;
      so.draft_max = rc.policy == "none" ? o.k_values.back() : rc.k;
      so.tree_width = rc.tree_width;
      if (rc.policy != "none" && rc.policy != "goodput") {
        so.policy = rc.policy;
        configs.emplace_back(rc.temp, so);
      }
      so.policy = "goodput";
      configs.emplace_back(rc.temp, so);
    }
    ConcurrencyOptions co;
    co.streams = parse_k_list(a.concurrency);
    co.n_tokens = o.n_tokens;
    co.seed = o.seed;
    std::vector<std::string> texts;
    for (const TunePrompt& p : o.prompts.empty() ? builtin_prompts() : o.prompts) texts.push_back(p.text);
    if (!a.quiet) std::fprintf(stderr, "measuring %zu configuration(s) in batches of %s streams\n", configs.size(),
                               a.concurrency.c_str());
    report.concurrency = measure_concurrency(*engine, texts, configs, co);
  }

  const bool as_json = a.json || (!a.table && isatty(STDOUT_FILENO) != 1);
  if (as_json)
    std::printf("%s\n", report_json(report).c_str());
  else
    print_table(report, stdout);
  std::fflush(stdout);
  if (!a.out_json.empty()) write_file(a.out_json, report_json(report) + "\n");
  if (!a.out_csv.empty()) write_file(a.out_csv, report_csv(report));
  if (!a.out_svg.empty()) write_file(a.out_svg, report_svg(report));
  if (!a.out_config.empty()) {
    save_config(a.out_config, config_from_report(report, draft_mode));
    if (!a.quiet) std::fprintf(stderr, "wrote %s: use it with `tandem generate --config %s`\n", a.out_config.c_str(),
                               a.out_config.c_str());
  }
  return 0;
}

}  // namespace

Command add_tune(CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  auto* sub = app.add_subcommand("tune", "Measure speculative decoding on this machine and recommend a configuration");
  sub->add_option("-m,--model", a->load.model_path, "Target model: a GGUF file or a Hugging Face folder")->required()->check(CLI::ExistingPath);
  sub->add_option("--model-draft", a->load.draft_model_path, "Draft model: a GGUF file or a Hugging Face folder (alias: -md)")
      ->check(CLI::ExistingPath);
  cli::add_draft_vocab_options(*sub, a->load);
  sub->add_option("--draft-vocabs", a->draft_vocabs,
                  "Draft vocabulary sizes to compare, e.g. 0,16384,32768 (0 = whole; default: those three for "
                  "vocabularies above 64k tokens, else the whole one)");
  sub->add_option("--draft-types", a->draft_types,
                  "Draft weight types to compare, e.g. keep,q4_0,q8_0 (each loads the draft re-quantized to it; "
                  "default: auto,keep, or the --draft-type given)");
  sub->add_option("--draft", a->draft_mode, "Proposer: model (default) or ngram");
  sub->add_option("--prompts", a->prompts_file, "Prompts: .jsonl ({\"prompt\", \"category\"}) or one per line")
      ->check(CLI::ExistingFile);
  sub->add_option("--draft-max", a->k_list, "Draft lengths k: a range 1..8 or a list 1,2,4")->capture_default_str();
  sub->add_option("--temps", a->temps, "Temperatures, e.g. 0,0.7")->capture_default_str();
  sub->add_option("--policies", a->policies, "Policies: fixed, confidence, adaptive, goodput")->capture_default_str();
  sub->add_option("--tree-widths", a->tree_widths,
                  "Token tree widths to compare with chains (1: chains), each with every policy at the largest k")
      ->capture_default_str();
  sub->add_option("-n,--max-tokens", a->n_tokens, "Tokens per generation")->capture_default_str();
  sub->add_option("--reps", a->reps, "Passes over the prompts")->capture_default_str();
  sub->add_option("--ar-every", a->ar_every, "A plain-decoding run after every this many configurations")
      ->capture_default_str();
  sub->add_option("--seed", a->seed, "Random seed (same for plain and speculative runs)")->capture_default_str();
  sub->add_option("--concurrency", a->concurrency,
                  "Also serve the recommendations with this many streams at once (e.g. 1,2,4), plain decoding "
                  "side by side, and report the throughput ratio at each");
  sub->add_option("--alpha-prior", a->alpha_prior, "Adaptive policies: acceptance expected at the start (0 = default)");
  sub->add_option("--out", a->out_json, "Write the full report as JSON");
  sub->add_option("--csv", a->out_csv, "Write one CSV row per configuration");
  sub->add_option("--plot", a->out_svg, "Write an SVG plot (speedup vs k, acceptance per position)");
  sub->add_option("--write-config", a->out_config, "Write the recommended configuration for generate --config");
  sub->add_option("--cost-cache", a->cost_cache, "Cost model cache file (default ~/.cache/tandem/cost_models.json)");
  sub->add_option("--calib-reps", a->calib_reps, "Calibration: timed repetitions per pass")->capture_default_str();
  sub->add_flag("--recalibrate", a->recalibrate, "Measure the cost model again even if cached");
  sub->add_flag("--no-calibrate", a->no_calibrate, "No cost model: adaptive policies use the assumed default");
  add_runtime_options(*sub, a->load);
  sub->add_flag("--json", a->json, "Print the report as JSON (the default when stdout is not a terminal)");
  sub->add_flag("--table", a->table, "Print the table even when stdout is not a terminal");
  sub->add_flag("-q,--quiet", a->quiet, "No progress output");
  return {sub, [a, sub] {
            a->draft_type_given = sub->get_option("--draft-type")->count() > 0;
            return run_tune_command(*a);
          }};
}

}  // namespace tandem::cli
