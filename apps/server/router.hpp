// Which endpoint a request is for, and the answers that need no generation: /v1/models,
// /health, /metrics, /tokenize, /detokenize. Generation requests go on to generation.hpp.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "apps/server/responder.hpp"

namespace tandem::server {

class ServerState;

enum class Route {
  ChatCompletions, Completions, Responses, Messages, Models, Model, Health, Metrics, Tokenize, Detokenize, NotFound
};

struct RouteMatch {
  Route route = Route::NotFound;
  std::string model_id;       // Route::Model: the {id} of /v1/models/{id} (percent-decoded)
  const char* allowed = "";   // the method the route takes ("GET" or "POST")
  bool needs_auth = false;    // /v1/* when the server has an API key
};

// Matches the path of `target` (the query string is ignored; a trailing slash is not).
RouteMatch match_route(std::string_view target);

struct RequestView {
  std::string method;
  std::string target;
  std::string authorization;  // the Authorization header, "" when absent
  std::string api_key;        // the x-api-key header (Anthropic's clients), "" when absent
  std::string body;
};

// Answers the request through `out`: at once, or (generation) later from the scheduler's
// callbacks. Never throws.
void dispatch(ServerState& state, RequestView req, const std::shared_ptr<Responder>& out);

}  // namespace tandem::server
