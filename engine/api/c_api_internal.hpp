// Shared pieces of the C API implementation (engine/c_api*.cpp): the engine handle, the
// per-thread error message, and the wrapper that keeps exceptions from crossing into C.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "engine/api/chat_prompt.hpp"
#include "tandem/engine.hpp"
#include "tandem/tandem.h"

// The opaque handle of tandem.h. `magic` lets calls reject a pointer that is not an engine
// (or one already freed and overwritten) with an error instead of undefined behaviour in
// most cases; it is cleared on free.
struct tandem_engine {
  static constexpr uint64_t kMagic = 0x74616e64656d4531ull;  // "tandemE1"
  uint64_t magic = kMagic;
  std::unique_ptr<tandem::Engine> engine;
  // Strings tandem_engine_info hands out; fixed after load, so readable from any thread.
  tandem::ModelInfo info;
  std::string backend_description;
  // The chat template, parsed by the first tandem_chat_* call (c_api_chat.cpp): a model
  // whose template cannot be parsed still loads and generates. Guarded by chat_mutex.
  mutable std::mutex chat_mutex;
  mutable std::optional<tandem::ChatPrompt> chat;
  mutable std::string chat_error;  // why the template could not be parsed; "" if not tried or fine
};

namespace tandem::capi {

// Sets this thread's message (tandem_last_error) and returns `status`; never throws.
tandem_status fail(tandem_status status, const char* message) noexcept;
tandem_status fail(tandem_status status, const std::string& message) noexcept;
void clear_error() noexcept;
// The text out-parameter convention (tandem_detokenize's): *out_len = s.size(); s and a NUL
// into `buf` when they fit in `capacity`, else TANDEM_ERR_BUFFER_TOO_SMALL naming `fn`.
tandem_status copy_text_out(const std::string& s, char* buf, size_t capacity, size_t* out_len, const char* fn) noexcept;
// The token out-parameter convention (tandem_tokenize's): *out_n = ids.size(); the ids into
// `tokens` when they fit in `capacity`, else TANDEM_ERR_BUFFER_TOO_SMALL naming `fn`.
tandem_status copy_ids_out(const std::vector<int32_t>& ids, int32_t* tokens, size_t capacity, size_t* out_n,
                           const char* fn) noexcept;
// Inside a catch block: maps the exception in flight to a status and message. Exceptions
// that are not about the arguments (std::runtime_error and the like) map to `runtime`.
tandem_status fail_current_exception(tandem_status runtime) noexcept;

// Runs `f` (which returns a tandem_status) with the error cleared first and every
// exception turned into a status: the body of every C API function that can fail.
template <class F>
tandem_status guarded(tandem_status runtime, F&& f) noexcept {
  clear_error();
  try {
    return f();
  } catch (...) {
    return fail_current_exception(runtime);
  }
}

// NULL and wrong-type handles → TANDEM_ERR_INVALID_ARGUMENT with a message naming `fn`.
tandem_status check_engine(const tandem_engine* e, const char* fn) noexcept;

// Ids outside [0, n_vocab) → TANDEM_ERR_INVALID_ARGUMENT naming the first bad one.
tandem_status check_tokens(const tandem_engine* e, const int32_t* tokens, size_t n, const char* fn);

LoadOptions to_load_options(const tandem_load_params& p);
GenerateOptions to_generate_options(const tandem_generate_params* p);
// Copies a caller's struct of `struct_size` bytes (maybe older and smaller, maybe newer
// and larger than ours) over `defaults`: fields it does not have keep their defaults.
// The caller has checked that struct_size covers at least the struct_size field.
template <class T>
T read_struct(const T& given, T defaults) {
  std::memcpy(static_cast<void*>(&defaults), &given, std::min(given.struct_size, sizeof(T)));
  defaults.struct_size = sizeof(T);
  return defaults;
}

}  // namespace tandem::capi
