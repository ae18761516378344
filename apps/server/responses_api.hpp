// OpenAI's Responses API (POST /v1/responses), as the official clients drive it: `input` as a
// string or a list of items (messages with text content, function calls and their outputs),
// `instructions`, `max_output_tokens`, sampling, function `tools` and `tool_choice`,
// `text.format` (json_schema, json_object), `stream`. A request is translated into a chat
// completion request (parse_request then validates it as such); the reply is written as a
// `response` object, or streamed as its events (response.created … response.completed).
// Stored state is not kept: `previous_response_id` and `store: true` retrieval are refused.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "apps/server/reply_writer.hpp"

namespace tandem::server {

// The equivalent chat completion request body (JSON text). Throws ApiError (400) for what the
// Responses API allows and this server cannot honour, naming the field.
std::string responses_to_chat(std::string_view body);

std::unique_ptr<ReplyWriter> responses_writer(const ResponseMeta& meta, std::string_view request_body);

}  // namespace tandem::server
