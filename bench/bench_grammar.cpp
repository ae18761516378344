// Constrained decoding's cost, measured side by side in one run on the same engine:
//   1. token masks on the model's real vocabulary: the first computation of each state's
//      mask (cold) and a cached one (warm), along a document of the schema;
//   2. tokens/s with a JSON schema against the same requests unconstrained, speculation off,
//      by prompt lookup (n-gram) and by the draft model (when -md is given), interleaved per
//      prompt so machine noise hits every mode alike. Greedy; the ratios are the figures.
//
//   bench_grammar -m TARGET.gguf [-md DRAFT.gguf] [-n 96] [-k 4] [--reps 1]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "engine/grammar/json_schema.hpp"
#include "engine/grammar/token_grammar.hpp"
#include "engine/runtime/engine_access.hpp"
#include "engine/runtime/grammar_cache.hpp"
#include "tandem/engine.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

const char* const kSchema = R"({"type": "object", "properties": {
  "name": {"type": "string"}, "language": {"enum": ["python", "c++", "rust", "go"]},
  "lines": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
  "summary": {"type": "string"}}, "required": ["name", "language", "lines", "tags", "summary"],
  "additionalProperties": false})";

const char* const kDocument =
    "{\"name\": \"palindrome checker\", \"language\": \"python\", \"lines\": 12, \"tags\": [\"strings\", "
    "\"two pointers\"], \"summary\": \"Compares characters from both ends, skipping punctuation.\"}";

const char* kPrompts[] = {
    "<|im_start|>user\nDescribe, as JSON with name, language, lines, tags and summary, a Python function that "
    "checks whether a string is a palindrome.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nReturn JSON (name, language, lines, tags, summary) for a C++ class that implements an LRU "
    "cache.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nAs JSON with the fields name, language, lines, tags, summary: a Rust function that parses "
    "a CSV line.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nGive JSON with name, language, lines, tags and summary for a Go HTTP handler that returns "
    "the current time.<|im_end|>\n<|im_start|>assistant\n",
};

struct Totals {
  double ms = 0;
  int64_t tokens = 0, drafted = 0, accepted = 0;
};

void mask_costs(tandem::Engine& e) {
  const tandem::Tokenizer& tok = tandem::EngineAccess::parts(e).tokenizer;
  const auto t0 = Clock::now();
  auto vocab = tandem::grammar_vocab(tok);
  const double vocab_ms = ms_since(t0);
  tandem::TokenGrammar tg(tandem::Grammar::parse(tandem::json_schema_to_gbnf(kSchema)), vocab);
  const std::vector<int32_t> ids = tok.encode(kDocument, false, false);
  double cold = 0, warm = 0;
  int n_cold = 0;
  for (int pass = 0; pass < 2; ++pass) {
    tandem::GrammarState s = tg.initial();
    for (int32_t id : ids) {
      const int64_t before = tg.stats().masks_computed;
      const auto t = Clock::now();
      const auto m = tg.mask(s);
      const double ms = ms_since(t);
      if (pass == 0 && tg.stats().masks_computed > before) {
        cold += ms;
        ++n_cold;
      }
      if (pass == 1) warm += ms;
      if (!tandem::mask_allows(*m, id)) std::fprintf(stderr, "warning: the document's token %d is not allowed\n", id);
      s = tg.after(s, id);
    }
  }
  std::printf("vocabulary %d tokens (grammar view built in %.1f ms); document %zu tokens\n", vocab->size(), vocab_ms,
              ids.size());
  std::printf("masks: %d cold states, %.2f ms each on average (%.1f ms in all); cached: %.4f ms per token\n", n_cold,
              n_cold ? cold / n_cold : 0.0, cold, warm / static_cast<double>(ids.size()));
}

}  // namespace

int main(int argc, char** argv) {
  tandem::LoadOptions lo;
  int n = 96, k = 4, reps = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "-m") lo.model_path = next();
    else if (a == "-md") lo.draft_model_path = next();
    else if (a == "-n") n = std::stoi(next());
    else if (a == "-k") k = std::stoi(next());
    else if (a == "--reps") reps = std::stoi(next());
    else if (a == "-t") lo.threads = std::stoi(next());
    else {
      std::fprintf(stderr, "usage: bench_grammar -m TARGET.gguf [-md DRAFT.gguf] [-n 96] [-k 4] [--reps 1] [-t N]\n");
      return 2;
    }
  }
  if (lo.model_path.empty()) {
    std::fprintf(stderr, "bench_grammar: -m TARGET.gguf is required\n");
    return 2;
  }
  auto e = tandem::Engine::load(lo);
  std::printf("%s\n", e->backend_description().c_str());
  mask_costs(*e);

  std::vector<tandem::DraftMode> modes = {tandem::DraftMode::None, tandem::DraftMode::Ngram};
  if (!lo.draft_model_path.empty()) modes.push_back(tandem::DraftMode::Model);
  const std::string grammar = tandem::json_schema_to_gbnf(kSchema);
  Totals t[3][2];  // [mode][constrained]
  for (int r = 0; r < reps; ++r)
    for (const char* p : kPrompts)
      for (size_t m = 0; m < modes.size(); ++m)
        for (int c = 0; c < 2; ++c) {
          tandem::GenerateOptions g;
          g.max_tokens = n;
          g.sampling.temperature = 0.0f;
          g.speculative.mode = modes[m];
          g.speculative.draft_max = k;
          g.speculative.policy = "fixed";
          if (c) g.grammar = grammar;
          const auto t0 = Clock::now();
          const tandem::GenerateResult res = e->generate(p, g);
          Totals& x = t[m][c];
          // Decode speed: the first token comes from the prefill, which both share.
          x.ms += res.timings.decode_ms;
          x.tokens += res.timings.n_generated > 1 ? res.timings.n_generated - 1 : 0;
          x.drafted += res.speculative.drafted_tokens;
          x.accepted += res.speculative.accepted_tokens;
          (void)t0;
        }
  const char* names[] = {"plain", "n-gram", "draft model"};
  const double base = t[0][0].tokens * 1000.0 / t[0][0].ms;
  std::printf("\n%-12s %14s %14s %9s %16s %16s\n", "speculation", "free tok/s", "schema tok/s", "schema/free",
              "free vs plain", "schema vs plain");
  for (size_t m = 0; m < modes.size(); ++m) {
    const double f = t[m][0].tokens * 1000.0 / t[m][0].ms, s = t[m][1].tokens * 1000.0 / t[m][1].ms;
    std::printf("%-12s %14.2f %14.2f %8.3fx %15.3fx %15.3fx", names[m], f, s, s / f, f / base, s / base);
    if (m > 0)
      std::printf("   acceptance free %.2f, schema %.2f", t[m][0].drafted ? double(t[m][0].accepted) / t[m][0].drafted : 0.0,
                  t[m][1].drafted ? double(t[m][1].accepted) / t[m][1].drafted : 0.0);
    std::printf("\n");
  }
  return 0;
}
