// C API: generation with a C streaming callback, and the library-allocated results.
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/api/c_api_internal.hpp"

namespace tandem::capi {
namespace {

struct ResultDeleter {
  void operator()(tandem_result* r) const noexcept { tandem_result_free(r); }
};
using ResultPtr = std::unique_ptr<tandem_result, ResultDeleter>;

template <class T>
const T* copy_array(const std::vector<T>& v) {
  T* p = new T[v.size() + 1]();  // never NULL, even when empty: simpler for FFI readers
  std::copy(v.begin(), v.end(), p);
  return p;
}

// The C view of one token's logprobs; `top` points into storage the caller keeps.
tandem_token_logprobs c_logprobs(const TokenLogprobs& lp, std::vector<tandem_logprob>& top) {
  top.clear();
  for (const TokenLogprob& t : lp.top) top.push_back({t.token, t.logprob});
  return {lp.chosen.token, lp.chosen.logprob, top.data(), top.size()};
}

// A list of logprobs as the result holds it: one allocation for the entries and one for all
// their alternatives, which the first entry points at (tandem_result_free relies on it).
void fill_logprobs(const std::vector<TokenLogprobs>& lps, const tandem_token_logprobs** out, size_t* n) {
  size_t n_top = 0;
  for (const TokenLogprobs& lp : lps) n_top += lp.top.size();
  auto* entries = new tandem_token_logprobs[lps.size() + 1]();
  *out = entries;
  *n = lps.size();
  auto* tops = new tandem_logprob[n_top + 1]();
  size_t at = 0;
  for (size_t i = 0; i < lps.size(); ++i) {
    const TokenLogprobs& lp = lps[i];
    entries[i] = {lp.chosen.token, lp.chosen.logprob, tops + at, lp.top.size()};
    for (const TokenLogprob& t : lp.top) tops[at++] = {t.token, t.logprob};
  }
  if (lps.empty()) delete[] tops;  // nothing points at it
}

void free_logprobs(const tandem_token_logprobs* lps, size_t n) {
  if (!lps) return;
  if (n > 0) delete[] lps[0].top;
  delete[] lps;
}

ResultPtr make_result(const GenerateResult& g) {
  ResultPtr r(new tandem_result{});  // all pointers NULL until filled: safe to free midway
  r->struct_size = sizeof(tandem_result);
  char* text = new char[g.text.size() + 1];
  std::memcpy(text, g.text.data(), g.text.size());
  text[g.text.size()] = '\0';
  r->text = text;
  r->text_len = g.text.size();
  r->tokens = copy_array(g.tokens);
  r->n_tokens = g.tokens.size();
  r->prompt_tokens = copy_array(g.prompt_tokens);
  r->n_prompt_tokens = g.prompt_tokens.size();
  switch (g.finish) {
    case FinishReason::Stop: r->finish_reason = TANDEM_FINISH_STOP; break;
    case FinishReason::Length: r->finish_reason = TANDEM_FINISH_LENGTH; break;
    case FinishReason::Cancelled: r->finish_reason = TANDEM_FINISH_CANCELLED; break;
  }
  const Timings& t = g.timings;
  r->prefill_ms = t.prefill_ms;
  r->decode_ms = t.decode_ms;
  r->prefill_tokens_per_s = t.prefill_tokens_per_s();
  r->decode_tokens_per_s = t.decode_tokens_per_s();
  const SpeculativeMetrics& m = g.speculative;
  r->spec_drafts = m.drafts;
  r->spec_drafted_tokens = m.drafted_tokens;
  r->spec_accepted_tokens = m.accepted_tokens;
  r->spec_acceptance_rate = m.acceptance_rate();
  r->spec_mean_accepted_length = m.mean_accepted_length();
  r->spec_target_passes = m.target_passes;
  r->spec_draft_forwards = m.draft_forwards;
  r->spec_draft_ms = m.draft_ms;
  r->spec_target_ms = m.target_ms;
  r->spec_verify_ms = m.verify_ms;
  r->spec_lookup_steps = m.lookup_steps;
  r->spec_lookup_drafted_tokens = m.lookup_drafted_tokens;
  r->spec_lookup_accepted_tokens = m.lookup_accepted_tokens;
  r->seed = g.seed;
  r->spec_tree_steps = m.tree_steps;
  // Both per-position vectors have draft_max entries; copy the common length.
  const size_t n_pos = std::min(m.drafted_per_position.size(), m.accepted_per_position.size());
  r->spec_drafted_per_position = copy_array(std::vector<int64_t>(m.drafted_per_position.begin(),
                                                                 m.drafted_per_position.begin() + n_pos));
  r->spec_accepted_per_position = copy_array(std::vector<int64_t>(m.accepted_per_position.begin(),
                                                                  m.accepted_per_position.begin() + n_pos));
  r->spec_n_positions = n_pos;
  fill_logprobs(g.logprobs, &r->logprobs, &r->n_logprobs);
  fill_logprobs(g.prompt_logprobs, &r->prompt_logprobs, &r->n_prompt_logprobs);
  return r;
}

// `run` calls the C++ engine with the options and the bridged callback; everything around
// it (argument checks, callback bridging, result conversion) is shared by both entry points.
// callback: a tandem_stream_fn or a tandem_stream_logprobs_fn.
template <class Callback, class Run>
tandem_status generate(tandem_engine* engine, const tandem_generate_params* params, Callback callback,
                       void* user_data, tandem_result** out_result, const char* fn, Run&& run) {
  if (out_result) *out_result = nullptr;
  if (tandem_status s = check_engine(engine, fn)) return s;
  const GenerateOptions opts = to_generate_options(params);
  StreamEventCallback bridge;
  std::string piece;  // NUL-terminated copy of each piece for C
  std::vector<tandem_logprob> top;
  if (callback) {
    bridge = [&](const StreamEvent& ev) {
      piece.assign(ev.text);
      if constexpr (std::is_same_v<Callback, tandem_stream_logprobs_fn>) {
        tandem_token_logprobs lp{};
        if (ev.logprobs) lp = c_logprobs(*ev.logprobs, top);
        return callback(piece.c_str(), piece.size(), ev.token, ev.logprobs ? &lp : nullptr, user_data) == 0;
      } else {
        return callback(piece.c_str(), piece.size(), ev.token, user_data) == 0;
      }
    };
  }
  const GenerateResult g = run(opts, bridge);
  if (out_result) *out_result = make_result(g).release();
  return g.finish == FinishReason::Cancelled ? TANDEM_CANCELLED : TANDEM_OK;
}

}  // namespace
}  // namespace tandem::capi

namespace tandem::capi {
namespace {

template <class Callback>
tandem_status generate_text(tandem_engine* engine, const char* prompt, const tandem_generate_params* params,
                            Callback callback, void* user_data, tandem_result** out_result, const char* fn) {
  return guarded(TANDEM_ERR_RUNTIME, [&] {
    if (out_result) *out_result = nullptr;
    if (!prompt) return fail(TANDEM_ERR_INVALID_ARGUMENT, std::string(fn) + ": prompt is NULL");
    return generate(engine, params, callback, user_data, out_result, fn,
                    [&](const GenerateOptions& o, const StreamEventCallback& cb) {
                      return engine->engine->generate(prompt, o, cb);
                    });
  });
}

template <class Callback>
tandem_status generate_ids(tandem_engine* engine, const int32_t* prompt, size_t n_prompt,
                           const tandem_generate_params* params, Callback callback, void* user_data,
                           tandem_result** out_result, const char* fn) {
  return guarded(TANDEM_ERR_RUNTIME, [&] {
    if (out_result) *out_result = nullptr;
    if (!prompt && n_prompt > 0) return fail(TANDEM_ERR_INVALID_ARGUMENT, std::string(fn) + ": prompt is NULL");
    if (tandem_status s = check_engine(engine, fn)) return s;
    if (tandem_status s = check_tokens(engine, prompt, n_prompt, fn)) return s;
    return generate(engine, params, callback, user_data, out_result, fn,
                    [&](const GenerateOptions& o, const StreamEventCallback& cb) {
                      return engine->engine->generate_tokens(std::span<const int32_t>(prompt, n_prompt), o, cb);
                    });
  });
}

}  // namespace
}  // namespace tandem::capi

extern "C" {

tandem_status tandem_generate(tandem_engine* engine, const char* prompt, const tandem_generate_params* params,
                              tandem_stream_fn callback, void* user_data, tandem_result** out_result) {
  return tandem::capi::generate_text(engine, prompt, params, callback, user_data, out_result, "tandem_generate");
}

tandem_status tandem_generate_logprobs(tandem_engine* engine, const char* prompt, const tandem_generate_params* params,
                                       tandem_stream_logprobs_fn callback, void* user_data,
                                       tandem_result** out_result) {
  return tandem::capi::generate_text(engine, prompt, params, callback, user_data, out_result,
                                     "tandem_generate_logprobs");
}

tandem_status tandem_generate_tokens(tandem_engine* engine, const int32_t* prompt, size_t n_prompt,
                                     const tandem_generate_params* params, tandem_stream_fn callback,
                                     void* user_data, tandem_result** out_result) {
  return tandem::capi::generate_ids(engine, prompt, n_prompt, params, callback, user_data, out_result,
                                    "tandem_generate_tokens");
}

tandem_status tandem_generate_tokens_logprobs(tandem_engine* engine, const int32_t* prompt, size_t n_prompt,
                                              const tandem_generate_params* params,
                                              tandem_stream_logprobs_fn callback, void* user_data,
                                              tandem_result** out_result) {
  return tandem::capi::generate_ids(engine, prompt, n_prompt, params, callback, user_data, out_result,
                                    "tandem_generate_tokens_logprobs");
}

void tandem_result_free(tandem_result* result) {
  if (!result) return;
  delete[] result->text;
  delete[] result->tokens;
  delete[] result->prompt_tokens;
  delete[] result->spec_drafted_per_position;
  delete[] result->spec_accepted_per_position;
  tandem::capi::free_logprobs(result->logprobs, result->n_logprobs);
  tandem::capi::free_logprobs(result->prompt_logprobs, result->n_prompt_logprobs);
  delete result;
}

}  // extern "C"
