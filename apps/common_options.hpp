// Options several subcommands share, registered the same way everywhere.
#pragma once

namespace CLI {
class App;
}

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace tandem {
struct LoadOptions;
struct ModelInfo;
struct SamplingParams;
struct SpeculativeOptions;
enum class VerifyMode;
}  // namespace tandem

namespace tandem::cli {

// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --logit-bias, --seed.
void add_sampling_options(CLI::App& sub, SamplingParams& s);
// One --logit-bias entry: "ID=BIAS", or llama.cpp's "ID+BIAS" / "ID-BIAS". Throws
// CLI::ValidationError for anything else (a non-finite bias included).
std::pair<int32_t, float> parse_logit_bias(const std::string& e);
// --verify rejection|coupled.
void add_verify_option(CLI::App& sub, VerifyMode& mode);
// Constrained output: --grammar GBNF, --grammar-file PATH, --json-schema JSON|@PATH,
// --json-object. At most one; constraint_grammar() turns the given one into GBNF.
struct ConstraintArgs {
  std::string grammar, grammar_file, json_schema;
  bool json_object = false;
};
void add_constraint_options(CLI::App& sub, ConstraintArgs& c);
// "" when none was given. Throws std::invalid_argument (unreadable file, bad schema, two given).
std::string constraint_grammar(const ConstraintArgs& c);
// -t/--threads, --pin-threads, -c/--ctx, --kv-type, --device, --gpu-mem.
void add_runtime_options(CLI::App& sub, LoadOptions& load);
// --draft-vocab N, --draft-vocab-counts FILE: the draft's reduced vocabulary (FR-Spec).
void add_draft_vocab_options(CLI::App& sub, LoadOptions& load);
// --lookup/--no-lookup, --lookup-min N: prompt lookup ahead of the draft model.
void add_lookup_options(CLI::App& sub, SpeculativeOptions& so);
// --tree-width, --tree-nodes: token trees (SpeculativeOptions::tree_width, tree_nodes).
void add_tree_options(CLI::App& sub, SpeculativeOptions& so);
// "1048576", "512M", "512MiB", "1.5GiB", "64k" → bytes (> 0; units are powers of 1024, as
// kernels::parse_memory_size reads them); `flag` names the option in errors.
size_t parse_size(const std::string& flag, const std::string& s);
// The backend note of a loaded engine (why --device auto chose the CPU), on stderr; nothing
// when there is none.
void print_backend_note(const ModelInfo& info);

}  // namespace tandem::cli
