// `tandem draft-vocab`: counts tokens over text, for the draft's frequency-ranked vocabulary
// (LoadOptions::draft_vocab, draft/vocab_ranking.hpp). Text comes from files and folders
// (--text: what the project ships, or the user's own documents) and from the model's own
// answers to prompts (--prompts with --generate: the distribution the draft must guess,
// which is what FR-Spec ranks by). The counts file goes to --draft-vocab-counts.
#include <CLI/CLI.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "apps/commands.hpp"
#include "apps/common_options.hpp"
#include "draft/vocab_ranking.hpp"
#include "engine/api/chat_prompt.hpp"
#include "tandem/engine.hpp"

namespace tandem::cli {
namespace {

struct DraftVocabArgs {
  LoadOptions load;
  std::vector<std::string> text;
  std::string prompts, out;
  int32_t generate = 0;
  size_t max_file_bytes = 4 << 20;
};

// A file worth counting: not too large, no NUL bytes (binary files would skew the counts).
bool read_text_file(const std::filesystem::path& p, size_t max_bytes, std::string& out) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec) || std::filesystem::file_size(p, ec) > max_bytes) return false;
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return out.find('\0') == std::string::npos;
}

int run(const DraftVocabArgs& a) {
  auto engine = Engine::load(a.load);
  const ModelInfo info = engine->info();
  TokenCounts counts(info.n_vocab);
  size_t files = 0;
  for (const std::string& root : a.text) {
    std::vector<std::filesystem::path> paths;
    if (std::filesystem::is_directory(root)) {
      // Hidden entries (.git, .cache) are not text anyone wrote for the model.
      std::filesystem::recursive_directory_iterator it(root, std::filesystem::directory_options::skip_permission_denied);
      for (; it != std::filesystem::recursive_directory_iterator(); ++it) {
        const std::string name = it->path().filename().string();
        if (!name.empty() && name[0] == '.') {
          if (it->is_directory()) it.disable_recursion_pending();
          continue;
        }
        if (it->is_regular_file()) paths.push_back(it->path());
      }
      std::sort(paths.begin(), paths.end());
    } else {
      if (!std::filesystem::exists(root)) throw std::invalid_argument("--text: no such file or folder: " + root);
      paths.push_back(root);
    }
    std::string body;
    for (const auto& p : paths)
      if (read_text_file(p, a.max_file_bytes, body)) {
        counts.add(engine->tokenize(body, false, false));
        ++files;
      }
  }
  const uint64_t from_text = counts.total();
  uint64_t generated = 0;
  if (!a.prompts.empty()) {
    std::ifstream f(a.prompts);
    if (!f) throw std::invalid_argument("--prompts: cannot read " + a.prompts);
    const ChatPrompt chat = ChatPrompt::from_model(info.path, *engine);
    GenerateOptions g;
    g.max_tokens = a.generate;
    std::string line;
    for (size_t lineno = 1; std::getline(f, line); ++lineno) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      boost::system::error_code ec;
      const boost::json::value v = boost::json::parse(line, ec);
      if (ec || !v.is_object() || !v.as_object().contains("prompt") || !v.at("prompt").is_string())
        throw std::invalid_argument(a.prompts + ":" + std::to_string(lineno) + ": expected {\"prompt\": \"...\"}");
      const std::string prompt = chat.render({{"user", std::string(v.at("prompt").as_string())}});
      const GenerateResult r = engine->generate_tokens(chat.tokenize(*engine, prompt), g);
      counts.add(r.tokens);
      generated += r.tokens.size();
    }
  }
  if (counts.total() == 0) throw std::invalid_argument("nothing was counted (give --text, or --prompts with --generate)");
  save_token_counts(a.out, counts);
  size_t distinct = 0;
  for (uint64_t c : counts.counts) distinct += c > 0;
  std::printf("counted %llu tokens (%llu from %zu files, %llu generated); %zu distinct of %d; wrote %s\n",
              static_cast<unsigned long long>(counts.total()), static_cast<unsigned long long>(from_text), files,
              static_cast<unsigned long long>(generated), distinct, info.n_vocab, a.out.c_str());
  return 0;
}

}  // namespace

Command add_draft_vocab(CLI::App& app) {
  auto a = std::make_shared<DraftVocabArgs>();
  auto* sub = app.add_subcommand("draft-vocab", "Count tokens over text: the ranking of a reduced draft vocabulary");
  sub->add_option("-m,--model", a->load.model_path, "Model (GGUF file or Hugging Face folder) whose tokenizer counts (the draft's or the target's)")
      ->required()
      ->check(CLI::ExistingPath);
  sub->add_option("--text", a->text, "Text files or folders to count (folders recursively; binary files are skipped)");
  sub->add_option("--prompts", a->prompts, "JSONL of {\"prompt\": ...}: the model's answers are counted too")
      ->check(CLI::ExistingFile);
  sub->add_option("--generate", a->generate, "Tokens to generate per prompt (with --prompts)")->capture_default_str();
  sub->add_option("-o,--out", a->out, "Counts file to write (for --draft-vocab-counts)")->required();
  cli::add_runtime_options(*sub, a->load);
  return {sub, [a] {
    if (!a->prompts.empty() && a->generate <= 0) throw std::invalid_argument("--prompts needs --generate N");
    return run(*a);
  }};
}

}  // namespace tandem::cli
