// tandem::Engine: loads the target (and optional draft), and runs one request at a time
// (sequence_setup.hpp, then run_alone.hpp): prompt → tokenizer → prefill → draft/verify/commit
// → text.
#include "engine/runtime/engine_impl.hpp"

#include <stdexcept>

#include "draft/vocab_ranking.hpp"
#include "engine/model/prefill.hpp"
#include "engine/model/requantize.hpp"
#include "engine/runtime/pass_limits.hpp"
#include "engine/runtime/run_alone.hpp"
#include "engine/runtime/sequence_setup.hpp"
#include "engine/text/vocab_compat.hpp"
#include "kernels/backend_factory.hpp"

namespace tandem {

namespace {
DType parse_kv_type(const std::string& s) {
  if (s == "f16") return DType::F16;
  if (s == "f32") return DType::F32;
  throw std::invalid_argument("unknown KV cache type '" + s + "' (use f16 or f32)");
}
}  // namespace

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

std::unique_ptr<Engine> Engine::load(const LoadOptions& opts) {
  auto impl = std::make_unique<Impl>();
  impl->opts = opts;
  // A device this build cannot give is a load error (TANDEM_ERR_LOAD in the C API), as a
  // model file that cannot be read is.
  if (opts.device != "auto" && opts.device != "cpu" && opts.device != "cuda" && opts.device != "cuda-emulated")
    throw std::runtime_error("unknown device '" + opts.device + "' (use auto, cpu, cuda or cuda-emulated)");
  kernels::BackendOptions bo;
  bo.device = opts.device;
  bo.cpu_threads = opts.threads;
  bo.pin_threads = opts.pin_threads;
  bo.gpu_mem_bytes = opts.gpu_mem_bytes;
  kernels::BackendChoice chosen = kernels::choose_backend(bo);  // throws for "cuda" without a device
  impl->backend = std::move(chosen.backend);
  impl->backend_note = std::move(chosen.reason);
  impl->load_models();
  impl->make_caches();
  std::unique_ptr<Engine> e(new Engine(std::move(impl)));
  EngineParts parts = EngineAccess::parts(*e);
  reserve_pass_scratch(parts, 1, kPrefillChunk);  // Engine::generate's passes
  return e;
}

void Engine::Impl::load_models() {
  model = Model::load(opts.model_path, *backend, parse_target_weight_options(opts.weight_type));
  tokenizer = Tokenizer::from_gguf(model->file());
  grammars = std::make_unique<GrammarCache>(*tokenizer);
  const ModelConfig& c = model->config();
  if (tokenizer->n_vocab() > c.n_vocab)
    throw std::runtime_error(opts.model_path + ": tokenizer has " + std::to_string(tokenizer->n_vocab()) +
                             " tokens but the embedding matrix only " + std::to_string(c.n_vocab) + " rows");
  context = opts.context > 0 ? opts.context : std::min<int32_t>(c.n_ctx_train, 4096);
  if (opts.draft_model_path.empty()) {
    if (opts.draft_vocab != 0 || !opts.draft_vocab_counts.empty())
      throw std::invalid_argument("a reduced draft vocabulary (draft_vocab) needs a draft model");
    if (names_explicit_weight_type(opts.draft_type))
      throw std::invalid_argument("a draft weight type (draft_type " + opts.draft_type + ") needs a draft model");
    return;
  }
  draft = Model::load(opts.draft_model_path, *backend, parse_weight_options(opts.draft_type));
  draft_tokenizer = Tokenizer::from_gguf(draft->file());
  const std::string why = vocab_incompatibility(*tokenizer, *draft_tokenizer);
  if (!why.empty())
    throw std::runtime_error("draft model " + opts.draft_model_path + " cannot serve target " + opts.model_path +
                             ": " + why);
}

// One KV pool for both models (engine/kv/kv_pool.hpp): one piece of backend memory sized to
// the budget, its blocks taken by either cache as sequences need them.
void Engine::Impl::make_caches() {
  const DType dtype = parse_kv_type(opts.kv_type);
  constexpr int32_t kBlockSize = 16;
  std::vector<KVShape> shapes{model->config()};
  if (draft) shapes.push_back(draft->config());
  const KVPoolPlan plan = plan_kv_pool(shapes, dtype, kBlockSize);
  // Drafts run a few positions past the committed text, hence the slack for one sequence.
  const size_t one_context = plan.blocks_for_tokens(context + 16) * plan.column_bytes();
  const size_t budget = opts.kv_mem_bytes > 0 ? opts.kv_mem_bytes : one_context;
  if (budget < one_context)
    throw std::runtime_error("KV memory budget of " + std::to_string(opts.kv_mem_bytes) + " bytes holds " +
                             std::to_string(budget / plan.column_bytes()) + " blocks of " +
                             std::to_string(plan.column_bytes()) + " bytes; one full context (" +
                             std::to_string(context) + " tokens" + (draft ? ", target and draft" : "") + ") needs " +
                             std::to_string(one_context) + " bytes");
  kv_pool = std::make_unique<KVPool>(*backend, shapes, dtype, kBlockSize, budget);
  cache = std::make_unique<KVCache>(*kv_pool, 0);
  transformer = std::make_unique<Transformer>(*model, *cache);
  if (!draft) return;
  draft_cache = std::make_unique<KVCache>(*kv_pool, 1);
  draft_transformer = std::make_unique<Transformer>(*draft, *draft_cache);
  draft_probs = DraftProbs::for_backend(*backend);
  const int32_t n_vocab = draft->config().n_vocab;
  draft_ranking = opts.draft_vocab_counts.empty() ? rank_by_id(n_vocab)
                                                   : rank_tokens(load_token_counts(opts.draft_vocab_counts, n_vocab));
  for (int32_t id = 0; id < std::min(n_vocab, tokenizer->n_vocab()); ++id)
    if (tokenizer->is_eog(id)) eog_ids.push_back(id);
  apply_draft_vocab(opts.draft_vocab);
}

void Engine::Impl::apply_draft_vocab(int32_t n) {
  if (n < 0) throw std::invalid_argument("draft vocabulary size " + std::to_string(n) + " is negative");
  const int32_t n_vocab = draft->config().n_vocab;
  if (n == 0 || n >= n_vocab) {
    draft_transformer->set_output_subset(nullptr);
    draft_vocab = 0;
    return;
  }
  draft_transformer->set_output_subset(make_output_subset(*draft, draft_vocab_ids(draft_ranking, n, eog_ids)));
  draft_vocab = n;
}

void Engine::set_draft_vocab(int32_t n) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  if (!impl_->draft) throw std::invalid_argument("a reduced draft vocabulary needs a draft model");
  impl_->apply_draft_vocab(n);
}

std::vector<int32_t> Engine::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  return impl_->tokenizer->encode(text, add_special, parse_special);
}

std::string Engine::detokenize(std::span<const int32_t> tokens) const { return impl_->tokenizer->decode(tokens); }

std::vector<int32_t> Engine::fim_prompt(std::string_view prefix, std::string_view suffix) const {
  const Tokenizer& t = *impl_->tokenizer;
  const std::optional<FimTokens> fim = t.fim();
  if (!fim)
    throw std::invalid_argument(
        "this model has no fill-in-the-middle tokens (such as <|fim_prefix|>, <fim_prefix> or <PRE>): "
        "it cannot insert text between a prefix and a suffix");
  std::vector<int32_t> out;
  if (t.add_bos() && t.bos() >= 0) out.push_back(t.bos());
  out.push_back(fim->prefix);
  const std::vector<int32_t> pre = t.encode(prefix, false, false);
  out.insert(out.end(), pre.begin(), pre.end());
  out.push_back(fim->suffix);
  const std::vector<int32_t> suf = t.encode(suffix, false, false);
  out.insert(out.end(), suf.begin(), suf.end());
  out.push_back(fim->middle);
  return out;
}

ModelInfo Engine::info() const {
  const ModelConfig& c = impl_->model->config();
  ModelInfo i;
  i.path = impl_->opts.model_path;
  i.architecture = c.arch_name;
  i.name = c.name;
  i.n_vocab = c.n_vocab;
  i.n_layer = c.n_layer;
  i.n_embd = c.n_embd;
  i.n_head = c.n_head;
  i.n_head_kv = c.n_head_kv;
  i.context = impl_->context;
  i.weight_bytes = impl_->model->weight_bytes();
  i.weight_type = weight_options_name(impl_->model->weights());
  i.kv_bytes = impl_->kv_pool->bytes();  // both models' caches together
  i.backend = impl_->backend->name();
  i.backend_note = impl_->backend_note;
  if (impl_->draft) {
    i.draft_path = impl_->opts.draft_model_path;
    i.draft_name = impl_->draft->config().name;
    i.draft_vocab = impl_->draft_vocab;
    i.draft_vocab_ranking = impl_->opts.draft_vocab_counts.empty() ? "token ids" : impl_->opts.draft_vocab_counts;
    i.draft_type = weight_options_name(impl_->draft->weights());
    i.draft_weight_bytes = impl_->draft->weight_bytes();
  }
  return i;
}

std::string Engine::backend_description() const { return impl_->backend->description(); }

std::vector<float> Engine::logits(std::span<const int32_t> tokens) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  if (static_cast<int32_t>(tokens.size()) > impl_->context)
    throw std::invalid_argument("sequence of " + std::to_string(tokens.size()) + " tokens exceeds the context (" +
                                std::to_string(impl_->context) + ")");
  SequenceKV seq(*impl_->cache);
  std::vector<float> out;
  prefill(*impl_->transformer, seq, tokens, PrefillLogits::All, out);
  return out;
}

void Engine::cancel() { impl_->cancel_epoch.fetch_add(1); }

namespace {
StreamEventCallback events_of(const StreamCallback& cb) {
  if (!cb) return {};
  return [&cb](const StreamEvent& ev) { return cb(ev.text, ev.token); };
}
}  // namespace

GenerateResult Engine::generate(std::string_view prompt, const GenerateOptions& opts, const StreamCallback& cb) {
  return generate(prompt, opts, events_of(cb));
}

GenerateResult Engine::generate(std::string_view prompt, const GenerateOptions& opts, const StreamEventCallback& cb) {
  const uint64_t epoch = impl_->cancel_epoch.load();
  const auto ids = impl_->tokenizer->encode(prompt, opts.add_special, opts.parse_special);
  return impl_->run(ids, opts, cb, epoch);
}

GenerateResult Engine::generate_tokens(std::span<const int32_t> prompt, const GenerateOptions& opts,
                                       const StreamCallback& cb) {
  return generate_tokens(prompt, opts, events_of(cb));
}

GenerateResult Engine::generate_tokens(std::span<const int32_t> prompt, const GenerateOptions& opts,
                                       const StreamEventCallback& cb) {
  return impl_->run(prompt, opts, cb, impl_->cancel_epoch.load());
}

GenerateResult Engine::Impl::run(std::span<const int32_t> prompt, const GenerateOptions& opts,
                                 const StreamEventCallback& cb, uint64_t epoch) {
  std::lock_guard<std::mutex> lk(mu);
  const auto cancelled = [&] { return cancel_epoch.load(std::memory_order_relaxed) != epoch; };
  if (cancelled()) {  // cancelled while waiting for the lock: skip the prefill too
    GenerateResult r;
    r.prompt_tokens.assign(prompt.begin(), prompt.end());
    r.timings.n_prompt = static_cast<int32_t>(prompt.size());
    r.finish = FinishReason::Cancelled;
    r.seed = opts.sampling.seed.value_or(0);
    return r;
  }
  // The run calls the stream callback once per committed token: check there, after
  // passing the token on, so the stream always holds exactly the result's text.
  const StreamEventCallback checked = [&](const StreamEvent& ev) {
    const bool go_on = !cb || cb(ev);
    return go_on && !cancelled();
  };
  PreparedSequence seq = prepare_sequence(parts(), policy_costs(), prompt, opts, checked, Clock::now(),
                                          grammars->get(opts.grammar));
  run_to_end(*seq.run, *transformer, draft_probs.get());
  return std::move(seq.run->result());
}

void Engine::set_cost_model(std::shared_ptr<const CostModel> model) {
  std::lock_guard<std::mutex> lk(impl_->cost_mu);
  impl_->cost_model = std::move(model);
  impl_->overhead = std::make_shared<OverheadTracker>();  // what was measured against the old model is void
  impl_->shapes = std::make_shared<ShapeChoice>();
}

std::shared_ptr<const CostModel> Engine::cost_model() const {
  std::lock_guard<std::mutex> lk(impl_->cost_mu);
  return impl_->cost_model;
}

PolicyCosts EngineAccess::policy_costs(const Engine& e) { return e.impl_->policy_costs(); }

EngineParts Engine::Impl::parts() {
  return {*transformer, *tokenizer, draft_transformer.get(), context, mu, *grammars, draft_probs.get()};
}

EngineParts EngineAccess::parts(Engine& e) { return e.impl_->parts(); }

}  // namespace tandem
