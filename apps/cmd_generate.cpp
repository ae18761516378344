// `tandem generate`: one prompt, streamed to stdout, then timings (or one JSON object).
#include <CLI/CLI.hpp>

#include <boost/json.hpp>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "apps/commands.hpp"
#include "apps/common_options.hpp"
#include "apps/tune/config.hpp"
#include "engine/runtime/engine_calibration.hpp"
#include "policies/cost_model.hpp"
#include "tandem/engine.hpp"

namespace tandem::cli {
namespace {

struct GenerateArgs {
  LoadOptions load;
  GenerateOptions gen;
  std::string prompt;
  std::optional<std::string> suffix;  // fill in the middle: the prompt is the prefix
  bool json = false;
  bool verbose = false;
  bool no_special = false;
  ConstraintArgs constraint;
  std::string draft_mode;  // "", "model", "ngram"
  std::string config_path;  // tune --write-config output
  ExplicitFlags given;      // filled after parsing: flags that override the config
};

int run_generate(const GenerateArgs& args) {
  GenerateArgs a = args;
  // --config: tune's recommendation for this temperature; flags given explicitly win.
  std::unique_ptr<TandemConfig> config;
  if (!a.config_path.empty()) {
    config = std::make_unique<TandemConfig>(load_config(a.config_path));
    apply_config(*config, a.gen.sampling.temperature, a.given, a.draft_mode, a.gen.speculative);
    // The draft model tune measured with, unless another was given.
    if (a.draft_mode == "model" && a.load.draft_model_path.empty()) a.load.draft_model_path = config->draft;
    if (a.draft_mode == "model") apply_config_load(*config, a.given, a.load);
  }
  auto engine = Engine::load(a.load);
  const ModelInfo info = engine->info();
  print_backend_note(info);
  if (a.verbose) {
    std::fprintf(stderr, "model: %s (%s, %d layers, vocab %d, weights %s, %.1f MiB)\n%s\n", info.path.c_str(),
                 info.architecture.c_str(), info.n_layer, info.n_vocab, info.weight_type.c_str(),
                 info.weight_bytes / 1048576.0,
                 engine->backend_description().c_str());
    if (!info.draft_path.empty())
      std::fprintf(stderr, "draft: %s (weights %s, %.1f MiB%s)\n", info.draft_path.c_str(), info.draft_type.c_str(),
                   info.draft_weight_bytes / 1048576.0,
                   info.draft_vocab > 0 ? (", vocabulary " + std::to_string(info.draft_vocab)).c_str() : "");
  }
  GenerateOptions gen = a.gen;
  gen.add_special = !a.no_special;
  gen.grammar = constraint_grammar(a.constraint);
  if (a.draft_mode == "ngram") {
    gen.speculative.mode = DraftMode::Ngram;
  } else if (a.draft_mode == "model" || (a.draft_mode.empty() && !a.load.draft_model_path.empty())) {
    gen.speculative.mode = DraftMode::Model;
  } else if (!a.draft_mode.empty() && a.draft_mode != "none") {
    throw std::invalid_argument("--draft must be model, ngram or none");
  }
  gen.record_steps = a.json;  // --json lists every step (the trace `bench_policies replay` reads)
  const std::string costs = ensure_cost_model(*engine, gen.speculative, config.get());
  if (a.verbose && !costs.empty()) std::fprintf(stderr, "%s\n", costs.c_str());
  StreamCallback cb;
  if (!a.json) {
    std::fputs(a.prompt.c_str(), stdout);
    std::fflush(stdout);
    cb = [](std::string_view text, int32_t) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      return true;
    };
  }
  const GenerateResult r =
      a.suffix ? engine->generate_tokens(engine->fim_prompt(a.prompt, *a.suffix), gen, cb) : engine->generate(a.prompt, gen, cb);
  if (a.suffix && !a.json) std::fputs(a.suffix->c_str(), stdout);  // the filled-in text in its place
  // What trees against chains learned here and how long the output ran, for the next run
  // (nothing is written if this run drafted no tree-or-chain step, or finished no output).
  if (!costs.empty()) {
    save_shape_choice(*engine, default_cost_cache_path());
    save_output_lengths(*engine, default_cost_cache_path());
  }
  const Timings& t = r.timings;
  if (a.json) {
    boost::json::object o;
    o["model"] = info.path;
    o["backend"] = info.backend;
    o["prompt"] = a.prompt;
    if (a.suffix) o["suffix"] = *a.suffix;
    o["prompt_tokens"] = boost::json::value_from(r.prompt_tokens);
    o["tokens"] = boost::json::value_from(r.tokens);
    o["text"] = r.text;
    o["finish_reason"] = to_string(r.finish);
    o["seed"] = r.seed;  // --seed with it reproduces the text
    if (gen.logprobs >= 0) {
      // Each generated token's {token, logprob, top: [[token, logprob], ...]} (-inf as null).
      auto num = [](float x) { return std::isfinite(x) ? boost::json::value(x) : boost::json::value(nullptr); };
      boost::json::array lps;
      for (const TokenLogprobs& lp : r.logprobs) {
        boost::json::array top;
        for (const TokenLogprob& t : lp.top) top.push_back(boost::json::array{t.token, num(t.logprob)});
        lps.push_back(boost::json::object{{"token", lp.chosen.token}, {"logprob", num(lp.chosen.logprob)}, {"top", top}});
      }
      o["logprobs"] = std::move(lps);
    }
    boost::json::object tm;
    tm["n_prompt"] = t.n_prompt;
    tm["n_generated"] = t.n_generated;
    tm["prefill_ms"] = t.prefill_ms;
    tm["decode_ms"] = t.decode_ms;
    tm["prefill_tokens_per_s"] = t.prefill_tokens_per_s();
    tm["decode_tokens_per_s"] = t.decode_tokens_per_s();
    o["timings"] = tm;
    if (gen.speculative.mode != DraftMode::None) {
      const SpeculativeMetrics& m = r.speculative;
      boost::json::object sp;
      sp["mode"] = gen.speculative.mode == DraftMode::Ngram ? "ngram" : "model";
      sp["draft_max"] = gen.speculative.draft_max;
      sp["policy"] = gen.speculative.policy;
      sp["verify"] = to_string(gen.speculative.verify);
      sp["steps_per_k"] = boost::json::value_from(m.steps_per_k);
      sp["drafts"] = m.drafts;
      sp["drafted_tokens"] = m.drafted_tokens;
      sp["accepted_tokens"] = m.accepted_tokens;
      sp["acceptance_rate"] = m.acceptance_rate();
      sp["mean_accepted_length"] = m.mean_accepted_length();
      sp["drafted_per_position"] = boost::json::value_from(m.drafted_per_position);
      sp["accepted_per_position"] = boost::json::value_from(m.accepted_per_position);
      sp["target_passes"] = m.target_passes;
      sp["device_verified_steps"] = m.device_verified_steps;
      sp["device_drafted_tokens"] = m.device_drafted_tokens;
      sp["tree_width"] = gen.speculative.tree_width;
      sp["tree_steps"] = m.tree_steps;
      if (gen.speculative.mode == DraftMode::Model) {
        sp["lookup"] = gen.speculative.lookup;
        sp["lookup_steps"] = m.lookup_steps;
        sp["lookup_drafted_tokens"] = m.lookup_drafted_tokens;
        sp["lookup_accepted_tokens"] = m.lookup_accepted_tokens;
      }
      sp["draft_prefill_tokens"] = m.draft_prefill_tokens;
      sp["draft_prefill_ms"] = m.draft_prefill_ms;
      sp["draft_forwards"] = m.draft_forwards;
      sp["draft_ms"] = m.draft_ms;
      sp["target_ms"] = m.target_ms;
      sp["verify_ms"] = m.verify_ms;
      sp["cost_ratio_c"] = m.cost_ratio();
      boost::json::array steps;  // [drafted, accepted] per decoding step; drafted 0: a plain step
      for (const SpeculativeStep& s : m.steps) steps.push_back(boost::json::array{s.drafted, s.accepted});
      sp["steps"] = std::move(steps);
      o["speculative"] = sp;
    }
    std::printf("%s\n", boost::json::serialize(o).c_str());
  } else {
    std::printf("\n");
    std::fprintf(stderr, "\n[%s] prompt %d tokens, %.1f tok/s | generated %d tokens, %.1f tok/s | finish: %s\n",
                 info.backend.c_str(), t.n_prompt, t.prefill_tokens_per_s(), t.n_generated,
                 t.decode_tokens_per_s(), to_string(r.finish));
    // Sampled text is reproduced by --seed with this.
    if (!gen.sampling.greedy()) std::fprintf(stderr, "[seed] %llu\n", static_cast<unsigned long long>(r.seed));
    if (gen.speculative.mode != DraftMode::None) {
      const SpeculativeMetrics& m = r.speculative;
      std::fprintf(stderr, "[speculative] drafts %lld, drafted %lld, accepted %lld (%.1f%%), mean accepted length %.2f, c %.3f\n",
                   static_cast<long long>(m.drafts), static_cast<long long>(m.drafted_tokens),
                   static_cast<long long>(m.accepted_tokens), 100.0 * m.acceptance_rate(), m.mean_accepted_length(),
                   m.cost_ratio());
    }
  }
  return 0;
}

}  // namespace

Command add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  // The CLI's default is the policy that is never slower than plain decoding (as serve's):
  // it starts from the cost model and turns speculation off where it does not pay.
  a->gen.speculative.policy = "goodput";
  auto* sub = app.add_subcommand("generate", "Generate text from a prompt");
  sub->add_option("-m,--model", a->load.model_path, "Target model: a GGUF file or a Hugging Face folder")->required()->check(CLI::ExistingPath);
  sub->add_option("-p,--prompt", a->prompt, "Prompt text")->required();
  sub->add_option("--suffix", a->suffix,
                  "Fill in the middle (code models): the text after the insertion point; the prompt is the text before it");
  sub->add_option("--model-draft", a->load.draft_model_path, "Draft model (GGUF file or Hugging Face folder) for speculative decoding (alias: -md)")
      ->check(CLI::ExistingPath);
  cli::add_draft_vocab_options(*sub, a->load);
  sub->add_option("--draft", a->draft_mode, "Proposer: model (default with -md), ngram, none");
  auto* o_draft = sub->get_option("--draft");
  auto* o_draft_max =
      sub->add_option("--draft-max", a->gen.speculative.draft_max, "Tokens drafted per step (k)")->capture_default_str();
  auto* o_policy = sub->add_option("--policy", a->gen.speculative.policy,
                                   "How many tokens to draft per step: fixed, confidence, adaptive, goodput")
                       ->capture_default_str();
  sub->add_option("--config", a->config_path, "Speculative settings from `tandem tune --write-config` (flags win)")
      ->check(CLI::ExistingFile);
  sub->add_option("--draft-min", a->gen.speculative.draft_min, "Verify no draft shorter than this")
      ->capture_default_str();
  auto* o_p_min = sub->add_option("--draft-p-min", a->gen.speculative.draft_p_min,
                                  "Stop drafting when the draft's most likely token has probability below this (decided before sampling)")
                      ->capture_default_str();
  sub->add_option("--ngram-min", a->gen.speculative.ngram_min, "Shortest n-gram to match")->capture_default_str();
  sub->add_option("--ngram-max", a->gen.speculative.ngram_max, "Longest n-gram to match")->capture_default_str();
  cli::add_lookup_options(*sub, a->gen.speculative);
  cli::add_tree_options(*sub, a->gen.speculative);
  sub->add_option("-n,--max-tokens", a->gen.max_tokens, "Tokens to generate")->capture_default_str();
  add_sampling_options(*sub, a->gen.sampling);
  add_verify_option(*sub, a->gen.speculative.verify);
  add_constraint_options(*sub, a->constraint);
  sub->add_option("--stop", a->gen.stop, "Stop string (repeatable)");
  sub->add_option("--stop-token-id", a->gen.stop_token_ids,
                  "Token id that ends the output as an end-of-generation token does (repeatable)");
  add_runtime_options(*sub, a->load);
  sub->add_flag("--ignore-eos", a->gen.ignore_eos, "Keep generating past end-of-generation tokens");
  sub->add_flag("--no-special", a->no_special, "Do not add BOS/special tokens to the prompt");
  auto* o_json = sub->add_flag("--json", a->json, "Print one JSON object with tokens, text and timings");
  sub->add_option("--logprobs", a->gen.logprobs,
                  "With --json: each generated token's logprob and this many most likely alternatives (0..20)")
      ->check(CLI::Range(0, kMaxTopLogprobs))
      ->needs(o_json);
  sub->add_flag("-v,--verbose", a->verbose, "Print model and backend details");
  return {sub, [a, sub, o_draft, o_draft_max, o_policy, o_p_min] {
            a->given = {o_draft->count() > 0, o_draft_max->count() > 0, o_p_min->count() > 0, o_policy->count() > 0,
                        sub->get_option("--draft-vocab")->count() > 0, sub->get_option("--draft-type")->count() > 0,
                        sub->get_option("--tree-width")->count() > 0};
            return run_generate(*a);
          }};
}

}  // namespace tandem::cli
