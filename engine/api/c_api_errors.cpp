// C API: version, per-thread error messages, status names, and the mapping from C++
// exceptions to tandem_status.
#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/api/c_api_internal.hpp"
#include "tandem/version.hpp"

namespace tandem::capi {
namespace {

// The message of the last call on this thread. If storing a message fails (no memory),
// `fallback` is shown instead so tandem_last_error never lies about success.
thread_local std::string t_message;
thread_local const char* t_fallback = nullptr;

}  // namespace

void clear_error() noexcept {
  t_message.clear();  // keeps capacity: no allocation, cannot throw
  t_fallback = nullptr;
}

tandem_status fail(tandem_status status, const char* message) noexcept {
  try {
    t_message.assign(message ? message : "");
    t_fallback = nullptr;
  } catch (...) {
    t_fallback = "out of memory while recording an error message";
  }
  return status;
}

tandem_status fail(tandem_status status, const std::string& message) noexcept {
  return fail(status, message.c_str());
}

tandem_status copy_text_out(const std::string& s, char* buf, size_t capacity, size_t* out_len, const char* fn) noexcept {
  *out_len = s.size();
  if (s.size() >= capacity) {
    try {
      return fail(TANDEM_ERR_BUFFER_TOO_SMALL, std::string(fn) + ": " + std::to_string(s.size()) +
                                                   " bytes and a NUL do not fit a buffer of " + std::to_string(capacity));
    } catch (...) {
      return fail(TANDEM_ERR_BUFFER_TOO_SMALL, "the buffer is too small");
    }
  }
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = '\0';
  return TANDEM_OK;
}

tandem_status copy_ids_out(const std::vector<int32_t>& ids, int32_t* tokens, size_t capacity, size_t* out_n,
                           const char* fn) noexcept {
  *out_n = ids.size();
  if (ids.size() > capacity) {
    try {
      return fail(TANDEM_ERR_BUFFER_TOO_SMALL, std::string(fn) + ": " + std::to_string(ids.size()) +
                                                   " tokens do not fit a buffer of " + std::to_string(capacity));
    } catch (...) {
      return fail(TANDEM_ERR_BUFFER_TOO_SMALL, "the buffer is too small");
    }
  }
  std::copy(ids.begin(), ids.end(), tokens);
  return TANDEM_OK;
}

tandem_status fail_current_exception(tandem_status runtime) noexcept {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return fail(TANDEM_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::invalid_argument& e) {
    return fail(TANDEM_ERR_INVALID_ARGUMENT, e.what());
  } catch (const std::logic_error& e) {  // a broken invariant inside the library
    return fail(TANDEM_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (const std::exception& e) {
    return fail(runtime, e.what());
  } catch (...) {
    return fail(TANDEM_ERR_INTERNAL, "internal error: unknown exception");
  }
}

tandem_status check_engine(const tandem_engine* e, const char* fn) noexcept {
  if (!e) return fail(TANDEM_ERR_INVALID_ARGUMENT, std::string(fn) + ": engine is NULL");
  if (e->magic != tandem_engine::kMagic || !e->engine)
    return fail(TANDEM_ERR_INVALID_ARGUMENT, std::string(fn) + ": not a valid tandem_engine (freed, or another pointer)");
  return TANDEM_OK;
}

}  // namespace tandem::capi

extern "C" {

const char* tandem_version(void) { return tandem::version_string(); }

const char* tandem_last_error(void) {
  using namespace tandem::capi;
  return t_fallback ? t_fallback : t_message.c_str();
}

const char* tandem_status_string(tandem_status status) {
  // A C caller may pass any int here; in C++ an enum value outside the enumerators' range is
  // undefined, so the bits are read as the int they are (the enum's underlying type here).
  static_assert(sizeof(tandem_status) == sizeof(int));
  int code;
  std::memcpy(&code, &status, sizeof code);
  switch (code) {
    case TANDEM_OK: return "ok";
    case TANDEM_CANCELLED: return "cancelled";
    case TANDEM_ERR_INVALID_ARGUMENT: return "invalid argument";
    case TANDEM_ERR_LOAD: return "model load failed";
    case TANDEM_ERR_BUFFER_TOO_SMALL: return "buffer too small";
    case TANDEM_ERR_OUT_OF_MEMORY: return "out of memory";
    case TANDEM_ERR_RUNTIME: return "runtime error";
    case TANDEM_ERR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

const char* tandem_finish_reason_string(int32_t reason) {
  switch (reason) {
    case TANDEM_FINISH_STOP: return "stop";
    case TANDEM_FINISH_LENGTH: return "length";
    case TANDEM_FINISH_CANCELLED: return "cancelled";
  }
  return "unknown";
}

}  // extern "C"
