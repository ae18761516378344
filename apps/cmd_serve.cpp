// `tandem serve`: an OpenAI-compatible HTTP server (apps/server/) over the continuous-
// batching scheduler (engine/runtime/scheduler.hpp).
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "apps/commands.hpp"
#include "apps/common_options.hpp"
#include "apps/server/chat_prompt.hpp"
#include "apps/server/http_server.hpp"
#include "apps/server/server_state.hpp"
#include "apps/tune/config.hpp"
#include "engine/runtime/engine_calibration.hpp"
#include "engine/runtime/scheduler.hpp"
#include "policies/cost_model.hpp"
#include "policies/factory.hpp"
#include "tandem/engine.hpp"

namespace tandem::cli {
namespace {

struct ServeArgs {
  LoadOptions load;
  SchedulerOptions sched;
  server::ServerOptions http;
  std::string model_id;
  std::string draft_mode;  // "", "model", "ngram", "none"
  int32_t draft_max = 4;
  // The server batches: goodput shrinks k and turns speculation off as the batch grows, and
  // per sequence when the draft stops paying (it needs a cost model: calibrated once, cached).
  std::string policy = "goodput";
  float draft_p_min = 0.0f;
  SpeculativeOptions lookup;  // --lookup/--no-lookup, --lookup-min (only those fields)
  SpeculativeOptions tree;    // --tree-width, --tree-nodes (only those fields)
  VerifyMode verify = SpeculativeOptions{}.verify;
  std::string config_path;  // tune --write-config output
  ExplicitFlags given;      // flags given explicitly win over the config file
  std::string kv_mem;  // "", bytes, or with a unit: 512MiB, 2GiB, 800MB
  bool no_prefix_cache = false;
  bool speculation_metrics = false;
  bool verbose = false;
  int32_t max_tokens = 0;  // --max-tokens: per request (0 = the context bounds it)
};

DraftMode draft_mode(const std::string& mode, const LoadOptions& load) {
  if (mode == "ngram") return DraftMode::Ngram;
  if (mode == "none") return DraftMode::None;
  if (mode == "model") {
    if (load.draft_model_path.empty()) throw std::invalid_argument("--draft model needs --model-draft");
    return DraftMode::Model;
  }
  if (!mode.empty()) throw std::invalid_argument("--draft must be model, ngram or none");
  return load.draft_model_path.empty() ? DraftMode::None : DraftMode::Model;
}

const char* mode_name(DraftMode m) {
  return m == DraftMode::Model ? "model" : m == DraftMode::Ngram ? "ngram" : "none";
}

int run_serve(ServeArgs a) {
  if (a.verbose) spdlog::set_level(spdlog::level::debug);
  SpeculativeOptions defaults;
  defaults.draft_max = a.draft_max;
  defaults.policy = a.policy;
  defaults.draft_p_min = a.draft_p_min;
  defaults.lookup = a.lookup.lookup;
  defaults.lookup_min = a.lookup.lookup_min;
  defaults.tree_width = a.tree.tree_width;
  defaults.tree_nodes = a.tree.tree_nodes;
  defaults.verify = a.verify;
  if (!is_policy_name(a.policy)) throw std::invalid_argument("--policy must be fixed, confidence, adaptive or goodput");
  // --config: tune's recommendations per temperature; the one for T=0 (or the nearest) is
  // also what requests without a temperature-specific entry get.
  std::unique_ptr<TandemConfig> config;
  std::vector<std::pair<float, SpeculativeOptions>> by_temp;
  std::string mode_str = a.draft_mode;
  if (!a.config_path.empty()) {
    config = std::make_unique<TandemConfig>(load_config(a.config_path));
    if (a.load.draft_model_path.empty() && !config->draft.empty() && !a.given.draft) {
      // The draft model tune measured with, when a recommendation uses one.
      bool uses_model = config->defaults.draft == "model";
      for (const auto& e : config->per_temperature) uses_model = uses_model || e.spec.draft == "model";
      if (uses_model) a.load.draft_model_path = config->draft;
    }
    apply_config_load(*config, a.given, a.load);
    for (const auto& e : config->per_temperature) {
      SpeculativeOptions so = defaults;
      std::string m = a.draft_mode;
      apply_config(*config, e.temp, a.given, m, so);
      so.mode = draft_mode(m, a.load);
      by_temp.emplace_back(e.temp, so);
    }
    apply_config(*config, 0.0f, a.given, mode_str, defaults);
  }
  defaults.mode = draft_mode(mode_str, a.load);
  if (!a.kv_mem.empty()) a.load.kv_mem_bytes = parse_size("--kv-mem", a.kv_mem);
  a.sched.prefix_cache = !a.no_prefix_cache;

  auto engine = Engine::load(a.load);
  const ModelInfo info = engine->info();
  print_backend_note(info);
  server::ProtocolConfig protocol;
  std::filesystem::path path(a.load.model_path);
  // A GGUF file is served by its name without the extension; a Hugging Face folder by its own
  // name ("qwen2.5-coder-1.5b", not "qwen2.5-coder-1").
  const bool folder = std::filesystem::is_directory(path);
  if (folder && !path.has_filename()) path = path.parent_path();
  const std::string stem = folder ? path.filename().string() : path.stem().string();
  // The served id, then the names a client may reasonably use for the same model.
  protocol.model_ids = {a.model_id.empty() ? stem : a.model_id, stem, path.filename().string(), a.load.model_path};
  if (!info.name.empty()) protocol.model_ids.push_back(info.name);
  protocol.n_vocab = info.n_vocab;
  protocol.has_draft_model = !a.load.draft_model_path.empty();
  protocol.speculation_metrics = a.speculation_metrics;
  protocol.default_speculative = defaults;
  protocol.speculative_by_temp = by_temp;
  // Each of a request's n choices is a running sequence and a place in the queue: no more
  // than can run at once, or wait at once (a larger group could only ever get 429).
  protocol.max_n = std::max(1, std::min({16, a.sched.max_seqs, a.sched.max_queue}));
  // Policies that decide with the cost model get one calibrated on this machine
  // (cached; only the first start pays). One calibration covers every default the server
  // may use, and per-request adaptive policies when a draft model is loaded.
  {
    SpeculativeOptions need = defaults;
    bool needed = need.mode != DraftMode::None && policy_uses_cost_model(need.policy);
    for (const auto& [t, so] : by_temp) {
      if (so.mode == DraftMode::None || !policy_uses_cost_model(so.policy)) continue;
      if (!needed) need = so;
      need.draft_max = std::max(need.draft_max, so.draft_max);
      needed = true;
    }
    if (!needed && !a.load.draft_model_path.empty()) {
      need.mode = DraftMode::Model;
      need.policy = "adaptive";
      needed = true;
    }
    // The step budget prices the passes a full batch takes: every sequence's drafts.
    // (a token tree's step carries its nodes)
    const int32_t batch_tokens =
        std::min(a.sched.max_batch_tokens, a.sched.max_seqs * (std::max(need.draft_max, need.tree_budget()) + 1));
    if (needed) spdlog::info("{}", ensure_cost_model(*engine, need, config.get(), batch_tokens));
  }

  server::ChatPrompt chat = server::ChatPrompt::from_model(a.load.model_path, *engine);
  chat.set_max_output_bytes(a.http.max_template_output);
  protocol.max_tokens = a.max_tokens;
  spdlog::info("model {} ({}, context {}, {} KV {:.1f} MiB){}; chat template: {}; speculation: {} (policy {}, k={}){}",
               protocol.model_ids[0], info.architecture, info.context, a.load.kv_type, info.kv_bytes / 1048576.0,
               info.draft_path.empty() ? "" : ", draft " + info.draft_name, chat.from_gguf() ? "model's" : "ChatML",
               mode_name(defaults.mode), defaults.policy, defaults.draft_max,
               by_temp.empty() ? "" : "; per temperature from " + a.config_path);
  spdlog::info("{}", engine->backend_description());

  Scheduler scheduler(*engine, a.sched);
  server::ServerState state(*engine, scheduler, std::move(chat), std::move(protocol), a.http);
  server::run_http_server(state);
  // What trees against chains learned while serving, and the lengths of the outputs served,
  // for the next start.
  save_shape_choice(*engine, default_cost_cache_path());
  save_output_lengths(*engine, default_cost_cache_path());
  return 0;
}

}  // namespace

Command add_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  auto* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  sub->add_option("-m,--model", a->load.model_path, "Target model: a GGUF file or a Hugging Face folder")->required()->check(CLI::ExistingPath);
  sub->add_option("--model-draft", a->load.draft_model_path, "Draft model (GGUF file or Hugging Face folder) for speculative decoding (alias: -md)")
      ->check(CLI::ExistingPath);
  cli::add_draft_vocab_options(*sub, a->load);
  sub->add_option("--model-id", a->model_id, "Model id clients send and responses carry (default: file name stem)");
  sub->add_option("--host", a->http.host, "Address to listen on")->capture_default_str();
  sub->add_option("--port", a->http.port, "Port (0 = any free port; the log says which)")->capture_default_str();
  sub->add_option("--max-seqs", a->sched.max_seqs, "Sequences decoded at once")->capture_default_str();
  sub->add_option("--max-queue", a->sched.max_queue, "Waiting requests before 429")->capture_default_str();
  sub->add_option("--prefill-chunk", a->sched.prefill_chunk, "Prompt tokens per sequence per step")->capture_default_str();
  sub->add_option("--max-batch-tokens", a->sched.max_batch_tokens, "Target tokens per step")->capture_default_str();
  sub->add_option("--max-step-ms", a->sched.max_step_ms,
                  "While streams decode, cut prompt chunks so a step takes about this long (0 = no limit)")
      ->capture_default_str();
  sub->add_option("--spec-latency-slack", a->sched.spec_latency_slack,
                  "Speculation in a batch may make a stream's time per token at most this share longer than "
                  "plain decoding's (< 0: throughput alone decides)")
      ->capture_default_str();
  sub->add_flag("--speculation-metrics", a->speculation_metrics,
                "Every response's usage carries the request's speculation figures (a request may ask with "
                "\"speculation_metrics\": true)");
  sub->add_flag("--no-prefix-cache", a->no_prefix_cache, "Do not share KV blocks of identical prompt prefixes");
  sub->add_option("--kv-mem", a->kv_mem, "KV cache budget: bytes or with a unit (512MiB, 2GiB)");
  add_runtime_options(*sub, a->load);  // -t, -c (per sequence), --kv-type, --device, --gpu-mem
  sub->add_option("--http-threads", a->http.io_threads, "Threads serving HTTP")->capture_default_str();
  sub->add_option("--api-key", a->http.api_key, "Require 'Authorization: Bearer KEY' on /v1/*");
  auto* o_draft = sub->add_option("--draft", a->draft_mode, "Default proposer: model (default with -md), ngram, none");
  auto* o_draft_max = sub->add_option("--draft-max", a->draft_max, "Default tokens drafted per step (k)")
                          ->capture_default_str()
                          ->check(CLI::Range(1, 32));
  auto* o_policy = sub->add_option("--policy", a->policy,
                                   "Default speculation policy: fixed, confidence, adaptive, goodput")
                       ->capture_default_str();
  auto* o_p_min = sub->add_option("--draft-p-min", a->draft_p_min,
                                  "Stop drafting when the draft's most likely token has probability below this (decided before sampling)")
                      ->capture_default_str();
  add_lookup_options(*sub, a->lookup);
  add_tree_options(*sub, a->tree);
  add_verify_option(*sub, a->verify);
  sub->add_option("--config", a->config_path,
                  "Speculative defaults per temperature from `tandem tune --write-config` (flags win)")
      ->check(CLI::ExistingFile);
  sub->add_option("--request-timeout", a->http.request_timeout_s,
                  "Cancel a generation after this many seconds, finish_reason \"length\" (0 = never)")
      ->capture_default_str();
  sub->add_option("--max-body", a->http.max_body, "Largest request body in bytes (larger → 413)")->capture_default_str();
  sub->add_option("--drain-timeout", a->http.drain_timeout_s,
                  "On SIGTERM/SIGINT, wait this many seconds for running requests")
      ->capture_default_str();
  // Resource limits against abusive or broken clients (apps/server/README.md).
  sub->add_option("--max-tokens", a->max_tokens,
                  "Most tokens one request may generate (more asked → 400; 0 = only the context bounds it)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--max-connections", a->http.max_connections,
                  "Open connections; more are answered 503 with Retry-After and closed")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--idle-timeout", a->http.idle_timeout_s,
                  "Close a connection that sends no request for this many seconds")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--header-timeout", a->http.header_timeout_s,
                  "From a request's first byte, seconds its headers may take (then 408, closed)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--body-timeout", a->http.body_timeout_s,
                  "After the headers, seconds the body may take (then 408, closed)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--max-template-output", a->http.max_template_output,
                  "Largest prompt text in bytes the chat template may render (larger → 400)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option_function<std::string>(
         "--metrics-compat",
         [a](const std::string& v) { a->http.metrics_vllm = v == "vllm"; },
         "Also export other servers' metric names on /metrics: vllm (vllm:num_requests_waiting, "
         "vllm:kv_cache_usage_perc, ...) or none")
      ->check(CLI::IsMember({"none", "vllm"}));
  sub->add_flag("-v,--verbose", a->verbose, "Log every HTTP request");
  return {sub, [a, sub, o_draft, o_draft_max, o_policy, o_p_min] {
            a->given = {o_draft->count() > 0, o_draft_max->count() > 0, o_p_min->count() > 0, o_policy->count() > 0,
                        sub->get_option("--draft-vocab")->count() > 0, sub->get_option("--draft-type")->count() > 0,
                        sub->get_option("--tree-width")->count() > 0};
            return run_serve(*a);
          }};
}

}  // namespace tandem::cli
