// Engine::Impl: what a loaded Engine holds. Private to engine/runtime/ (engine.cpp,
// engine_timing.cpp, engine_access.cpp); the public class is tandem/engine.hpp.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>

#include "draft/draft_probs.hpp"
#include "engine/kv/kv_pool.hpp"
#include "engine/kv/kv_cache.hpp"
#include "engine/model/model.hpp"
#include "engine/model/transformer.hpp"
#include "engine/runtime/engine_access.hpp"
#include "engine/text/tokenizer.hpp"
#include "kernels/backend.hpp"
#include "policies/cost_model.hpp"
#include "policies/overhead_tracker.hpp"
#include "policies/shape_choice.hpp"
#include "tandem/engine.hpp"

namespace tandem {

// Hidden: Engine is exported from libtandem.so, and its nested types would be too.
struct __attribute__((visibility("hidden"))) Engine::Impl {
  LoadOptions opts;
  std::unique_ptr<kernels::Backend> backend;
  std::string backend_note;  // why device "auto" did not choose CUDA
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<GrammarCache> grammars;  // over `tokenizer`
  std::unique_ptr<KVPool> kv_pool;  // both caches' memory; declared first, destroyed last
  std::unique_ptr<KVCache> cache;
  std::unique_ptr<Transformer> transformer;
  int32_t context = 0;
  // Draft model (optional): its own weights and paged cache on the same backend.
  std::unique_ptr<Model> draft;
  std::unique_ptr<Tokenizer> draft_tokenizer;
  std::unique_ptr<KVCache> draft_cache;
  std::unique_ptr<Transformer> draft_transformer;
  std::unique_ptr<DraftProbs> draft_probs;  // the draft samples on the device (null: on the host)
  std::vector<int32_t> draft_ranking;  // every token id, most frequent first (draft/vocab_ranking.hpp)
  std::vector<int32_t> eog_ids;        // always in a reduced draft vocabulary
  int32_t draft_vocab = 0;             // the reduced vocabulary's size in force; 0: all of it
  std::shared_ptr<const CostModel> cost_model;  // for the adaptive/goodput policies
  std::shared_ptr<OverheadTracker> overhead = std::make_shared<OverheadTracker>();  // goes with cost_model
  std::shared_ptr<ShapeChoice> shapes = std::make_shared<ShapeChoice>();            // so does this
  std::shared_ptr<OutputLengths> lengths = std::make_shared<OutputLengths>();       // of the workload, kept across models
  mutable std::mutex cost_mu;                   // guards cost_model and overhead (not held while generating)
  PolicyCosts policy_costs() const {
    std::lock_guard<std::mutex> lk(cost_mu);
    return {cost_model, overhead, shapes, lengths};
  }
  std::mutex mu;
  // Engine::cancel() bumps this; a generation cancels itself once it differs from the value
  // it saw on entry. A counter, not a flag, so no call can miss or inherit a cancellation.
  std::atomic<uint64_t> cancel_epoch{0};

  EngineParts parts();
  GenerateResult run(std::span<const int32_t> prompt, const GenerateOptions& opts, const StreamEventCallback& cb,
                     uint64_t epoch);
  // Loading, in order: the models and tokenizers, then both caches in one KV pool.
  void load_models();
  void make_caches();
  // The draft's output head over its n most frequent tokens (0: the whole vocabulary).
  void apply_draft_vocab(int32_t n);
};

}  // namespace tandem
