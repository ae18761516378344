// tandem::Engine: loads the target (and optional draft), and runs one request at a time
// through the Coordinator: prompt → tokenizer → prefill → draft/verify/commit → text.
#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <stdexcept>

#include "draft/model_proposer.hpp"
#include "draft/ngram_proposer.hpp"
#include "engine/coordinator.hpp"
#include "engine/engine_access.hpp"
#include "engine/forward.hpp"
#include "engine/gguf.hpp"
#include "engine/tokenizer.hpp"
#include "engine/vocab_compat.hpp"
#include "policies/factory.hpp"
#include "tandem/engine.hpp"

namespace tandem {

namespace {
// Prompt chunk size for Engine::logits: bounds activation memory.
constexpr int32_t kPrefillChunk = 256;

DType parse_kv_type(const std::string& s) {
  if (s == "f16") return DType::F16;
  if (s == "f32") return DType::F32;
  throw std::invalid_argument("unknown KV cache type '" + s + "' (use f16 or f32)");
}
}  // namespace

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
  }
  return "?";
}

// Hidden: Engine is exported from libtandem.so, and its nested types would be too.
struct __attribute__((visibility("hidden"))) Engine::Impl {
  LoadOptions opts;
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<KVBudget> kv_budget;  // both caches' memory; declared first, destroyed last
  std::unique_ptr<KVCache> cache;
  std::unique_ptr<Transformer> transformer;
  int32_t context = 0;
  // Draft model (optional): its own weights and paged cache on the same backend.
  std::unique_ptr<Model> draft;
  std::unique_ptr<Tokenizer> draft_tokenizer;
  std::unique_ptr<KVCache> draft_cache;
  std::unique_ptr<Transformer> draft_transformer;
  std::unique_ptr<ModelProposer> model_proposer;
  std::shared_ptr<const CostModel> cost_model;  // for the adaptive/goodput policies
  std::shared_ptr<OverheadTracker> overhead = std::make_shared<OverheadTracker>();  // goes with cost_model
  mutable std::mutex cost_mu;                   // guards cost_model and overhead (not held while generating)
  PolicyCosts policy_costs() const {
    std::lock_guard<std::mutex> lk(cost_mu);
    return {cost_model, overhead};
  }
  std::mutex mu;
  // Engine::cancel() bumps this; a generation cancels itself once it differs from the value
  // it saw on entry. A counter, not a flag, so no call can miss or inherit a cancellation.
  std::atomic<uint64_t> cancel_epoch{0};

  GenerateResult run(std::span<const int32_t> prompt, const GenerateOptions& opts, const StreamCallback& cb,
                     uint64_t epoch);

  // Runs `tokens` through the model for `seq` in chunks; returns the logits of the last one
  // (or of all of them when all_logits).
  void prefill(SequenceKV& seq, std::span<const int32_t> tokens, std::vector<float>& logits, bool all_logits) {
    std::vector<float> chunk_logits;
    if (all_logits) logits.clear();
    for (size_t i = 0; i < tokens.size(); i += kPrefillChunk) {
      const auto chunk = tokens.subspan(i, std::min<size_t>(kPrefillChunk, tokens.size() - i));
      Batch b;
      const bool last = i + chunk.size() == tokens.size();
      if (all_logits) {
        b.add_all_logits(seq, chunk);
      } else if (last) {
        b.add(seq, chunk);  // logits of the final token only
      } else {
        b.add(seq, chunk, std::vector<bool>(chunk.size(), false));
      }
      transformer->forward(b, chunk_logits);
      if (all_logits) {
        logits.insert(logits.end(), chunk_logits.begin(), chunk_logits.end());
      } else if (!chunk_logits.empty()) {
        logits.swap(chunk_logits);
      }
    }
  }
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

std::unique_ptr<Engine> Engine::load(const LoadOptions& opts) {
  auto impl = std::make_unique<Impl>();
  impl->opts = opts;
  if (opts.device != "cpu" && opts.device != "auto")
    throw std::runtime_error("device '" + opts.device + "' is not available: this build has only the cpu backend");
  impl->backend = kernels::make_cpu_backend(opts.threads, opts.pin_threads);
  impl->model = Model::load(opts.model_path, *impl->backend);
  impl->tokenizer = Tokenizer::from_gguf(impl->model->file());
  const ModelConfig& c = impl->model->config();
  if (impl->tokenizer->n_vocab() > c.n_vocab)
    throw std::runtime_error(opts.model_path + ": tokenizer has " + std::to_string(impl->tokenizer->n_vocab()) +
                             " tokens but the embedding matrix only " + std::to_string(c.n_vocab) + " rows");
  impl->context = opts.context > 0 ? opts.context : std::min<int32_t>(c.n_ctx_train, 4096);
  if (!opts.draft_model_path.empty()) {
    impl->draft = Model::load(opts.draft_model_path, *impl->backend);
    impl->draft_tokenizer = Tokenizer::from_gguf(impl->draft->file());
    const std::string why = vocab_incompatibility(*impl->tokenizer, *impl->draft_tokenizer);
    if (!why.empty())
      throw std::runtime_error("draft model " + opts.draft_model_path + " cannot serve target " + opts.model_path +
                               ": " + why);
  }
  // One KV budget for both models, in bytes (engine/kv_budget.hpp): each cache takes blocks
  // from it as sequences need them, at its own bytes per token.
  KVCacheOptions kv;
  kv.dtype = parse_kv_type(opts.kv_type);
  size_t per_token = KVCache::bytes_per_token(c, kv.dtype);
  if (impl->draft) per_token += KVCache::bytes_per_token(impl->draft->config(), kv.dtype);
  // Drafts run a few positions past the committed text, hence the slack for one sequence.
  const size_t one_context = static_cast<size_t>(impl->context + 16) * per_token;
  const size_t budget = opts.kv_mem_bytes > 0 ? opts.kv_mem_bytes : one_context;
  if (budget < one_context)
    throw std::runtime_error("KV memory budget of " + std::to_string(opts.kv_mem_bytes) + " bytes holds only " +
                             std::to_string(budget / per_token) + " tokens; one full context needs " +
                             std::to_string(one_context) + " bytes");
  impl->kv_budget = std::make_unique<KVBudget>(budget);
  kv.budget = impl->kv_budget.get();
  impl->cache = std::make_unique<KVCache>(*impl->backend, c, kv);
  impl->transformer = std::make_unique<Transformer>(*impl->model, *impl->cache);
  if (impl->draft) {
    impl->draft_cache = std::make_unique<KVCache>(*impl->backend, impl->draft->config(), kv);
    impl->draft_transformer = std::make_unique<Transformer>(*impl->draft, *impl->draft_cache);
    impl->model_proposer = std::make_unique<ModelProposer>(*impl->draft_transformer);
  }
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

std::vector<int32_t> Engine::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  return impl_->tokenizer->encode(text, add_special, parse_special);
}

std::string Engine::detokenize(std::span<const int32_t> tokens) const { return impl_->tokenizer->decode(tokens); }

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
  i.kv_bytes = impl_->kv_budget->total();  // both models' caches together
  i.backend = impl_->backend->name();
  if (impl_->draft) {
    i.draft_path = impl_->opts.draft_model_path;
    i.draft_name = impl_->draft->config().name;
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
  impl_->prefill(seq, tokens, out, true);
  return out;
}

void Engine::cancel() { impl_->cancel_epoch.fetch_add(1); }

GenerateResult Engine::generate(std::string_view prompt, const GenerateOptions& opts, const StreamCallback& cb) {
  const uint64_t epoch = impl_->cancel_epoch.load();
  const auto ids = impl_->tokenizer->encode(prompt, opts.add_special, opts.parse_special);
  return impl_->run(ids, opts, cb, epoch);
}

GenerateResult Engine::generate_tokens(std::span<const int32_t> prompt, const GenerateOptions& opts,
                                       const StreamCallback& cb) {
  return impl_->run(prompt, opts, cb, impl_->cancel_epoch.load());
}

GenerateResult Engine::Impl::run(std::span<const int32_t> prompt, const GenerateOptions& opts,
                                 const StreamCallback& cb, uint64_t epoch) {
  std::lock_guard<std::mutex> lk(mu);
  Impl& m = *this;
  const auto cancelled = [&] { return cancel_epoch.load(std::memory_order_relaxed) != epoch; };
  if (cancelled()) {  // cancelled while waiting for the lock: skip the prefill too
    GenerateResult r;
    r.prompt_tokens.assign(prompt.begin(), prompt.end());
    r.timings.n_prompt = static_cast<int32_t>(prompt.size());
    r.finish = FinishReason::Cancelled;
    return r;
  }
  // The coordinator calls the stream callback once per committed token: check there, after
  // passing the token on, so the stream always holds exactly the result's text.
  const StreamCallback checked = [&](std::string_view text, int32_t token) {
    const bool go_on = !cb || cb(text, token);
    return go_on && !cancelled();
  };
  std::unique_ptr<Proposer> ngram;
  Proposer* proposer = nullptr;
  switch (opts.speculative.mode) {
    case DraftMode::None:
      break;
    case DraftMode::Model:
      if (!m.model_proposer) throw std::invalid_argument("draft-model speculation needs a draft model (-md)");
      proposer = m.model_proposer.get();
      break;
    case DraftMode::Ngram:
      ngram = std::make_unique<NgramProposer>(opts.speculative.ngram_min, opts.speculative.ngram_max);
      proposer = ngram.get();
      break;
  }
  // The request's speculation policy (policies/factory.hpp), deciding with the engine's cost model.
  GenerateOptions run_opts = opts;
  run_opts.speculative = effective_options(opts.speculative);
  const PolicyCosts costs = policy_costs();
  const std::unique_ptr<SpeculationPolicy> policy =
      make_policy(run_opts.speculative, costs.model.get(), costs.overhead);
  Coordinator coord(*m.transformer, *m.tokenizer, proposer, m.context, policy.get());
  return coord.run(prompt, run_opts, checked);
}

std::vector<std::vector<double>> Engine::time_forward_passes(bool draft, int32_t batch,
                                                             std::span<const int32_t> n_values, int32_t context,
                                                             int32_t reps) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  Impl& m = *impl_;
  if (draft && !m.draft) throw std::invalid_argument("time_forward_passes: no draft model loaded");
  if (batch < 1 || context < 0 || reps < 0) throw std::invalid_argument("time_forward_passes: bad batch/context/reps");
  int32_t n_max = 0;
  for (int32_t n : n_values) {
    if (n < 1) throw std::invalid_argument("time_forward_passes: n must be >= 1");
    n_max = std::max(n_max, n);
  }
  const int32_t room = draft ? m.context + 16 : m.context;  // the caches' sizes (see load)
  if (static_cast<int64_t>(batch) * (context + n_max) > room)
    throw std::invalid_argument("time_forward_passes: " + std::to_string(batch) + " sequences of " +
                                std::to_string(context + n_max) + " tokens do not fit the cache of " +
                                std::to_string(room) + " tokens");
  if (draft) m.model_proposer->reset();  // gives its blocks back; every request resets it anyway
  KVCache& cache = draft ? *m.draft_cache : *m.cache;
  std::optional<Transformer> draft_tf;  // the proposer's own is private; weights are shared
  if (draft) draft_tf.emplace(*m.draft, cache);
  Transformer& tf = draft ? *draft_tf : *m.transformer;
  // Any valid ids do: the time does not depend on which tokens they are.
  const int32_t vocab = m.tokenizer->n_vocab();
  auto ids = [&](int32_t n, int32_t salt) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (7919 * (i + 1) + 104729 * salt) % vocab;
    return t;
  };
  std::vector<std::unique_ptr<SequenceKV>> seqs;
  std::vector<float> logits;
  for (int32_t b = 0; b < batch; ++b) {
    seqs.push_back(std::make_unique<SequenceKV>(cache));
    if (context > 0) {
      const auto ctx = ids(context, b);
      for (int32_t i = 0; i < context; i += kPrefillChunk) {
        Batch pb;
        const auto chunk = std::span(ctx).subspan(static_cast<size_t>(i), static_cast<size_t>(std::min(kPrefillChunk, context - i)));
        pb.add(*seqs.back(), chunk, std::vector<bool>(chunk.size(), false));
        tf.forward(pb, logits);
      }
    }
  }
  // One untimed pass at the widest n first: sizes the transformer's scratch (as a running
  // decoder's already is) and warms the caches.
  {
    Batch warm;
    std::vector<std::vector<int32_t>> toks;
    for (int32_t b = 0; b < batch; ++b) toks.push_back(ids(n_max, 2000 + b));
    for (int32_t b = 0; b < batch; ++b) warm.add_all_logits(*seqs[static_cast<size_t>(b)], toks[static_cast<size_t>(b)]);
    tf.forward(warm, logits);
    for (auto& sq : seqs) sq->truncate(context);
  }
  std::vector<std::vector<double>> ms(n_values.size());
  for (int32_t rep = 0; rep < reps; ++rep) {
    for (size_t i = 0; i < n_values.size(); ++i) {
      const int32_t n = n_values[i];
      std::vector<std::vector<int32_t>> toks;
      Batch pass;
      for (int32_t b = 0; b < batch; ++b) toks.push_back(ids(n, 1000 + b));
      for (int32_t b = 0; b < batch; ++b) {
        if (draft) pass.add(*seqs[static_cast<size_t>(b)], toks[static_cast<size_t>(b)]);  // last logits: a draft step
        else pass.add_all_logits(*seqs[static_cast<size_t>(b)], toks[static_cast<size_t>(b)]);  // all: verification
      }
      const auto t0 = std::chrono::steady_clock::now();
      tf.forward(pass, logits);
      ms[i].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      for (auto& sq : seqs) sq->truncate(context);
    }
  }
  return ms;
}

void Engine::set_cost_model(std::shared_ptr<const CostModel> model) {
  std::lock_guard<std::mutex> lk(impl_->cost_mu);
  impl_->cost_model = std::move(model);
  impl_->overhead = std::make_shared<OverheadTracker>();  // what was measured against the old model is void
}

std::shared_ptr<const CostModel> Engine::cost_model() const {
  std::lock_guard<std::mutex> lk(impl_->cost_mu);
  return impl_->cost_model;
}

}  // namespace tandem

namespace tandem {
PolicyCosts EngineAccess::policy_costs(const Engine& e) { return e.impl_->policy_costs(); }

EngineParts EngineAccess::parts(Engine& e) {
  Engine::Impl& m = *e.impl_;
  return {*m.transformer, *m.tokenizer, m.draft_transformer.get(), m.context, m.mu};
}
}  // namespace tandem
