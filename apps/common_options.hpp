// Options several subcommands share, registered the same way everywhere.
#pragma once

namespace CLI {
class App;
}

namespace tandem {
struct LoadOptions;
struct SamplingParams;
enum class VerifyMode;
}  // namespace tandem

namespace tandem::cli {

// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --seed.
void add_sampling_options(CLI::App& sub, SamplingParams& s);
// --verify rejection|coupled.
void add_verify_option(CLI::App& sub, VerifyMode& mode);
// -t/--threads, -c/--ctx, --kv-type.
void add_runtime_options(CLI::App& sub, LoadOptions& load);

}  // namespace tandem::cli
