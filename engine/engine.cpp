// tandem::Engine: loads the target (and optional draft), and runs one request at a time
// through the Coordinator: prompt → tokenizer → prefill → draft/verify/commit → text.
#include <chrono>
#include <mutex>
#include <stdexcept>

#include "draft/model_proposer.hpp"
#include "draft/ngram_proposer.hpp"
#include "engine/coordinator.hpp"
#include "engine/forward.hpp"
#include "engine/gguf.hpp"
#include "engine/tokenizer.hpp"
#include "engine/vocab_compat.hpp"
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

struct Engine::Impl {
  LoadOptions opts;
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<KVCache> cache;
  std::unique_ptr<Transformer> transformer;
  int32_t context = 0;
  // Draft model (optional): its own weights and paged cache on the same backend.
  std::unique_ptr<Model> draft;
  std::unique_ptr<Tokenizer> draft_tokenizer;
  std::unique_ptr<KVCache> draft_cache;
  std::unique_ptr<ModelProposer> model_proposer;
  std::mutex mu;

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
  impl->backend = kernels::make_cpu_backend(opts.threads);
  impl->model = Model::load(opts.model_path, *impl->backend);
  impl->tokenizer = Tokenizer::from_gguf(impl->model->file());
  const ModelConfig& c = impl->model->config();
  if (impl->tokenizer->n_vocab() > c.n_vocab)
    throw std::runtime_error(opts.model_path + ": tokenizer has " + std::to_string(impl->tokenizer->n_vocab()) +
                             " tokens but the embedding matrix only " + std::to_string(c.n_vocab) + " rows");
  impl->context = opts.context > 0 ? opts.context : std::min<int32_t>(c.n_ctx_train, 4096);
  KVCacheOptions kv;
  kv.max_tokens = impl->context;
  kv.dtype = parse_kv_type(opts.kv_type);
  impl->cache = std::make_unique<KVCache>(*impl->backend, c, kv);
  impl->transformer = std::make_unique<Transformer>(*impl->model, *impl->cache);
  if (!opts.draft_model_path.empty()) {
    impl->draft = Model::load(opts.draft_model_path, *impl->backend);
    impl->draft_tokenizer = Tokenizer::from_gguf(impl->draft->file());
    const std::string why = vocab_incompatibility(*impl->tokenizer, *impl->draft_tokenizer);
    if (!why.empty())
      throw std::runtime_error("draft model " + opts.draft_model_path + " cannot serve target " + opts.model_path +
                               ": " + why);
    KVCacheOptions dkv = kv;
    dkv.max_tokens = impl->context + 16;  // drafts run a few positions past the committed text
    impl->draft_cache = std::make_unique<KVCache>(*impl->backend, impl->draft->config(), dkv);
    impl->model_proposer = std::make_unique<ModelProposer>(*impl->draft, *impl->draft_cache);
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
  i.kv_bytes = impl_->cache->bytes();
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

GenerateResult Engine::generate(std::string_view prompt, const GenerateOptions& opts, const StreamCallback& cb) {
  const auto ids = impl_->tokenizer->encode(prompt, opts.add_special, opts.parse_special);
  return generate_tokens(ids, opts, cb);
}

GenerateResult Engine::generate_tokens(std::span<const int32_t> prompt, const GenerateOptions& opts,
                                       const StreamCallback& cb) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  Impl& m = *impl_;
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
  Coordinator coord(*m.transformer, *m.tokenizer, proposer, m.context);
  return coord.run(prompt, opts, cb);
}

}  // namespace tandem
