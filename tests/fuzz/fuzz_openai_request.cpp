// The OpenAI request parser (apps/server/openai_request.cpp): arbitrary request bodies for
// both endpoints, under a server config picked by the input; the same bodies as Responses API
// and Messages API requests (responses_api.cpp, anthropic_api.cpp), which translate into chat
// requests or refuse with a 4xx. Bodies are refused with an
// ApiError (a 4xx) or parse into a request whose fields respect the limits; the responses
// built for an accepted request are valid JSON that carries the prompt text back intact.
//
// Input: byte 0 picks the endpoint and config, the rest is the body.
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <string>

#include "apps/server/anthropic_api.hpp"
#include "apps/server/api_error.hpp"
#include "apps/server/responses_api.hpp"
#include "apps/server/openai_protocol.hpp"
#include "engine/text/utf8.hpp"
#include "tests/fuzz/fuzz_target.hpp"

using namespace tandem;
using namespace tandem::server;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz_quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t sel = data[0];
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  ProtocolConfig cfg;
  cfg.model_ids = {"smollm2", "smollm2.gguf"};
  cfg.n_vocab = 1000;
  cfg.has_draft_model = sel & 2;
  cfg.default_speculative.mode = (sel & 4) ? DraftMode::Ngram : DraftMode::None;
  cfg.max_tokens = (sel & 8) ? 64 : 0;
  const Endpoint ep = (sel & 1) ? Endpoint::Chat : Endpoint::Completion;
  // The other APIs: refused with a 4xx, or a chat request that parses or is refused in turn.
  for (auto translate : {&responses_to_chat, &messages_to_chat}) {
    try {
      (void)parse_request(Endpoint::Chat, translate(body), cfg);
    } catch (const ApiError& e) {
      fuzz_check(e.status >= 400 && e.status < 500);
      (void)boost::json::parse(anthropic_error_response(e).body);
    }
  }
  ParsedRequest r;
  try {
    r = parse_request(ep, body, cfg);
  } catch (const ApiError& e) {
    fuzz_check(e.status >= 400 && e.status < 500);
    (void)boost::json::parse(error_body(e));  // throws (→ a finding) if not JSON
    return 0;
  }
  fuzz_check(r.opts.max_tokens >= 1);
  if (cfg.max_tokens > 0) fuzz_check(r.opts.max_tokens <= cfg.max_tokens);
  fuzz_check(static_cast<int32_t>(r.opts.stop.size()) <= cfg.max_stop_strings);
  for (int32_t id : r.prompt_tokens) fuzz_check(id >= 0 && id < cfg.n_vocab);
  fuzz_check(r.model == cfg.model_ids[0]);
  try {
    fit_to_context(r, 1 + sel % 200, 128);
    fuzz_check(r.opts.max_tokens >= 1 && r.opts.max_tokens <= 127);
  } catch (const ApiError& e) {
    fuzz_check(e.status == 400);
  }
  // The responses for it, with the client's own text as the output.
  std::string text = ep == Endpoint::Chat ? (r.messages.empty() ? "" : r.messages.back().content) : r.prompt;
  if (!utf8::is_valid(text)) return 0;  // generated text is valid UTF-8 (the stream decoder)
  ResponseMeta m{ep, new_response_id(ep), 0, r.model};
  const boost::json::value full = boost::json::parse(completion_json(m, text, "stop", Usage{1, 2, {}}));
  const auto& choice = full.at("choices").at(0);
  fuzz_check((ep == Endpoint::Chat ? choice.at("message").at("content") : choice.at("text")).as_string() == text);
  (void)boost::json::parse(chunk_json(m, text, nullptr, true, r.include_usage));
  (void)boost::json::parse(usage_chunk_json(m, Usage{1, 2, {}}));
  return 0;
}
