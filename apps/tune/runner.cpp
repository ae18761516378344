#include "apps/tune/runner.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <cmath>
#include <ctime>
#include <time.h>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "engine/model/requantize.hpp"
#include "policies/factory.hpp"
#include "policies/replay.hpp"

namespace tandem::cli {
namespace json = boost::json;

namespace {

std::string chatml(const std::string& user) {
  return "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t p = s.find(sep, start);
    out.push_back(trim(s.substr(start, p == std::string::npos ? std::string::npos : p - start)));
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return out;
}

std::string unescape_newlines(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == 'n') {
      out += '\n';
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

using Clock = std::chrono::steady_clock;

double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// One generation's numbers.
struct Run {
  double decode_ms = 0.0, total_ms = 0.0, cpu_decode_ms = 0.0;
  int64_t tokens = 0;  // decode tokens
  int32_t prompt_tokens = 0;
  SpeculativeMetrics m;
};

Run generate(Engine& e, const std::string& prompt, const GenerateOptions& g) {
  // Decode starts when the first token arrives (it comes from the prefill pass).
  double cpu_first = -1.0;
  const GenerateResult r = e.generate(prompt, g, [&](std::string_view, int32_t) {
    if (cpu_first < 0) cpu_first = cpu_ms();
    return true;
  });
  const double cpu_end = cpu_ms();
  Run out;
  out.cpu_decode_ms = cpu_first >= 0 ? cpu_end - cpu_first : 0.0;
  out.decode_ms = r.timings.decode_ms;
  out.total_ms = r.timings.prefill_ms + r.timings.decode_ms;
  out.tokens = std::max(0, r.timings.n_generated - 1);
  out.prompt_tokens = r.timings.n_prompt;
  out.m = r.speculative;
  return out;
}

struct Config {
  std::string policy;
  int32_t k;
  int32_t tree_width = 1;
};

constexpr int32_t kReplayRecordK = 16;  // k of the greedy run whose steps replay reads

// Replays every greedy configuration that replay can model over the recorded traces.
void replay_greedy(TuneReport& rep, const TuneOptions& o, const std::vector<AgreementTrace>& traces) {
  if (!rep.costs || traces.empty() || o.mode != DraftMode::Model) return;
  for (ConfigResult& c : rep.results) {
    // (p_min needs the draft's probabilities; a trace is a chain's)
    if (c.temp > 0.0f || c.policy == "confidence" || c.tree_width > 1) continue;
    SpeculativeOptions so;
    so.mode = o.mode;
    so.policy = c.policy;
    so.draft_max = c.k;
    so.alpha_prior = o.alpha_prior;
    so.start_budget = -1.0f;  // a trace has no target confidences to start on: start at once
    ReplayResult all;
    for (const AgreementTrace& t : traces) {
      auto policy = make_policy(effective_options(so), rep.costs.get());
      all.add(replay(*policy, t, *rep.costs, c.k, o.n_tokens));
    }
    c.replayed = all.speedup();
  }
}

}  // namespace

const std::vector<TunePrompt>& builtin_prompts() {
  static const std::vector<TunePrompt> p = {
      {"chat", chatml("What are three good habits for staying focused while working from home?")},
      {"chat", chatml("Explain in a few sentences why the sky is blue.")},
      {"chat", chatml("Suggest a name for a small bakery and say why it works.")},
      {"code", "def quicksort(arr):\n    \"\"\"Sort a list of numbers in ascending order.\"\"\"\n"},
      {"code", "// Returns true when n is a prime number.\nbool is_prime(int n) {\n"},
      {"code", chatml("Write a Python function that counts the words in a text file.")},
      {"summarise", chatml("Summarise in one sentence: The city council met on Tuesday to discuss the new bike "
                           "lanes. Residents spoke for and against the plan. The council voted 5 to 2 to build "
                           "the lanes next spring, with a review after one year.")},
      {"summarise", chatml("Summarise: Photosynthesis lets plants turn sunlight, water and carbon dioxide into "
                           "sugar and oxygen. It happens mostly in the leaves, inside chloroplasts, and it is the "
                           "source of nearly all the oxygen in the air.")},
      {"summarise", chatml("Give a two-line summary: The meeting moved from Monday to Thursday because the "
                           "projector was broken. Anna will bring a new one. Everyone should read the report "
                           "before Thursday and send questions to Ben.")},
  };
  return p;
}

std::vector<TunePrompt> load_prompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open prompts file " + path);
  const bool jsonl = path.size() >= 6 && path.substr(path.size() - 6) == ".jsonl";
  std::vector<TunePrompt> out;
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (trim(line).empty()) continue;
    const std::string where = path + ":" + std::to_string(lineno);
    if (!jsonl) {
      out.push_back({"file", unescape_newlines(line)});
      continue;
    }
    boost::system::error_code ec;
    const json::value v = json::parse(line, ec);
    if (ec || !v.is_object()) throw std::runtime_error(where + ": not a JSON object");
    const json::object& o = v.as_object();
    const json::value* text = o.if_contains("prompt");
    if (!text) text = o.if_contains("text");
    if (!text || !text->is_string()) throw std::runtime_error(where + ": needs a \"prompt\" string");
    TunePrompt p{"file", std::string(text->as_string())};
    if (const json::value* c = o.if_contains("category"); c && c->is_string()) p.category = std::string(c->as_string());
    if (p.text.empty()) throw std::runtime_error(where + ": empty prompt");
    out.push_back(std::move(p));
  }
  if (out.empty()) throw std::runtime_error(path + ": no prompts");
  return out;
}

std::vector<int32_t> parse_k_list(const std::string& s) {
  std::vector<int32_t> ks;
  auto num = [&](const std::string& t) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != t.size() || v < 1 || v > 32)
      throw std::invalid_argument("draft lengths must be integers in 1..32: '" + s + "'");
    return static_cast<int32_t>(v);
  };
  for (const std::string& part : split(s, ',')) {
    const size_t dots = part.find("..");
    if (dots == std::string::npos) {
      ks.push_back(num(part));
      continue;
    }
    const int32_t a = num(trim(part.substr(0, dots))), b = num(trim(part.substr(dots + 2)));
    if (a > b) throw std::invalid_argument("empty range '" + part + "'");
    for (int32_t k = a; k <= b; ++k) ks.push_back(k);
  }
  std::sort(ks.begin(), ks.end());
  ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
  return ks;
}

std::vector<float> parse_float_list(const std::string& s) {
  std::vector<float> out;
  for (const std::string& part : split(s, ',')) {
    size_t used = 0;
    float v = 0;
    try {
      v = std::stof(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != part.size() || !(v >= 0.0f) || !std::isfinite(v))
      throw std::invalid_argument("temperatures must be numbers >= 0: '" + s + "'");
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  return out;
}

std::vector<std::string> parse_name_list(const std::string& s) {
  std::vector<std::string> out;
  for (const std::string& part : split(s, ','))
    if (!part.empty() && std::find(out.begin(), out.end(), part) == out.end()) out.push_back(part);
  if (out.empty()) throw std::invalid_argument("empty list: '" + s + "'");
  return out;
}

// ---- ConfigResult ------------------------------------------------------------------------

double ConfigResult::speedup() const {
  const double ar = ar_tokens_per_s();
  return ar > 0 ? tokens_per_s() / ar : 0.0;
}

double ConfigResult::e2e_speedup() const {
  // Both generate the same number of tokens per prompt.
  return total_ms > 0 && ar_tokens > 0 ? (ar_total_ms / ar_tokens) / (total_ms / std::max<int64_t>(1, tokens)) : 0.0;
}

double ConfigResult::cpu_speedup() const {
  return cpu_decode_ms > 0 && ar_tokens > 0 ? (ar_cpu_decode_ms / ar_tokens) / (cpu_decode_ms / std::max<int64_t>(1, tokens))
                                            : 0.0;
}

double ConfigResult::min_prompt_speedup() const {
  double m = std::numeric_limits<double>::infinity();
  for (const Prompt& p : prompts) m = std::min(m, p.speedup);
  return prompts.empty() ? 0.0 : m;
}

double ConfigResult::alpha() const {
  const auto& d = metrics.drafted_per_position;
  const auto& a = metrics.accepted_per_position;
  double trials = 0, accepted = 0;
  for (size_t i = 0; i < d.size() && i < a.size(); ++i) {
    // Tried at i: drafted there with everything before it accepted.
    const double before = i == 0 ? static_cast<double>(d[0]) : static_cast<double>(a[i - 1]);
    trials += std::min(before, static_cast<double>(d[i]));
    accepted += static_cast<double>(a[i]);
  }
  return trials > 0 ? accepted / trials : 0.0;
}

std::vector<double> ConfigResult::acceptance_per_position() const {
  std::vector<double> out;
  const auto& d = metrics.drafted_per_position;
  const auto& a = metrics.accepted_per_position;
  for (size_t i = 0; i < d.size() && i < a.size(); ++i) {
    if (d[i] == 0) break;
    out.push_back(static_cast<double>(a[i]) / static_cast<double>(d[i]));
  }
  return out;
}

double ConfigResult::c() const {
  const double t1 = ar_pass_ms();
  return metrics.draft_forwards > 0 && t1 > 0 ? (metrics.draft_ms / metrics.draft_forwards) / t1 : 0.0;
}

double ConfigResult::r_measured() const {
  const double t1 = ar_pass_ms();
  return metrics.target_passes > 0 && t1 > 0 ? (metrics.target_ms / metrics.target_passes) / t1 : 0.0;
}

double ConfigResult::steps_off_fraction() const {
  int64_t all = 0;
  for (int64_t s : metrics.steps_per_k) all += s;
  return all > 0 ? static_cast<double>(metrics.steps_per_k[0]) / static_cast<double>(all) : 0.0;
}

namespace {
// Σ_k n_k·E(α, k) / Σ_k n_k·(k·c + r(k)) over the steps that chose each k.
double mixture(const ConfigResult& r, const std::function<double(int32_t)>& rk) {
  const double a = r.alpha(), c = r.c();
  double tokens = 0, cost = 0;
  const auto& steps = r.metrics.steps_per_k;
  for (size_t k = 0; k < steps.size(); ++k) {
    const auto kk = static_cast<int32_t>(k);
    tokens += steps[k] * CostModel::expected_tokens(a, kk);
    cost += steps[k] * (kk == 0 ? 1.0 : kk * c + rk(kk));
  }
  return cost > 0 ? tokens / cost : 0.0;
}
}  // namespace

double ConfigResult::predicted_r1() const {
  return mixture(*this, [](int32_t) { return 1.0; });
}

double ConfigResult::predicted(const CostModel& costs) const {
  return mixture(*this, [&](int32_t k) { return costs.r(k); });
}

// ---- the run ----------------------------------------------------------------------------

std::vector<Recommendation> recommend(const std::vector<ConfigResult>& results, const std::vector<float>& temps) {
  std::vector<Recommendation> out;
  for (float t : temps) {
    Recommendation best;
    best.temp = t;
    best.policy = "none";
    for (const ConfigResult& r : results) {
      if (r.temp != t || r.speedup() <= best.speedup) continue;
      best.draft_vocab = r.draft_vocab;
      best.draft_type = r.draft_type;
      best.policy = r.policy;
      best.k = r.k;
      best.tree_width = r.tree_width;
      best.speedup = r.speedup();
      best.alpha = r.alpha();
      best.off_fraction = policy_uses_cost_model(r.policy) ? r.steps_off_fraction() : 0.0;
    }
    out.push_back(best);
  }
  return out;
}

int32_t best_draft_vocab(const std::vector<ConfigResult>& results, const std::vector<float>& temps) {
  std::vector<int32_t> sizes;
  for (const ConfigResult& r : results) sizes.push_back(r.draft_vocab);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  int32_t best = sizes.empty() ? 0 : sizes.front();
  double best_score = -1.0;
  for (int32_t n : sizes) {
    std::vector<ConfigResult> of_n;
    for (const ConfigResult& r : results)
      if (r.draft_vocab == n) of_n.push_back(r);
    double score = 0.0;
    for (const Recommendation& rc : recommend(of_n, temps)) score += rc.speedup;
    score /= static_cast<double>(std::max<size_t>(temps.size(), 1));
    // 0 (the whole vocabulary) is the largest; otherwise larger sizes win ties.
    const bool larger = n == 0 || (best != 0 && n > best);
    if (score > best_score || (score == best_score && larger)) {
      best = n;
      best_score = score;
    }
  }
  return best;
}

DraftVariant best_draft_variant(const std::vector<ConfigResult>& results, const std::vector<float>& temps) {
  std::vector<DraftVariant> variants;
  for (const ConfigResult& r : results) {
    const DraftVariant v{r.draft_type, r.draft_vocab};
    if (std::find(variants.begin(), variants.end(), v) == variants.end()) variants.push_back(v);
  }
  DraftVariant best = variants.empty() ? DraftVariant{} : variants.front();
  double best_score = -1.0;
  for (const DraftVariant& v : variants) {
    std::vector<ConfigResult> of_v;
    for (const ConfigResult& r : results)
      if (r.draft_type == v.type && r.draft_vocab == v.vocab) of_v.push_back(r);
    double score = 0.0;
    for (const Recommendation& rc : recommend(of_v, temps)) score += rc.speedup;
    score /= static_cast<double>(std::max<size_t>(temps.size(), 1));
    // On a tie: the stored weights, then the larger vocabulary (0, the whole one, largest).
    const bool keep_first = v.type == "keep" && best.type != "keep";
    const bool larger = v.type == best.type && (v.vocab == 0 || (best.vocab != 0 && v.vocab > best.vocab));
    if (score > best_score || (score == best_score && (keep_first || larger))) {
      best = v;
      best_score = score;
    }
  }
  return best;
}

std::vector<std::string> default_draft_types(bool draft_type_given, const std::string& draft_type) {
  if (draft_type_given) return parse_draft_type_list(draft_type.empty() ? "keep" : draft_type);
  return {"auto", "keep"};
}

std::vector<std::string> parse_draft_type_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s + ",");
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) throw std::invalid_argument("draft types: an empty item in '" + s + "'");
    const std::string name = weight_options_name(parse_weight_options(item));  // throws for unknown ones
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  if (out.empty()) throw std::invalid_argument("draft types: none given");
  return out;
}

std::vector<int32_t> parse_draft_vocab_list(const std::string& s) {
  std::vector<int32_t> out;
  std::stringstream ss(s + ",");  // so that an empty last item ("16384,") is an item
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long v = -1;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || item.empty() || v < 0 || v > (1 << 24) || (v > 0 && v < 256))
      throw std::invalid_argument("--draft-vocabs: '" + item + "' is not 0 or a size of at least 256");
    out.push_back(static_cast<int32_t>(v));
  }
  if (out.empty()) throw std::invalid_argument("--draft-vocabs: empty list");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

TuneReport run_tune(Engine& engine, const TuneOptions& o) {
  if (o.k_values.empty() || o.temps.empty() || o.policies.empty())
    throw std::invalid_argument("tune needs at least one draft length, temperature and policy");
  for (const std::string& p : o.policies)
    if (!is_policy_name(p) || p.empty()) throw std::invalid_argument("unknown policy '" + p + "'");
  if (o.n_tokens < 2) throw std::invalid_argument("tune needs at least 2 tokens per generation");
  if (o.reps < 1 || o.ar_every < 1) throw std::invalid_argument("tune needs reps >= 1 and ar_every >= 1");
  const ModelInfo info = engine.info();
  if (o.mode == DraftMode::Model && info.draft_path.empty())
    throw std::invalid_argument("tune with a draft model needs one loaded (--model-draft)");
  if (o.mode == DraftMode::None) throw std::invalid_argument("tune compares speculation with plain decoding");

  TuneReport rep;
  rep.target = info.path;
  rep.draft = o.mode == DraftMode::Ngram ? "ngram" : info.draft_path;
  rep.backend = info.backend;
  rep.n_tokens = o.n_tokens;
  rep.reps = o.reps;
  rep.temps = o.temps;
  rep.prompts = o.prompts.empty() ? builtin_prompts() : o.prompts;
  rep.costs = engine.cost_model();
  {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    rep.created = buf;
  }

  // Fixed-k policies at every k; the adaptive ones at the largest (they choose below it).
  std::vector<Config> configs;
  const int32_t k_top = o.k_values.back();
  for (const std::string& p : o.policies) {
    if (policy_uses_cost_model(p)) {
      configs.push_back({p, k_top});
    } else {
      for (int32_t k : o.k_values) configs.push_back({p, k});
    }
  }
  for (int32_t w : o.tree_widths)
    if (w > 1)
      for (const std::string& p : o.policies) configs.push_back({p, k_top, w});
  const int64_t C = static_cast<int64_t>(configs.size());
  const int64_t ar_runs = 1 + (C + o.ar_every - 1) / o.ar_every;
  // Replay needs a cost model and greedy outputs of a draft model.
  const bool replays = rep.costs && o.mode == DraftMode::Model;
  const int64_t greedy_temps = std::count_if(o.temps.begin(), o.temps.end(), [](float t) { return t <= 0.0f; });
  const int64_t recordings = replays ? greedy_temps * static_cast<int64_t>(rep.prompts.size()) : 0;
  const int64_t total =
      static_cast<int64_t>(o.temps.size()) * o.reps * static_cast<int64_t>(rep.prompts.size()) * (C + ar_runs) +
      recordings;
  int64_t done = 0;
  const auto t_start = Clock::now();

  std::vector<AgreementTrace> traces;  // per prompt, from the greedy recording runs
  for (float temp : o.temps) {
    const size_t first = rep.results.size();
    for (const Config& c : configs) {
      ConfigResult r;
      r.draft_vocab = engine.info().draft_vocab;
      if (!engine.info().draft_type.empty()) r.draft_type = engine.info().draft_type;
      r.policy = c.policy;
      r.k = c.k;
      r.tree_width = c.tree_width;
      r.temp = temp;
      rep.results.push_back(std::move(r));
    }
    for (int32_t pass = 0; pass < o.reps; ++pass) {
      const bool record = replays && temp <= 0.0f && pass == 0;
      for (size_t pi = 0; pi < rep.prompts.size(); ++pi) {
        const TunePrompt& prompt = rep.prompts[pi];
        GenerateOptions base;
        base.max_tokens = o.n_tokens;
        base.ignore_eos = true;  // every run generates exactly n tokens
        base.sampling.temperature = temp;
        base.sampling.seed = o.seed + 1000003ull * static_cast<uint64_t>(pass) + pi;
        const std::string where = "T=" + std::to_string(temp).substr(0, 4) + " " + prompt.category + " #" +
                                  std::to_string(pi + 1);
        auto step = [&](const std::string& what) {
          ++done;
          if (o.progress) o.progress(done, total, where + " " + what);
        };
        auto plain = [&] {
          Run r = generate(engine, prompt.text, base);
          step("plain");
          return r;
        };
        if (record) {
          // Untimed: one greedy run that drafts further ahead than any configuration, whose
          // steps say what every k would get accepted at every position (policies/replay.hpp).
          // Recorded at the largest k measured, the tail of every wholly accepted draft would
          // only be a lower bound for k close to it.
          GenerateOptions g = base;
          g.speculative.mode = o.mode;
          g.speculative.policy = "fixed";
          g.speculative.draft_max = std::max(k_top, kReplayRecordK);
          g.speculative.lookup = false;  // the draft's own agreement: replay models the draft alone
          g.record_steps = true;
          const Run run = generate(engine, prompt.text, g);
          traces.push_back(AgreementTrace::from_steps(run.m.steps, static_cast<int32_t>(run.tokens + 1), run.prompt_tokens));
          step("recording the draft's agreement");
        }
        Run ar_before = plain();
        std::vector<std::pair<size_t, Run>> group;
        for (size_t ci = 0; ci < configs.size(); ++ci) {
          GenerateOptions g = base;
          g.speculative.mode = o.mode;
          g.speculative.policy = configs[ci].policy;
          g.speculative.draft_max = configs[ci].k;
          g.speculative.tree_width = configs[ci].tree_width;
          g.speculative.alpha_prior = o.alpha_prior;
          group.emplace_back(ci, generate(engine, prompt.text, g));
          step(configs[ci].policy + " k=" + std::to_string(configs[ci].k) +
               (configs[ci].tree_width > 1 ? " tree " + std::to_string(configs[ci].tree_width) : ""));
          if (group.size() < static_cast<size_t>(o.ar_every) && ci + 1 < configs.size()) continue;
          const Run ar_after = plain();
          for (auto& [idx, run] : group) {
            ConfigResult& res = rep.results[first + idx];
            const double ar_decode = 0.5 * (ar_before.decode_ms + ar_after.decode_ms);
            const double ar_total = 0.5 * (ar_before.total_ms + ar_after.total_ms);
            const int64_t ar_tokens = (ar_before.tokens + ar_after.tokens) / 2;
            res.tokens += run.tokens;
            res.decode_ms += run.decode_ms;
            res.total_ms += run.total_ms;
            res.ar_tokens += ar_tokens;
            res.ar_decode_ms += ar_decode;
            res.ar_total_ms += ar_total;
            res.cpu_decode_ms += run.cpu_decode_ms;
            res.ar_cpu_decode_ms += 0.5 * (ar_before.cpu_decode_ms + ar_after.cpu_decode_ms);
            res.ar_target_ms += ar_before.m.target_ms + ar_after.m.target_ms;
            res.ar_target_passes += ar_before.m.target_passes + ar_after.m.target_passes;
            res.metrics.merge(run.m);
            const double sp = run.decode_ms > 0 && ar_decode > 0 && ar_tokens > 0
                                  ? (run.tokens / run.decode_ms) / (ar_tokens / ar_decode)
                                  : 0.0;
            const double ar_cpu = 0.5 * (ar_before.cpu_decode_ms + ar_after.cpu_decode_ms);
            const double cpu_sp = run.cpu_decode_ms > 0 && ar_cpu > 0 && ar_tokens > 0
                                      ? (run.tokens / run.cpu_decode_ms) / (ar_tokens / ar_cpu)
                                      : 0.0;
            res.prompts.push_back({prompt.category, sp, cpu_sp});
          }
          group.clear();
          ar_before = ar_after;
        }
      }
    }
  }
  replay_greedy(rep, o, traces);
  rep.recommendations = recommend(rep.results, rep.temps);
  rep.elapsed_s = std::chrono::duration<double>(Clock::now() - t_start).count();
  return rep;
}

}  // namespace tandem::cli
