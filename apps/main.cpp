// `tandem`: the command-line front end. Subcommands live in cmd_*.cpp.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <exception>
#include <vector>

#include "apps/commands.hpp"
#include "kernels/backend_factory.hpp"
#include "tandem/version.hpp"

namespace {
// llama.cpp users type -md for the draft model; CLI11 short options are one letter, so the
// two-letter spelling is rewritten to its long form before parsing.
std::vector<std::string> normalise_args(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) args.push_back(std::strcmp(argv[i], "-md") == 0 ? "--model-draft" : argv[i]);
  return args;  // CLI11 takes the arguments in reverse order
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tandem: speculative-decoding LLM inference engine"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("tandem ") + tandem::version_string() + " (backends: cpu" +
                                        (tandem::kernels::cuda_backend_built() ? ", cuda" : "") +
                                        ", cuda-emulated)");
  const std::vector<tandem::cli::Command> commands = {
      tandem::cli::add_generate(app),
      tandem::cli::add_info(app),
      tandem::cli::add_serve(app),
      tandem::cli::add_chat(app),
      tandem::cli::add_tune(app),
      tandem::cli::add_draft_vocab(app),
  };
  try {
    app.parse(normalise_args(argc, argv));
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  spdlog::set_pattern("[%l] %v");
  try {
    for (const auto& c : commands)
      if (c.sub->parsed()) return c.run();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
