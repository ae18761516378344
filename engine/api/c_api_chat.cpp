// C API: conversations → prompts with the model's chat template (tandem_chat_render,
// tandem_chat_tokenize), through the same ChatPrompt the server uses.
#include <string>
#include <vector>

#include "engine/api/c_api_internal.hpp"

namespace tandem::capi {
namespace {

// The engine's ChatPrompt, parsed on first use. Returns nullptr after recording the error
// (TANDEM_ERR_LOAD: the model's template is the problem, not the caller's arguments).
const ChatPrompt* chat_prompt(const tandem_engine* e, const char* fn) {
  std::lock_guard<std::mutex> lock(e->chat_mutex);
  if (!e->chat && e->chat_error.empty()) {
    try {
      e->chat.emplace(ChatPrompt::from_model(e->info.path, *e->engine));
    } catch (const std::exception& ex) {
      e->chat_error = ex.what();
    }
  }
  if (!e->chat) {
    fail(TANDEM_ERR_LOAD, std::string(fn) + ": " + e->chat_error);
    return nullptr;
  }
  return &*e->chat;
}

// Checks the arguments shared by both functions and renders; the status is TANDEM_OK or
// the failure already recorded.
tandem_status render(const tandem_engine* e, const tandem_chat_message* messages, size_t n, const char* fn,
                     std::string* out) {
  if (tandem_status s = check_engine(e, fn)) return s;
  if (!messages && n > 0) return fail(TANDEM_ERR_INVALID_ARGUMENT, std::string(fn) + ": messages is NULL but n_messages > 0");
  std::vector<ChatMessage> conv;
  conv.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (!messages[i].role || !messages[i].content)
      return fail(TANDEM_ERR_INVALID_ARGUMENT,
                  std::string(fn) + ": message " + std::to_string(i) + " has a NULL role or content");
    conv.push_back({messages[i].role, messages[i].content});
  }
  const ChatPrompt* chat = chat_prompt(e, fn);
  if (!chat) return TANDEM_ERR_LOAD;
  try {
    *out = chat->render(conv);
  } catch (const ChatTemplateError& ex) {
    // The conversation does not fit the template (its raise_exception, a type error on
    // the caller's values): the caller's input, so an invalid argument.
    return fail(TANDEM_ERR_INVALID_ARGUMENT, std::string(fn) + ": the chat template rejected the conversation: " +
                                                 (ex.raised_by_template() ? ex.message() : std::string(ex.what())));
  }
  return TANDEM_OK;
}

}  // namespace
}  // namespace tandem::capi

extern "C" {

tandem_status tandem_chat_render(const tandem_engine* engine, const tandem_chat_message* messages, size_t n_messages,
                                 char* text, size_t capacity, size_t* out_len) {
  using namespace tandem::capi;
  constexpr const char* fn = "tandem_chat_render";
  return guarded(TANDEM_ERR_RUNTIME, [&] {
    if (!out_len) return fail(TANDEM_ERR_INVALID_ARGUMENT, std::string(fn) + ": out_len is NULL");
    if (!text && capacity > 0) return fail(TANDEM_ERR_INVALID_ARGUMENT, std::string(fn) + ": text is NULL but capacity > 0");
    std::string s;
    if (tandem_status st = render(engine, messages, n_messages, fn, &s)) return st;
    return copy_text_out(s, text, capacity, out_len, fn);
  });
}

tandem_status tandem_chat_tokenize(const tandem_engine* engine, const tandem_chat_message* messages, size_t n_messages,
                                   int32_t* tokens, size_t capacity, size_t* out_n) {
  using namespace tandem::capi;
  constexpr const char* fn = "tandem_chat_tokenize";
  return guarded(TANDEM_ERR_RUNTIME, [&] {
    if (!out_n) return fail(TANDEM_ERR_INVALID_ARGUMENT, std::string(fn) + ": out_n is NULL");
    if (!tokens && capacity > 0) return fail(TANDEM_ERR_INVALID_ARGUMENT, std::string(fn) + ": tokens is NULL but capacity > 0");
    std::string s;
    if (tandem_status st = render(engine, messages, n_messages, fn, &s)) return st;
    // engine->chat is set once (under the mutex, by render above) and never changed or
    // reset afterwards, so reading it without the lock is safe.
    const std::vector<int32_t> ids = engine->chat->tokenize(*engine->engine, s);
    return copy_ids_out(ids, tokens, capacity, out_n, fn);
  });
}

}  // extern "C"
