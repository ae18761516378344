// POST /tokenize and /detokenize, as vLLM and llama-server have them, so that tools written
// for either count and inspect tokens against this server.
//
// /tokenize takes vLLM's {"prompt": text, "add_special_tokens": true} or {"messages": [...]}
// (the chat template applied, as a chat completion would read it), or llama-server's
// {"content": text, "add_special": false, "with_pieces": false}; it answers
// {"tokens": [ids], "count": n, "max_model_len": context} (with_pieces: tokens as
// [{"id", "piece"}]). /detokenize takes {"tokens": [ids]} and answers the text under both
// servers' names, {"prompt": text, "content": text}. Malformed requests get OpenAI's error
// shape (400).
#pragma once
#include <string_view>

#include "apps/server/responder.hpp"

namespace tandem::server {

class ServerState;

HttpResponse tokenize_response(ServerState& state, std::string_view body);    // throws ApiError
HttpResponse detokenize_response(ServerState& state, std::string_view body);  // throws ApiError

}  // namespace tandem::server
