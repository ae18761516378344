// Anthropic's Messages API (POST /v1/messages), as the official `anthropic` client and the
// coding agents that speak it send it: `system` (a string or text blocks), `messages` whose
// content is a string or blocks (text, tool_use, tool_result), `max_tokens`,
// `stop_sequences`, `temperature`, `top_p`, `top_k`, `tools` (name, description,
// input_schema) and `tool_choice` (auto, any, tool, none), `stream`. A request is translated
// into a chat completion request; the reply is a `message` with text and tool_use blocks and
// a stop_reason (end_turn, max_tokens, stop_sequence, tool_use), or its stream of events
// (message_start … message_stop). Errors take Anthropic's shape:
//   {"type": "error", "error": {"type": "invalid_request_error", "message": "..."}}.
// The API key may come as `x-api-key` (Anthropic's header) or as a bearer token.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "apps/server/reply_writer.hpp"

namespace tandem::server {

// The equivalent chat completion request body (JSON text). Throws ApiError (400) naming the
// field for what the Messages API requires or allows and this server cannot honour.
std::string messages_to_chat(std::string_view body);

std::unique_ptr<ReplyWriter> messages_writer(const ResponseMeta& meta);

// An error as the Messages API reports it.
HttpResponse anthropic_error_response(const ApiError& e);

}  // namespace tandem::server
