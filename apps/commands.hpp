// Each `tandem` subcommand registers its options on the CLI11 app and returns the function
// that runs it. main.cpp only wires them together.
#pragma once
#include <functional>

namespace CLI {
class App;
}

namespace tandem::cli {

// A registered subcommand and the function that runs it once its options are parsed.
struct Command {
  CLI::App* sub;
  std::function<int()> run;
};

Command add_generate(CLI::App& app);
Command add_info(CLI::App& app);
Command add_serve(CLI::App& app);
Command add_chat(CLI::App& app);
Command add_tune(CLI::App& app);
Command add_draft_vocab(CLI::App& app);

}  // namespace tandem::cli
