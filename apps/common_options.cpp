#include "apps/common_options.hpp"

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "engine/grammar/json_schema.hpp"

#include "kernels/backend_factory.hpp"
#include "tandem/engine.hpp"

namespace tandem::cli {

void add_sampling_options(CLI::App& sub, SamplingParams& s) {
  sub.add_option("--temp", s.temperature, "Temperature (0 = greedy)")->capture_default_str();
  sub.add_option("--top-k", s.top_k, "Top-k (0 = off)")->capture_default_str();
  sub.add_option("--top-p", s.top_p, "Top-p (1 = off)")->capture_default_str();
  sub.add_option("--min-p", s.min_p, "Min-p (0 = off)")->capture_default_str();
  sub.add_option("--repeat-penalty", s.repetition_penalty, "Repetition penalty (1 = off)")->capture_default_str();
  sub.add_option_function<std::vector<std::string>>(
         "-l,--logit-bias",
         [&s](const std::vector<std::string>& v) {
           for (const std::string& e : v) {
             const auto [id, bias] = parse_logit_bias(e);
             if (!s.logit_bias.emplace(id, bias).second)
               throw CLI::ValidationError("--logit-bias", "token " + std::to_string(id) + " is given twice");
           }
         },
         "Add BIAS to token ID's logit, as ID=BIAS or llama.cpp's ID+BIAS / ID-BIAS (-100 all but bans it); "
         "repeatable")
      ->type_name("ID=BIAS")
      ->take_all()
      ->allow_extra_args(false);
  sub.add_option("--seed", s.seed,
                 "Random seed; the same seed gives the same text (default: a fresh one each run, reported with the "
                 "output)");
}

std::pair<int32_t, float> parse_logit_bias(const std::string& e) {
  auto bad = [&e] {
    return CLI::ValidationError("--logit-bias",
                                "'" + e + "' is not ID=BIAS (or ID+BIAS, ID-BIAS): a token id and a finite number");
  };
  size_t i = 0;
  while (i < e.size() && e[i] >= '0' && e[i] <= '9') ++i;
  if (i == 0 || i > 9 || i == e.size()) throw bad();
  const auto id = static_cast<int32_t>(std::stol(e.substr(0, i)));
  const size_t from = e[i] == '=' ? i + 1 : i;
  if (e[i] != '=' && e[i] != '+' && e[i] != '-') throw bad();
  const std::string v = e.substr(from);
  if (v.empty()) throw bad();
  size_t used = 0;
  float bias = 0.0f;
  try {
    bias = std::stof(v, &used);
  } catch (const std::exception&) {
    throw bad();
  }
  if (used != v.size() || !std::isfinite(bias)) throw bad();
  return {id, bias};
}

void add_constraint_options(CLI::App& sub, ConstraintArgs& c) {
  sub.add_option("--grammar", c.grammar, "Constrain the output to this GBNF grammar (llama.cpp's format)");
  sub.add_option("--grammar-file", c.grammar_file, "Constrain the output to the GBNF grammar in this file")
      ->check(CLI::ExistingFile);
  sub.add_option("--json-schema", c.json_schema,
                 "Constrain the output to JSON valid against this JSON Schema (text, or @file)");
  sub.add_flag("--json-object", c.json_object, "Constrain the output to one JSON object");
}

namespace {
std::string read_file(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(std::string(flag) + ": cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

std::string constraint_grammar(const ConstraintArgs& c) {
  const int given = !c.grammar.empty() + !c.grammar_file.empty() + !c.json_schema.empty() + c.json_object;
  if (given > 1) throw std::invalid_argument("give one of --grammar, --grammar-file, --json-schema, --json-object");
  if (!c.grammar.empty()) return c.grammar;
  if (!c.grammar_file.empty()) return read_file(c.grammar_file, "--grammar-file");
  if (c.json_object) return json_object_gbnf();
  if (!c.json_schema.empty()) {
    const std::string schema =
        c.json_schema[0] == '@' ? read_file(c.json_schema.substr(1), "--json-schema") : c.json_schema;
    return json_schema_to_gbnf(schema);  // SchemaError is an std::invalid_argument
  }
  return "";
}

void add_verify_option(CLI::App& sub, VerifyMode& mode) {
  sub.add_option_function<std::string>(
         "--verify", [&mode](const std::string& v) { mode = parse_verify_mode(v); },
         "Sampled output: rejection (highest acceptance; the text for a seed depends on k and batching) or coupled "
         "(Gumbel-max keyed by seed and position: the same text with or without speculation)")
      ->check(CLI::IsMember({"rejection", "coupled"}))
      ->default_str(to_string(mode));
}

void add_runtime_options(CLI::App& sub, LoadOptions& load) {
  sub.add_option("-t,--threads", load.threads, "CPU threads (0 = all cores)")->capture_default_str();
  sub.add_flag("--pin-threads", load.pin_threads, "Bind each CPU worker thread to one core");
  sub.add_option("-c,--ctx", load.context, "Context length (0 = min(model, 4096))")->capture_default_str();
  sub.add_option("--kv-type", load.kv_type, "KV cache type: f16|f32")->capture_default_str();
  sub.add_option("--weight-type", load.weight_type,
                 "Quantize the target's matrix weights at load: keep (as stored), q4_0, q4_1, q5_0, q5_1, q8_0, q4_k "
                 "(for float models such as a Hugging Face folder's bf16: GGUF speed; the output is then the "
                 "quantized model's)")
      ->check(CLI::IsMember({"keep", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k"}, CLI::ignore_case))
      ->capture_default_str();
  sub.add_option("--device", load.device,
                 "Backend: auto (CUDA when a device is present, else CPU), cpu, cuda, cuda-emulated (tests)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda", "cuda-emulated"}))
      ->capture_default_str();
  sub.add_option_function<std::string>(
      "--gpu-mem", [&load](const std::string& v) { load.gpu_mem_bytes = parse_size("--gpu-mem", v); },
      "CUDA: device memory for both models' weights, KV caches and scratch (e.g. 20GiB; default 90% of free)");
}

void add_draft_vocab_options(CLI::App& sub, LoadOptions& load) {
  sub.add_option("--draft-vocab", load.draft_vocab,
                 "Draft logits over its N most frequent tokens only (FR-Spec; 0 = the whole vocabulary). "
                 "Outputs are unchanged: the target verifies")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub.add_option("--draft-type", load.draft_type,
                 "Re-quantize the draft's matrix weights at load: auto (Q4_0 for those stored above 5 bits per "
                 "weight), keep (as stored), q4_0, q4_1, q5_0, q5_1, q8_0, q4_k. A cheaper draft may accept less; "
                 "outputs are unchanged")
      ->check(CLI::IsMember({"auto", "keep", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k"}, CLI::ignore_case))
      ->capture_default_str();
  sub.add_option("--draft-vocab-counts", load.draft_vocab_counts,
                 "Token counts that rank the draft vocabulary (written by `tandem draft-vocab`; "
                 "default: the order of token ids)")
      ->check(CLI::ExistingFile);
}

void add_lookup_options(CLI::App& sub, SpeculativeOptions& so) {
  sub.add_flag("--lookup,!--no-lookup", so.lookup,
               "With a draft model: verify prompt lookup's drafts (what followed the last tokens where they occurred "
               "before) instead of running the draft, while they pay more (default on)");
  sub.add_option("--lookup-min", so.lookup_min, "Shortest match of the last tokens prompt lookup drafts from")
      ->check(CLI::Range(1, kMaxLookupMin))
      ->capture_default_str();
}

void add_tree_options(CLI::App& sub, SpeculativeOptions& so) {
  sub.add_option("--tree-width", so.tree_width,
                 "With a draft model: draft a token tree with up to this many children a node, verified in one target "
                 "pass (1: a chain)")
      ->check(CLI::Range(1, kMaxTreeNodes))
      ->capture_default_str();
  sub.add_option("--tree-nodes", so.tree_nodes, "Nodes of a token tree (0: tree width x draft max, at most 64)")
      ->check(CLI::Range(0, kMaxTreeNodes))
      ->capture_default_str();
}

size_t parse_size(const std::string& flag, const std::string& s) {
  size_t bytes = 0;
  try {
    bytes = kernels::parse_memory_size(s);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(flag + ": " + e.what());
  }
  if (bytes == 0) throw std::invalid_argument(flag + " must be positive");
  return bytes;
}

void print_backend_note(const ModelInfo& info) {
  if (!info.backend_note.empty()) std::fprintf(stderr, "note: %s\n", info.backend_note.c_str());
}

}  // namespace tandem::cli
