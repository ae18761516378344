// C API: engine handles (load, free, info, cancel) and the tokenizer. Generation lives in
// c_api_generate.cpp. Every function catches everything: no exception reaches C.
#include <span>
#include <string>

#include "engine/api/c_api_internal.hpp"
#include "engine/runtime/engine_calibration.hpp"

namespace tandem::capi {
namespace {

tandem_status invalid(const char* fn, const char* what) {
  return fail(TANDEM_ERR_INVALID_ARGUMENT, std::string(fn) + ": " + what);
}

}  // namespace

tandem_status check_tokens(const tandem_engine* e, const int32_t* tokens, size_t n, const char* fn) {
  const int32_t n_vocab = e->info.n_vocab;
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= n_vocab)
      return fail(TANDEM_ERR_INVALID_ARGUMENT, std::string(fn) + ": token " + std::to_string(tokens[i]) + " at " +
                                                   std::to_string(i) + " is outside the vocabulary (0.." +
                                                   std::to_string(n_vocab - 1) + ")");
  }
  return TANDEM_OK;
}

}  // namespace tandem::capi

extern "C" {

tandem_status tandem_engine_load(const tandem_load_params* params, tandem_engine** out_engine) {
  using namespace tandem::capi;
  constexpr const char* fn = "tandem_engine_load";
  return guarded(TANDEM_ERR_LOAD, [&] {
    if (!out_engine) return invalid(fn, "out_engine is NULL");
    *out_engine = nullptr;
    if (!params) return invalid(fn, "params is NULL");
    auto h = std::make_unique<tandem_engine>();
    h->engine = tandem::Engine::load(to_load_options(*params));
    h->info = h->engine->info();
    h->backend_description = h->engine->backend_description();
    *out_engine = h.release();
    return TANDEM_OK;
  });
}

void tandem_engine_free(tandem_engine* engine) {
  // A pointer that is not a live engine is ignored: there is no way to report it here.
  if (!engine || engine->magic != tandem_engine::kMagic) return;
  engine->magic = 0;
  delete engine;
}

tandem_status tandem_engine_info(const tandem_engine* engine, tandem_model_info* out_info) {
  using namespace tandem::capi;
  constexpr const char* fn = "tandem_engine_info";
  return guarded(TANDEM_ERR_INTERNAL, [&] {
    if (tandem_status s = check_engine(engine, fn)) return s;
    if (!out_info) return invalid(fn, "out_info is NULL");
    if (out_info->struct_size < sizeof(size_t)) return invalid(fn, "out_info->struct_size is not set (sizeof the struct)");
    const tandem::ModelInfo& m = engine->info;
    tandem_model_info i{};
    i.struct_size = out_info->struct_size;
    i.path = m.path.c_str();
    i.architecture = m.architecture.c_str();
    i.name = m.name.c_str();
    i.backend = engine->backend_description.c_str();
    i.draft_path = m.draft_path.c_str();
    i.draft_name = m.draft_name.c_str();
    i.backend_note = m.backend_note.c_str();
    i.n_vocab = m.n_vocab;
    i.n_layer = m.n_layer;
    i.n_embd = m.n_embd;
    i.n_head = m.n_head;
    i.n_head_kv = m.n_head_kv;
    i.context = m.context;
    i.weight_bytes = m.weight_bytes;
    i.kv_bytes = m.kv_bytes;
    i.draft_vocab = m.draft_vocab;
    i.draft_type = m.draft_type.c_str();
    i.weight_type = m.weight_type.c_str();
    // An older caller's struct is shorter: fill only what it has.
    std::memcpy(static_cast<void*>(out_info), &i, std::min(out_info->struct_size, sizeof i));
    return TANDEM_OK;
  });
}

tandem_status tandem_engine_cancel(tandem_engine* engine) {
  using namespace tandem::capi;
  return guarded(TANDEM_ERR_INTERNAL, [&] {
    if (tandem_status s = check_engine(engine, "tandem_engine_cancel")) return s;
    engine->engine->cancel();
    return TANDEM_OK;
  });
}

tandem_status tandem_engine_calibrate(tandem_engine* engine, int32_t k_max, const char* cache_path,
                                      int32_t* out_from_cache) {
  using namespace tandem::capi;
  constexpr const char* fn = "tandem_engine_calibrate";
  return guarded(TANDEM_ERR_RUNTIME, [&] {
    if (tandem_status s = check_engine(engine, fn)) return s;
    if (k_max < 0 || k_max > 32) return invalid(fn, "k_max must be in 0..32 (0: 8)");
    tandem::CalibrationOptions co;
    co.k_max = k_max > 0 ? k_max : 8;
    co.cache_path = cache_path ? std::string(cache_path) : tandem::default_cost_cache_path();
    const bool cached = tandem::calibrate_and_install(*engine->engine, co);
    if (out_from_cache) *out_from_cache = cached ? 1 : 0;
    return TANDEM_OK;
  });
}

tandem_status tandem_tokenize(const tandem_engine* engine, const char* text, int add_special, int parse_special,
                              int32_t* tokens, size_t capacity, size_t* out_n) {
  using namespace tandem::capi;
  constexpr const char* fn = "tandem_tokenize";
  return guarded(TANDEM_ERR_RUNTIME, [&] {
    if (tandem_status s = check_engine(engine, fn)) return s;
    if (!text) return invalid(fn, "text is NULL");
    if (!out_n) return invalid(fn, "out_n is NULL");
    if (!tokens && capacity > 0) return invalid(fn, "tokens is NULL but capacity > 0");
    const auto ids = engine->engine->tokenize(text, add_special != 0, parse_special != 0);
    return copy_ids_out(ids, tokens, capacity, out_n, fn);
  });
}

tandem_status tandem_fim_tokenize(const tandem_engine* engine, const char* prefix, const char* suffix, int32_t* tokens,
                                  size_t capacity, size_t* out_n) {
  using namespace tandem::capi;
  constexpr const char* fn = "tandem_fim_tokenize";
  return guarded(TANDEM_ERR_RUNTIME, [&] {
    if (tandem_status s = check_engine(engine, fn)) return s;
    if (!prefix || !suffix) return invalid(fn, "prefix or suffix is NULL");
    if (!out_n) return invalid(fn, "out_n is NULL");
    if (!tokens && capacity > 0) return invalid(fn, "tokens is NULL but capacity > 0");
    const auto ids = engine->engine->fim_prompt(prefix, suffix);
    return copy_ids_out(ids, tokens, capacity, out_n, fn);
  });
}

tandem_status tandem_detokenize(const tandem_engine* engine, const int32_t* tokens, size_t n_tokens, char* text,
                                size_t capacity, size_t* out_len) {
  using namespace tandem::capi;
  constexpr const char* fn = "tandem_detokenize";
  return guarded(TANDEM_ERR_RUNTIME, [&] {
    if (tandem_status s = check_engine(engine, fn)) return s;
    if (!tokens && n_tokens > 0) return invalid(fn, "tokens is NULL but n_tokens > 0");
    if (!out_len) return invalid(fn, "out_len is NULL");
    if (!text && capacity > 0) return invalid(fn, "text is NULL but capacity > 0");
    if (tandem_status s = check_tokens(engine, tokens, n_tokens, fn)) return s;
    return copy_text_out(engine->engine->detokenize(std::span<const int32_t>(tokens, n_tokens)), text, capacity,
                         out_len, fn);
  });
}

}  // extern "C"
