// `tandem`: the command-line front end. Subcommands live in cmd_*.cpp.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <exception>
#include <vector>

#include "apps/commands.hpp"
#include "tandem/version.hpp"

int main(int argc, char** argv) {
  CLI::App app{"tandem: speculative-decoding LLM inference engine"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("tandem ") + tandem::version_string() + " (backends: cpu)");
  const std::vector<tandem::cli::Command> commands = {
      tandem::cli::add_generate(app),
      tandem::cli::add_info(app),
  };
  CLI11_PARSE(app, argc, argv);
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
