// POST /v1/chat/completions and /v1/completions: parse, build and tokenize the prompt,
// submit to the scheduler, and answer from its callbacks, as one JSON body or as a stream
// of server-sent events.
//
// Cancellation: the client going away (the connection reports it), the request timeout
// and graceful shutdown all cancel the scheduler request; the scheduler frees its KV
// blocks and still calls on_done. A timed-out or shutdown-cancelled request ends normally
// with what it produced so far and finish_reason "length".
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "apps/server/openai_protocol.hpp"
#include "apps/server/responder.hpp"

namespace tandem::server {

class ServerState;

// Call on `out`'s strand. Throws ApiError for what is wrong before submission (bad
// request, prompt too long, queue full → 429, shutting down → 503); afterwards every
// outcome is answered through `out`.
void start_generation(ServerState& state, Endpoint endpoint, std::string body, const std::shared_ptr<Responder>& out);

// POST /v1/responses (OpenAI's Responses API) and /v1/messages (Anthropic's Messages API):
// translated into a chat request and generated as one, the reply in the API's own shape
// (responses_api.hpp, anthropic_api.hpp). Throws ApiError as start_generation does.
enum class ReplyApi { Responses, Messages };
void start_reply_generation(ServerState& state, ReplyApi api, std::string body, const std::shared_ptr<Responder>& out);

// The tokens a parsed request's generation reads: the completion prompt as given or
// tokenized, or the chat messages through the model's chat template. Throws ApiError (400)
// for messages the template rejects.
std::vector<int32_t> prompt_tokens(ServerState& state, const ParsedRequest& req);

}  // namespace tandem::server
