// C API: parameter structs — defaults, and conversion to the C++ options.
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/api/c_api_internal.hpp"
#include "policies/factory.hpp"

namespace tandem::capi {
namespace {

tandem_load_params default_load_params() {
  const LoadOptions d;
  tandem_load_params p{};
  p.struct_size = sizeof p;
  p.threads = d.threads;
  p.context = d.context;
  return p;  // strings NULL: model_path required, the others default when NULL
}

// The C++ defaults are the single source of truth; the C struct mirrors them.
tandem_generate_params default_generate_params() {
  const GenerateOptions d;
  tandem_generate_params p{};
  p.struct_size = sizeof p;
  p.max_tokens = d.max_tokens;
  p.temperature = d.sampling.temperature;
  p.top_k = d.sampling.top_k;
  p.top_p = d.sampling.top_p;
  p.min_p = d.sampling.min_p;
  p.repetition_penalty = d.sampling.repetition_penalty;
  p.repetition_window = d.sampling.repetition_window;
  p.presence_penalty = d.sampling.presence_penalty;
  p.frequency_penalty = d.sampling.frequency_penalty;
  p.seed = TANDEM_SEED_RANDOM;  // d.sampling.seed: none, a fresh one per call
  p.add_special = d.add_special;
  p.parse_special = d.parse_special;
  p.ignore_eos = d.ignore_eos;
  p.draft_mode = TANDEM_DRAFT_NONE;
  p.draft_max = d.speculative.draft_max;
  p.draft_min = d.speculative.draft_min;
  p.draft_p_min = d.speculative.draft_p_min;
  p.ngram_min = d.speculative.ngram_min;
  p.ngram_max = d.speculative.ngram_max;
  p.verify_mode = d.speculative.verify == VerifyMode::Coupled ? TANDEM_VERIFY_COUPLED : TANDEM_VERIFY_REJECTION;
  p.logprobs = d.logprobs;
  p.policy = nullptr;  // d.speculative.policy: "fixed"
  p.alpha_prior = d.speculative.alpha_prior;
  p.start_budget = d.speculative.start_budget;
  p.lookup = d.speculative.lookup ? 1 : 0;
  p.lookup_min = d.speculative.lookup_min;
  p.tree_width = d.speculative.tree_width;
  p.tree_nodes = d.speculative.tree_nodes;
  p.prompt_logprobs = d.prompt_logprobs;
  return p;
}

// Fills `out` (the caller's struct of `struct_size` bytes) with `defaults`, as far as it goes.
template <class T>
tandem_status init_struct(T* out, size_t struct_size, const T& defaults, const char* fn) {
  if (!out) return fail(TANDEM_ERR_INVALID_ARGUMENT, std::string(fn) + ": params is NULL");
  if (struct_size < sizeof(size_t))
    return fail(TANDEM_ERR_INVALID_ARGUMENT, std::string(fn) + ": struct_size " + std::to_string(struct_size) +
                                                 " is too small (pass sizeof the struct)");
  std::memset(static_cast<void*>(out), 0, struct_size);  // fields newer than this library: zero
  std::memcpy(static_cast<void*>(out), &defaults, std::min(struct_size, sizeof(T)));
  out->struct_size = struct_size;
  return TANDEM_OK;
}

}  // namespace

LoadOptions to_load_options(const tandem_load_params& given) {
  if (given.struct_size < sizeof(size_t))
    throw std::invalid_argument("tandem_load_params.struct_size is not set (use tandem_load_params_init)");
  const tandem_load_params p = read_struct(given, default_load_params());
  if (!p.model_path || !*p.model_path) throw std::invalid_argument("tandem_load_params.model_path is required");
  LoadOptions o;
  o.model_path = p.model_path;
  if (p.draft_model_path) o.draft_model_path = p.draft_model_path;
  if (p.threads < 0) throw std::invalid_argument("tandem_load_params.threads must be >= 0");
  if (p.context < 0) throw std::invalid_argument("tandem_load_params.context must be >= 0");
  o.threads = p.threads;
  o.context = p.context;
  if (p.kv_type) o.kv_type = p.kv_type;
  if (p.device) o.device = p.device;
  o.pin_threads = p.pin_threads != 0;
  o.gpu_mem_bytes = static_cast<size_t>(p.gpu_mem_bytes);
  if (p.draft_vocab < 0) throw std::invalid_argument("tandem_load_params.draft_vocab must be >= 0");
  o.draft_vocab = p.draft_vocab;
  if (p.draft_vocab_counts) o.draft_vocab_counts = p.draft_vocab_counts;
  if (p.draft_type) o.draft_type = p.draft_type;
  if (p.weight_type) o.weight_type = p.weight_type;
  return o;
}

GenerateOptions to_generate_options(const tandem_generate_params* given) {
  if (given && given->struct_size < sizeof(size_t))
    throw std::invalid_argument("tandem_generate_params.struct_size is not set (use tandem_generate_params_init)");
  const tandem_generate_params p = given ? read_struct(*given, default_generate_params()) : default_generate_params();
  GenerateOptions o;
  o.max_tokens = p.max_tokens;
  SamplingParams& s = o.sampling;
  s.temperature = p.temperature;
  s.top_k = p.top_k;
  s.top_p = p.top_p;
  s.min_p = p.min_p;
  s.repetition_penalty = p.repetition_penalty;
  s.repetition_window = p.repetition_window;
  s.presence_penalty = p.presence_penalty;
  s.frequency_penalty = p.frequency_penalty;
  if (p.seed != TANDEM_SEED_RANDOM) s.seed = p.seed;
  if (p.n_logit_bias > 0 && (!p.logit_bias_tokens || !p.logit_bias_values))
    throw std::invalid_argument("tandem_generate_params.logit_bias_tokens and logit_bias_values must not be NULL "
                                "when n_logit_bias > 0");
  for (size_t i = 0; i < p.n_logit_bias; ++i) {
    const int32_t t = p.logit_bias_tokens[i];
    if (!s.logit_bias.emplace(t, p.logit_bias_values[i]).second)
      throw std::invalid_argument("tandem_generate_params.logit_bias_tokens lists token " + std::to_string(t) +
                                  " twice");
  }
  if (p.n_stop > 0 && !p.stop) throw std::invalid_argument("tandem_generate_params.stop is NULL but n_stop > 0");
  for (size_t i = 0; i < p.n_stop; ++i) {
    if (!p.stop[i]) throw std::invalid_argument("tandem_generate_params.stop[" + std::to_string(i) + "] is NULL");
    o.stop.emplace_back(p.stop[i]);
  }
  if (p.n_stop_token_ids > 0 && !p.stop_token_ids)
    throw std::invalid_argument("tandem_generate_params.stop_token_ids is NULL but n_stop_token_ids > 0");
  o.stop_token_ids.assign(p.stop_token_ids, p.stop_token_ids + p.n_stop_token_ids);
  o.add_special = p.add_special != 0;
  o.parse_special = p.parse_special != 0;
  o.ignore_eos = p.ignore_eos != 0;
  switch (p.draft_mode) {
    case TANDEM_DRAFT_NONE: o.speculative.mode = DraftMode::None; break;
    case TANDEM_DRAFT_MODEL: o.speculative.mode = DraftMode::Model; break;
    case TANDEM_DRAFT_NGRAM: o.speculative.mode = DraftMode::Ngram; break;
    default:
      throw std::invalid_argument("tandem_generate_params.draft_mode " + std::to_string(p.draft_mode) +
                                  " is not a tandem_draft_mode");
  }
  if (p.draft_max < 0) throw std::invalid_argument("tandem_generate_params.draft_max must be >= 0");
  o.speculative.draft_max = p.draft_max;
  o.speculative.draft_min = p.draft_min;
  o.speculative.draft_p_min = p.draft_p_min;
  o.speculative.ngram_min = p.ngram_min;
  o.speculative.ngram_max = p.ngram_max;
  switch (p.verify_mode) {
    case TANDEM_VERIFY_REJECTION: o.speculative.verify = VerifyMode::Rejection; break;
    case TANDEM_VERIFY_COUPLED: o.speculative.verify = VerifyMode::Coupled; break;
    default:
      throw std::invalid_argument("tandem_generate_params.verify_mode " + std::to_string(p.verify_mode) +
                                  " is not a tandem_verify_mode");
  }
  if (p.grammar) o.grammar = p.grammar;
  static_assert(TANDEM_MAX_TOP_LOGPROBS == kMaxTopLogprobs);
  if (p.logprobs < -1 || p.logprobs > TANDEM_MAX_TOP_LOGPROBS)
    throw std::invalid_argument("tandem_generate_params.logprobs must be -1 (none) or in 0.." +
                                std::to_string(TANDEM_MAX_TOP_LOGPROBS));
  o.logprobs = p.logprobs;
  if (p.prompt_logprobs < -1 || p.prompt_logprobs > TANDEM_MAX_TOP_LOGPROBS)
    throw std::invalid_argument("tandem_generate_params.prompt_logprobs must be -1 (none) or in 0.." +
                                std::to_string(TANDEM_MAX_TOP_LOGPROBS));
  o.prompt_logprobs = p.prompt_logprobs;
  if (p.policy && *p.policy) {
    if (!is_policy_name(p.policy))
      throw std::invalid_argument(std::string("tandem_generate_params.policy '") + p.policy +
                                  "' is not a policy (use fixed, confidence, adaptive or goodput)");
    o.speculative.policy = p.policy;
  }
  if (!(p.alpha_prior >= 0.0f && p.alpha_prior <= 1.0f))
    throw std::invalid_argument("tandem_generate_params.alpha_prior must be in [0, 1]");
  if (!std::isfinite(p.start_budget))
    throw std::invalid_argument("tandem_generate_params.start_budget must be finite");
  o.speculative.alpha_prior = p.alpha_prior;
  o.speculative.start_budget = p.start_budget;
  if (p.lookup_min < 1 || p.lookup_min > kMaxLookupMin)
    throw std::invalid_argument("tandem_generate_params.lookup_min must be in 1.." + std::to_string(kMaxLookupMin));
  o.speculative.lookup = p.lookup != 0;
  o.speculative.lookup_min = p.lookup_min;
  if (p.tree_width < 1 || p.tree_width > kMaxTreeNodes || p.tree_nodes < 0 || p.tree_nodes > kMaxTreeNodes)
    throw std::invalid_argument("tandem_generate_params.tree_width must be in 1.." + std::to_string(kMaxTreeNodes) +
                                " and tree_nodes in 0.." + std::to_string(kMaxTreeNodes));
  o.speculative.tree_width = p.tree_width;
  o.speculative.tree_nodes = p.tree_nodes;
  return o;
}

}  // namespace tandem::capi

extern "C" {

tandem_status tandem_load_params_init(tandem_load_params* params, size_t struct_size) {
  using namespace tandem::capi;
  return guarded(TANDEM_ERR_INTERNAL, [&] {
    return init_struct(params, struct_size, default_load_params(), "tandem_load_params_init");
  });
}

tandem_status tandem_generate_params_init(tandem_generate_params* params, size_t struct_size) {
  using namespace tandem::capi;
  return guarded(TANDEM_ERR_INTERNAL, [&] {
    return init_struct(params, struct_size, default_generate_params(), "tandem_generate_params_init");
  });
}

}  // extern "C"
