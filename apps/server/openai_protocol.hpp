// The OpenAI wire format, without any networking: request bodies of /v1/chat/completions
// and /v1/completions are parsed and validated into a ParsedRequest (GenerateOptions
// included), and responses, stream chunks and usage are built as JSON text. Everything here
// is pure so tests/test_openai_protocol.cpp can check every field and error case.
//
// Semantics chosen where OpenAI leaves room (also in apps/server/README.md):
//  - Omitted sampling fields take OpenAI's defaults (temperature 1, top_p 1), and the
//    extensions top_k / min_p are off unless given: a plain OpenAI client gets plain
//    sampling, not the CLI's llama.cpp-style defaults.
//  - `null` is the same as an omitted field (some clients send nulls).
//  - `model` may be omitted (→ the served model); a given one must be a served id.
//  - logprobs: the target's, of the distribution each token was drawn from (after
//    penalties, temperature, top-k/top-p/min-p; tokens those cut print as -9999.0, as
//    OpenAI's and vLLM's -inf do); temperature 0 → the log-softmax of the penalised logits.
//  - seed: a request without one gets a fresh random seed (two such requests draw
//    independently); every response object and stream chunk reports the seed used ("seed",
//    an extension), which sent back reproduces the choices.
//  - n: each choice is its own sequence with its own seed (choice_seed); max_tokens is per
//    choice; usage counts the prompt once and every choice's tokens.
//  - max_tokens: completions default to 16 (OpenAI's legacy default), chat to the rest of
//    the context; a request asking for more than fits is clamped to the context (finish
//    "length"), a prompt that alone fills the context is a 400 context_length_exceeded.
#pragma once
#include <cstdint>
#include <ctime>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "apps/server/tool_calls.hpp"
#include "tandem/engine.hpp"

namespace boost::json {
class value;
}

namespace tandem::server {

enum class Endpoint { Chat, Completion };

// One chat message as the client sent it; content parts are already joined into text.
struct InputMessage {
  std::string role;  // system | user | assistant | tool ("developer" arrives as "system")
  std::string content;
  // Assistant turns: the tool calls it made, as OpenAI's array (each call's arguments parsed
  // into an object where they are JSON, as chat templates expect); tool turns: the call
  // answered. Empty when absent.
  boost::json::array tool_calls;
  std::string tool_call_id;
};

// What the parser needs to know about the server.
struct ProtocolConfig {
  std::vector<std::string> model_ids;  // accepted `model` values; [0] is the id echoed back
  int32_t n_vocab = 0;                 // bounds token-id prompts
  bool has_draft_model = false;        // "speculative": {"mode": "model"} needs one
  bool speculation_metrics = false;    // every response's usage carries its speculation figures
  SpeculativeOptions default_speculative;  // server's --draft/--draft-max/--policy
  // From `serve --config`: the defaults tune recommended per temperature; a request gets the
  // entry measured nearest its temperature (default_speculative when empty).
  std::vector<std::pair<float, SpeculativeOptions>> speculative_by_temp;
  const SpeculativeOptions& speculative_for(float temperature) const;
  int32_t max_stop_strings = 16;
  int32_t max_stop_token_ids = 256;
  // --max-tokens: the most tokens one request may generate (0 = the context is the only
  // bound). A request asking for more is refused (400); one that does not ask gets this.
  int32_t max_tokens = 0;
  // The most choices (n, best_of) one request may ask for: each is a running sequence, so
  // the server sets it to min(16, --max-seqs).
  int32_t max_n = 16;
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::Completion;
  std::string model;                   // the id responses carry
  std::vector<InputMessage> messages;  // chat
  std::string prompt;                  // completions, text prompt
  std::vector<int32_t> prompt_tokens;  // completions given as token ids
  bool prompt_is_tokens = false;
  GenerateOptions opts;
  bool max_tokens_given = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // The request's speculation figures in its usage (extension "speculation_metrics": true,
  // or the server's --speculation-metrics).
  bool speculation_metrics = false;
  std::optional<ToolRequest> tools;  // chat: `tools` and `tool_choice` (tool_calls.hpp)
  int32_t n = 1;        // choices returned
  int32_t best_of = 1;  // completions: choices generated (>= n); the n best by mean logprob are returned
  // Logprobs in the response: -1 none, else the alternatives per token (chat top_logprobs,
  // completions logprobs). opts.logprobs may ask the engine for more (best_of needs them).
  int32_t logprobs = -1;
  // Completions' `echo`: each choice's text starts with the prompt, and with logprobs the
  // prompt's tokens come first in its logprobs (the first with none: nothing comes before
  // it), scored by the target (GenerateOptions::prompt_logprobs). max_tokens may then be 0:
  // the prompt is scored and nothing generated.
  bool echo = false;
  // Completions' `suffix` (non-empty): fill in the middle, the prompt being the text before
  // the insertion point (Engine::fim_prompt; a model without FIM tokens refuses it).
  std::string suffix;
};

// The seed of choice i: choice 0 keeps the request's seed (n = 1 and choice 0 of n > 1 give
// the same text), the others get well-mixed derived seeds.
uint64_t choice_seed(uint64_t seed, int32_t i);

// Throws ApiError (400 for malformed JSON / wrong types / bad values / unsupported options,
// 404 model_not_found).
ParsedRequest parse_request(Endpoint endpoint, std::string_view body, const ProtocolConfig& cfg);

// The request's structured-output constraint as GBNF ("" for none): response_format
// json_object / json_schema, or the `grammar` extension. Throws ApiError (400) for what the
// grammar cannot express, naming it (openai_constraint.cpp).
std::string parse_constraint(const boost::json::object& request);

// Once the prompt is tokenized: rejects a prompt that leaves no room to generate (400
// context_length_exceeded) or is empty, and fits max_tokens into the context.
void fit_to_context(ParsedRequest& req, int32_t n_prompt, int32_t context);

// ---- responses --------------------------------------------------------------------------
struct ResponseMeta {
  Endpoint endpoint = Endpoint::Completion;
  std::string id;  // "chatcmpl-…" / "cmpl-…"
  std::time_t created = 0;
  std::string model;
  uint64_t seed = 0;  // the request's seed, or the fresh one drawn for it
};

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  // When asked for (ParsedRequest::speculation_metrics): the request's drafts, drafted and
  // accepted tokens and their split by draft position, all choices together, as
  // "speculation": {num_drafts, num_draft_tokens, num_accepted_tokens,
  // num_accepted_tokens_per_pos, num_draft_tokens_per_pos, acceptance_rate,
  // mean_accepted_length} (vLLM's names for its speculation counters).
  std::optional<SpeculativeMetrics> speculation;
};

// "chatcmpl-" or "cmpl-" followed by 24 random hex digits.
std::string new_response_id(Endpoint endpoint);

// Cancelled requests (timeout, server shutdown) were cut short by a server limit: "length".
const char* finish_reason_name(FinishReason r);

// The whole non-streaming response.
std::string completion_json(const ResponseMeta& m, std::string_view text, const char* finish_reason, const Usage& u);

// ---- choices and logprobs -----------------------------------------------------------------
// A token's raw bytes (the server: Engine::detokenize of that one token). Tokens that are
// part of a UTF-8 character print with U+FFFD in "token"; "bytes" has the raw bytes.
using TokenBytes = std::function<std::string(int32_t token)>;

struct ChoiceOut {
  int32_t index = 0;
  std::string_view text;
  const char* finish_reason = nullptr;  // null while streaming
  const std::vector<TokenLogprobs>* logprobs = nullptr;  // null → "logprobs": null
  // Chat: the tool calls of the message (non-streaming) or of this chunk's delta; with them
  // the content is null when empty.
  const std::vector<ToolCall>* tool_calls = nullptr;
  int64_t text_offset = 0;  // completions: where this piece's first token starts in the choice's text
};

// The "logprobs" object of one choice (or one chunk's tokens), in the endpoint's shape:
// chat {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}],
// "refusal": null}; completions {tokens, token_logprobs, top_logprobs: [{token: logprob}]
// (the chosen token included, as OpenAI's legacy API has it), text_offset}. -inf → -9999.0.
boost::json::value logprobs_json(Endpoint ep, const std::vector<TokenLogprobs>& lps, const TokenBytes& bytes,
                                 int64_t text_offset);
// Unicode characters of the tokens' texts (what completions' text_offset advances by).
int64_t text_length(const std::vector<TokenLogprobs>& lps, const TokenBytes& bytes);

// The non-streaming response with several choices (in the given order).
std::string completion_json(const ResponseMeta& m, const std::vector<ChoiceOut>& choices, const Usage& u,
                            const TokenBytes& bytes);
// One stream chunk of one choice (its index, text, finish reason and the logprobs of the
// tokens it carries); role_chunk as below.
std::string chunk_json(const ResponseMeta& m, const ChoiceOut& c, bool role_chunk, bool include_usage,
                       const TokenBytes& bytes);

// One stream chunk: `text` as the delta (chat) or text (completions); finish_reason null
// while running. Chat's first chunk carries role "assistant" (role_chunk). With
// include_usage every chunk has "usage": null, as OpenAI's do.
std::string chunk_json(const ResponseMeta& m, std::string_view text, const char* finish_reason, bool role_chunk,
                       bool include_usage);
// The extra last chunk of stream_options.include_usage: empty choices, the usage.
std::string usage_chunk_json(const ResponseMeta& m, const Usage& u);

// Server-sent events framing.
std::string sse_event(std::string_view data);  // "data: <data>\n\n"
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// GET /v1/models and /v1/models/{id}.
std::string models_json(const std::vector<std::string>& ids, std::time_t created);
std::string model_json(const std::string& id, std::time_t created);

}  // namespace tandem::server
