// Helpers for benchmarking speculation policies with real models (the measurements
// themselves are `tandem tune` runs):
//
//   bench_policies adversarial-draft IN.gguf OUT.gguf [--seed S]
//       Writes a copy of draft model IN whose token embedding (and output) rows are
//       permuted at random: same vocabulary, tokenizer, size and speed as the real draft,
//       but its proposals are nearly never what the target would say. The adversary a
//       speculation policy must not lose time to: c as large as the real draft's, α ≈ 0.
//
//   bench_policies cost-model -m TARGET.gguf [-md DRAFT.gguf] [-k 8] [--reps 5] [-t N]
//       Calibrates (always measuring; no cache) and prints T(n), r(k), c, the draft's
//       catch-up cost and the predicted speedup S(α, k) table.
//
//   bench_policies replay TRACES.jsonl (--costs C,R1,R2,... | --cost-cache FILE --match S)
//                         [-n 96] [-k 4] [--fixed-max 6] [--prior 0.6,...] [--weight 2,...]
//                         [--decay 0.95,...] [--start-budget -1]
//       Plays the goodput policy (every combination of the listed priors, prior weights and
//       decays) and every fixed k against recorded greedy runs (bench/record_traces.py) under
//       one cost model (policies/replay.hpp): speedup over plain decoding per prompt set, and
//       each policy's share of the best fixed k's. Deterministic: what a change to the policy
//       does, without the several percent run-to-run noise of measured runs.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <fstream>
#include <map>
#include <sstream>

#include "engine/gguf/gguf.hpp"
#include "engine/gguf/gguf_writer.hpp"
#include "engine/runtime/engine_calibration.hpp"
#include "policies/adaptive_policy.hpp"
#include "policies/cost_model.hpp"
#include "policies/replay.hpp"
#include "tandem/engine.hpp"

namespace {

using tandem::gguf::File;
using tandem::gguf::Value;
using tandem::gguf::ValueType;
using tandem::gguf::Writer;

Value scalar(const File& f, const std::string& key, ValueType t) {
  switch (t) {
    case ValueType::UINT8: return Value::u8(static_cast<uint8_t>(*f.get_int(key)));
    case ValueType::INT8: return Value::i8(static_cast<int8_t>(*f.get_int(key)));
    case ValueType::UINT16: return Value::u16(static_cast<uint16_t>(*f.get_int(key)));
    case ValueType::INT16: return Value::i16(static_cast<int16_t>(*f.get_int(key)));
    case ValueType::UINT32: return Value::u32(static_cast<uint32_t>(*f.get_int(key)));
    case ValueType::INT32: return Value::i32(static_cast<int32_t>(*f.get_int(key)));
    case ValueType::UINT64: return Value::u64(static_cast<uint64_t>(*f.get_int(key)));
    case ValueType::INT64: return Value::i64(*f.get_int(key));
    case ValueType::FLOAT32: return Value::f32(static_cast<float>(*f.get_float(key)));
    case ValueType::FLOAT64: return Value::f64(*f.get_float(key));
    case ValueType::BOOL: return Value::boolean(*f.get_bool(key));
    case ValueType::STRING: return Value::string(*f.get_string(key));
    default: throw std::runtime_error("unsupported metadata type for " + key);
  }
}

// Copies one key, scalars and the flat arrays a tokenizer uses.
void copy_key(const File& f, Writer& w, const std::string& key) {
  const ValueType t = f.type_of(key);
  if (t != ValueType::ARRAY) {
    w.set(key, scalar(f, key, t));
    return;
  }
  const ValueType e = f.array_type_of(key);
  if (e == ValueType::STRING) {
    w.set_string_array(key, *f.get_string_array(key));
  } else if (e == ValueType::FLOAT32 || e == ValueType::FLOAT64) {
    w.set_float_array(key, *f.get_float_array(key));
  } else if (e == ValueType::INT32 || e == ValueType::UINT32 || e == ValueType::INT64 || e == ValueType::UINT64 ||
             e == ValueType::INT8 || e == ValueType::UINT8 || e == ValueType::INT16 || e == ValueType::UINT16 ||
             e == ValueType::BOOL) {
    std::vector<Value> items;
    const auto v = *f.get_int_array(key);
    for (int64_t x : v) {
      switch (e) {
        case ValueType::INT32: items.push_back(Value::i32(static_cast<int32_t>(x))); break;
        case ValueType::UINT32: items.push_back(Value::u32(static_cast<uint32_t>(x))); break;
        case ValueType::INT64: items.push_back(Value::i64(x)); break;
        case ValueType::UINT64: items.push_back(Value::u64(static_cast<uint64_t>(x))); break;
        case ValueType::INT8: items.push_back(Value::i8(static_cast<int8_t>(x))); break;
        case ValueType::UINT8: items.push_back(Value::u8(static_cast<uint8_t>(x))); break;
        case ValueType::INT16: items.push_back(Value::i16(static_cast<int16_t>(x))); break;
        case ValueType::UINT16: items.push_back(Value::u16(static_cast<uint16_t>(x))); break;
        default: items.push_back(Value::boolean(x != 0)); break;
      }
    }
    w.set(key, Value::array(e, items));
  } else {
    throw std::runtime_error("unsupported array type for " + key);
  }
}

int adversarial_draft(const std::string& in, const std::string& out, uint64_t seed) {
  auto f = File::open(in);
  Writer w;
  for (const std::string& key : f->keys()) copy_key(*f, w, key);
  std::mt19937_64 rng(seed);
  for (const tandem::gguf::TensorInfo& t : f->tensors()) {
    const uint8_t* data = f->tensor_data(t);
    if ((t.name == "token_embd.weight" || t.name == "output.weight") && t.dims.size() == 2) {
      // Rows are whole quantization blocks, so any row order is a valid tensor.
      const size_t rows = static_cast<size_t>(t.dims[1]), row_bytes = t.nbytes / rows;
      std::vector<size_t> perm(rows);
      std::iota(perm.begin(), perm.end(), size_t{0});
      std::shuffle(perm.begin(), perm.end(), rng);
      std::vector<uint8_t> shuffled(t.nbytes);
      for (size_t r = 0; r < rows; ++r) std::memcpy(&shuffled[r * row_bytes], data + perm[r] * row_bytes, row_bytes);
      w.add_tensor(t.name, t.type, t.dims, shuffled.data(), shuffled.size());
      std::printf("permuted %zu rows of %s\n", rows, t.name.c_str());
    } else {
      w.add_tensor(t.name, t.type, t.dims, data, t.nbytes);
    }
  }
  w.write(out, f->version());
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

int cost_model(int argc, char** argv) {
  tandem::LoadOptions lo;
  tandem::CalibrationOptions co;
  co.extra_n = {16, 32, 64};
  for (int i = 2; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (!std::strcmp(argv[i], "-m")) lo.model_path = next();
    else if (!std::strcmp(argv[i], "-md")) lo.draft_model_path = next();
    else if (!std::strcmp(argv[i], "-k")) co.k_max = std::stoi(next());
    else if (!std::strcmp(argv[i], "--reps")) co.reps = std::stoi(next());
    else if (!std::strcmp(argv[i], "-t")) lo.threads = std::stoi(next());
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  lo.context = 1024;
  auto e = tandem::Engine::load(lo);
  const auto m = tandem::calibrate_cost_model(*e, co);
  std::printf("%s\n\n| k | T_target(k+1) ms | r(k) |\n|---|---|---|\n", e->info().backend.c_str());
  for (int k = 0; k <= co.k_max; ++k) std::printf("| %d | %.1f | %.3f |\n", k, m->target_ms(k + 1), m->r(k));
  if (m->has_draft()) {
    std::printf("\ndraft step %.1f ms, c = %.3f; catch-up of 16 / 32 / 64 tokens = %.2f / %.2f / %.2f target steps\n",
                m->draft_ms(1), m->c(), m->catch_up(16), m->catch_up(32), m->catch_up(64));
  }
  std::printf("\npredicted speedup S(alpha, k):\n| alpha |");
  for (int k = 1; k <= co.k_max; ++k) std::printf(" k=%d |", k);
  std::printf("\n|---|");
  for (int k = 1; k <= co.k_max; ++k) std::printf("---|");
  std::printf("\n");
  for (double a : {0.5, 0.6, 0.7, 0.8, 0.9, 0.95}) {
    std::printf("| %.2f |", a);
    for (int k = 1; k <= co.k_max; ++k) std::printf(" %.2f |", m->predict_speedup(a, k));
    std::printf("\n");
  }
  return 0;
}

std::vector<double> number_list(const std::string& s) {
  std::vector<double> v;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) v.push_back(std::stod(item));
  if (v.empty()) throw std::invalid_argument("empty list '" + s + "'");
  return v;
}

// The cost model of the first entry of a cost cache file whose key contains `match`.
tandem::CostModel cached_costs(const std::string& path, const std::string& match) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::stringstream text;
  text << f.rdbuf();
  const auto root = boost::json::parse(text.str());
  const auto* models = root.as_object().if_contains("models");
  if (models && models->is_object())
    for (const auto& [key, entry] : models->as_object())
      if (std::string(key).find(match) != std::string::npos)
        if (auto m = tandem::load_cached_cost_model(path, std::string(key))) return *m;
  throw std::runtime_error("no cost model in " + path + " with '" + match + "' in its key");
}

struct Trace {
  std::string set;
  tandem::AgreementTrace agreement;
};

std::vector<Trace> read_traces(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::vector<Trace> out;
  int line_no = 0;
  for (std::string line; std::getline(f, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const auto o = boost::json::parse(line).as_object();
      std::vector<tandem::SpeculativeStep> steps;
      for (const auto& s : o.at("steps").as_array()) {
        const auto& pair = s.as_array();
        steps.push_back({static_cast<int32_t>(pair.at(0).to_number<int64_t>()),
                         static_cast<int32_t>(pair.at(1).to_number<int64_t>())});
      }
      out.push_back({std::string(o.at("set").as_string()),
                     tandem::AgreementTrace::from_steps(steps, static_cast<int32_t>(o.at("n_generated").to_number<int64_t>()),
                                                        static_cast<int32_t>(o.at("prompt_tokens").to_number<int64_t>()))});
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ":" + std::to_string(line_no) + ": " + e.what());
    }
  }
  if (out.empty()) throw std::runtime_error(path + " holds no traces");
  return out;
}

int replay_policies(int argc, char** argv) {
  std::string traces_path = argv[2], costs_arg, cache, match;
  int32_t n = 96, k_max = 4, fixed_max = 6;
  std::vector<double> priors{0.6}, weights{2.0}, decays{0.95};
  double start_budget = -1.0;
  for (int i = 3; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (!std::strcmp(argv[i], "--costs")) costs_arg = next();
    else if (!std::strcmp(argv[i], "--cost-cache")) cache = next();
    else if (!std::strcmp(argv[i], "--match")) match = next();
    else if (!std::strcmp(argv[i], "-n")) n = std::stoi(next());
    else if (!std::strcmp(argv[i], "-k")) k_max = std::stoi(next());
    else if (!std::strcmp(argv[i], "--fixed-max")) fixed_max = std::stoi(next());
    else if (!std::strcmp(argv[i], "--prior")) priors = number_list(next());
    else if (!std::strcmp(argv[i], "--weight")) weights = number_list(next());
    else if (!std::strcmp(argv[i], "--decay")) decays = number_list(next());
    else if (!std::strcmp(argv[i], "--start-budget")) start_budget = std::stod(next());
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  tandem::CostModel costs;
  if (!costs_arg.empty()) {
    const auto v = number_list(costs_arg);  // c, then r(1), r(2), ...
    std::vector<double> r{1.0};
    r.insert(r.end(), v.begin() + 1, v.end());
    costs = tandem::CostModel::from_ratios(v[0], r);
  } else if (!cache.empty()) {
    costs = cached_costs(cache, match);
  } else {
    throw std::invalid_argument("replay needs --costs or --cost-cache");
  }
  const auto traces = read_traces(traces_path);
  std::vector<std::string> sets;
  for (const auto& t : traces)
    if (std::find(sets.begin(), sets.end(), t.set) == sets.end()) sets.push_back(t.set);

  std::printf("cost model: %s; c = %.3f, r(1..%d) =", costs.key().c_str(), costs.c(), fixed_max);
  for (int k = 1; k <= fixed_max; ++k) std::printf(" %.3f", costs.r(k));
  std::printf("\n%zu traces, %d tokens each at most, policies with k <= %d\n\n", traces.size(), n, k_max);

  struct Row {
    std::string name;
    std::function<std::unique_ptr<tandem::SpeculationPolicy>()> make;
    int32_t k;
  };
  std::vector<Row> rows;
  for (int k = 1; k <= fixed_max; ++k)
    rows.push_back({"fixed k=" + std::to_string(k), [] { return std::make_unique<tandem::FixedPolicy>(); }, k});
  for (double p : priors)
    for (double w : weights)
      for (double d : decays) {
        tandem::AdaptiveConfig cfg;
        cfg.alpha_prior = p;
        cfg.prior_weight = w;
        cfg.decay = d;
        cfg.start_budget = start_budget;
        cfg.batch_aware = true;
        cfg.measure_overhead = false;
        char name[96];
        std::snprintf(name, sizeof name, "goodput prior %.2f weight %g decay %.3f", p, w, d);
        rows.push_back({name, [cfg, &costs] { return std::make_unique<tandem::AdaptivePolicy>(costs, cfg); }, k_max});
      }
  std::printf("| policy |");
  for (const auto& s : sets) std::printf(" %s | / best fixed |", s.c_str());
  std::printf(" steps per k (all sets) | bounded steps |\n|---|");
  for (size_t i = 0; i < sets.size(); ++i) std::printf("---|---|");
  std::printf("---|---|\n");
  std::map<std::string, double> best;
  std::vector<std::vector<double>> speed(rows.size());
  std::vector<tandem::ReplayResult> total(rows.size());  // over every set
  for (size_t ri = 0; ri < rows.size(); ++ri) {
    for (const auto& s : sets) {
      tandem::ReplayResult set;
      for (const auto& t : traces) {
        if (t.set != s) continue;
        auto pol = rows[ri].make();
        set.add(tandem::replay(*pol, t.agreement, costs, rows[ri].k, n));
      }
      total[ri].add(set);
      speed[ri].push_back(set.speedup());
      if (rows[ri].name.rfind("fixed", 0) == 0) best[s] = std::max(best[s], speed[ri].back());
    }
  }
  for (size_t ri = 0; ri < rows.size(); ++ri) {
    std::printf("| %s |", rows[ri].name.c_str());
    for (size_t si = 0; si < sets.size(); ++si) std::printf(" %.3f× | %.3f |", speed[ri][si], speed[ri][si] / best[sets[si]]);
    std::printf(" ");
    const auto& hist = total[ri].steps_per_k;
    for (size_t k = 0; k < hist.size(); ++k) std::printf("%s%lld", k ? "/" : "", static_cast<long long>(hist[k]));
    std::printf(" | %d |\n", total[ri].unknown);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 4 && !std::strcmp(argv[1], "adversarial-draft")) {
      uint64_t seed = 1;
      if (argc >= 6 && !std::strcmp(argv[4], "--seed")) seed = std::stoull(argv[5]);
      return adversarial_draft(argv[2], argv[3], seed);
    }
    if (argc >= 2 && !std::strcmp(argv[1], "cost-model")) return cost_model(argc, argv);
    if (argc >= 3 && !std::strcmp(argv[1], "replay")) return replay_policies(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: %s adversarial-draft IN.gguf OUT.gguf [--seed S]\n"
               "       %s cost-model -m TARGET.gguf [-md DRAFT.gguf] [-k 8] [--reps 5] [-t N]\n"
               "       %s replay TRACES.jsonl (--costs C,R1,R2,... | --cost-cache FILE --match S) [-n 96] [-k 4]\n"
               "              [--fixed-max 6] [--prior 0.6,...] [--weight 2,...] [--decay 0.95,...] [--start-budget -1]\n",
               argv[0], argv[0], argv[0]);
  return 2;
}
