// `tandem chat`: an interactive conversation in the terminal. Each turn renders the whole
// conversation with the model's chat template and streams the reply; Ctrl-C stops a reply
// (and quits at the prompt). Works on piped stdin too: one user message per line.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "apps/common_options.hpp"
#include "apps/server/chat_prompt.hpp"
#include "apps/tune/config.hpp"
#include "tandem/engine.hpp"

namespace tandem::cli {
namespace {

struct ChatArgs {
  LoadOptions load;
  GenerateOptions gen;
  std::string system;
  std::string draft_mode;
  ConstraintArgs constraint;
  bool verbose = false;
};

// Ctrl-C while a reply streams stops the reply; at the prompt it quits as usual.
std::atomic<bool> g_generating{false};
std::atomic<bool> g_stop{false};

extern "C" void on_sigint(int) {
  if (g_generating.load()) {
    g_stop.store(true);
  } else {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
}

DraftMode draft_mode(const ChatArgs& a) {
  if (a.draft_mode == "ngram") return DraftMode::Ngram;
  if (a.draft_mode == "none") return DraftMode::None;
  if (a.draft_mode == "model" || (a.draft_mode.empty() && !a.load.draft_model_path.empty())) {
    if (a.load.draft_model_path.empty()) throw std::invalid_argument("--draft model needs --model-draft");
    return DraftMode::Model;
  }
  if (!a.draft_mode.empty()) throw std::invalid_argument("--draft must be model, ngram or none");
  return DraftMode::None;
}

// One user message: a line, continued onto the next while it ends in a backslash.
bool read_message(bool interactive, std::string& out) {
  out.clear();
  std::string line;
  if (interactive) {
    std::fputs("\n> ", stdout);
    std::fflush(stdout);
  }
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\\') {
      out += line.substr(0, line.size() - 1) + "\n";
      if (interactive) {
        std::fputs(". ", stdout);
        std::fflush(stdout);
      }
      continue;
    }
    out += line;
    return true;
  }
  return !out.empty();
}

// Prompt tokens for the conversation; drops the oldest exchanges (never the system
// message or the newest user message) until the prompt leaves room for a reply.
std::vector<int32_t> fit_conversation(const Engine& engine, const server::ChatPrompt& chat,
                                      std::vector<ChatMessage>& messages, int32_t budget) {
  for (;;) {
    std::vector<int32_t> ids = chat.tokenize(engine, chat.render(messages));
    if (static_cast<int32_t>(ids.size()) <= budget) return ids;
    const size_t first = !messages.empty() && messages[0].role == "system" ? 1 : 0;
    if (messages.size() - first <= 1) return {};  // the newest message alone is too long
    messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(first));
  }
}

int run_chat(const ChatArgs& a) {
  auto engine = Engine::load(a.load);
  const ModelInfo info = engine->info();
  print_backend_note(info);
  const server::ChatPrompt chat = server::ChatPrompt::from_model(a.load.model_path, *engine);
  GenerateOptions gen = a.gen;
  gen.speculative.mode = draft_mode(a);
  gen.add_special = false;  // ChatPrompt::tokenize adds BOS where the model wants it
  gen.grammar = constraint_grammar(a.constraint);  // every reply
  // adaptive and goodput decide from this machine's measured costs (cached after the first run).
  const std::string costs = cli::ensure_cost_model(*engine, gen.speculative, nullptr);
  if (a.verbose && !costs.empty()) std::fprintf(stderr, "%s\n", costs.c_str());

  const bool interactive = isatty(STDIN_FILENO) != 0;
  if (interactive) {
    std::fprintf(stderr, "%s (%s, context %d), %s chat template. /reset clears the conversation, /exit quits;\n"
                 "end a line with \\ to continue it; Ctrl-C stops a reply.\n",
                 info.name.empty() ? info.path.c_str() : info.name.c_str(), info.architecture.c_str(), info.context,
                 chat.from_gguf() ? "the model's" : "ChatML");
  }
  std::signal(SIGINT, on_sigint);

  std::vector<ChatMessage> messages;
  if (!a.system.empty()) messages.push_back({"system", a.system});
  std::string input;
  while (read_message(interactive, input)) {
    if (input.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    if (input == "/exit" || input == "/quit") break;
    if (input == "/reset") {
      messages.resize(!a.system.empty() ? 1 : 0);
      std::fputs("(conversation cleared)\n", stderr);
      continue;
    }
    messages.push_back({"user", input});
    // Room for at least a short reply; the reply itself is capped by -n and the context.
    const int32_t reply_room = std::min(gen.max_tokens, std::max<int32_t>(info.context / 4, 1));
    std::vector<int32_t> prompt;
    try {
      prompt = fit_conversation(*engine, chat, messages, info.context - reply_room);
    } catch (const ChatTemplateError& e) {
      std::fprintf(stderr, "chat template: %s\n", e.what());
      messages.pop_back();
      continue;
    }
    if (prompt.empty()) {
      std::fprintf(stderr, "(message too long for the context of %d tokens)\n", info.context);
      messages.pop_back();
      continue;
    }
    GenerateOptions turn = gen;
    turn.max_tokens = std::min(gen.max_tokens, info.context - static_cast<int32_t>(prompt.size()));
    g_stop = false;
    g_generating = true;
    const GenerateResult r = engine->generate_tokens(prompt, turn, [](std::string_view text, int32_t) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      return !g_stop.load();
    });
    g_generating = false;
    std::fputs("\n", stdout);
    std::fflush(stdout);
    messages.push_back({"assistant", r.text});
    if (a.verbose) {
      const Timings& t = r.timings;
      std::fprintf(stderr, "[prompt %d tokens %.1f tok/s | reply %d tokens %.1f tok/s | %s", t.n_prompt,
                   t.prefill_tokens_per_s(), t.n_generated, t.decode_tokens_per_s(), to_string(r.finish));
      if (turn.speculative.mode != DraftMode::None)
        std::fprintf(stderr, " | accepted %.1f%%, mean length %.2f", 100.0 * r.speculative.acceptance_rate(),
                     r.speculative.mean_accepted_length());
      std::fputs("]\n", stderr);
    }
  }
  return 0;
}

}  // namespace

Command add_chat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  a->gen.max_tokens = 512;
  a->gen.sampling.temperature = 0.7f;
  a->gen.speculative.policy = "goodput";  // never slower than plain decoding (as generate and serve)
  auto* sub = app.add_subcommand("chat", "Interactive chat in the terminal, with the model's chat template");
  sub->add_option("-m,--model", a->load.model_path, "Model: a GGUF file or a Hugging Face folder")->required()->check(CLI::ExistingPath);
  sub->add_option("--model-draft", a->load.draft_model_path, "Draft model (GGUF file or Hugging Face folder) for speculative decoding (alias: -md)")
      ->check(CLI::ExistingPath);
  cli::add_draft_vocab_options(*sub, a->load);
  sub->add_option("--draft", a->draft_mode, "Proposer: model (default with -md), ngram, none");
  sub->add_option("--draft-max", a->gen.speculative.draft_max, "Tokens drafted per step (k)")->capture_default_str();
  cli::add_tree_options(*sub, a->gen.speculative);
  sub->add_option("--policy", a->gen.speculative.policy,
                  "How many tokens to draft per step: fixed, confidence, adaptive, goodput")
      ->capture_default_str()
      ->check(CLI::IsMember({"fixed", "confidence", "adaptive", "goodput"}));
  sub->add_option("-s,--system", a->system, "System message");
  sub->add_option("-n,--max-tokens", a->gen.max_tokens, "Longest reply in tokens")->capture_default_str();
  add_sampling_options(*sub, a->gen.sampling);
  add_constraint_options(*sub, a->constraint);
  add_verify_option(*sub, a->gen.speculative.verify);
  add_runtime_options(*sub, a->load);
  sub->add_flag("-v,--verbose", a->verbose, "Print speed (and speculation) after each reply");
  return {sub, [a] { return run_chat(*a); }};
}

}  // namespace tandem::cli
