#include "apps/server/router.hpp"

#include <spdlog/spdlog.h>

#include "apps/server/anthropic_api.hpp"
#include "apps/server/api_error.hpp"
#include "apps/server/generation.hpp"
#include "apps/server/metrics_text.hpp"
#include "apps/server/openai_protocol.hpp"
#include "apps/server/server_state.hpp"
#include "apps/server/tokenize_endpoint.hpp"

namespace tandem::server {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Model ids may contain characters a client percent-encodes ("/", ":").
std::string percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Compares without an early exit, so response time does not reveal how much of a guessed
// key was right.
bool same_secret(std::string_view a, std::string_view b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

// A bearer token, or (Anthropic's clients) the x-api-key header.
bool authorized(const ServerState& state, std::string_view header, std::string_view api_key) {
  if (state.opts.api_key.empty()) return true;
  if (!api_key.empty() && same_secret(api_key, state.opts.api_key)) return true;
  constexpr std::string_view kBearer = "Bearer ";
  if (header.substr(0, kBearer.size()) != kBearer) return false;
  return same_secret(header.substr(kBearer.size()), state.opts.api_key);
}

HttpResponse json_response(std::string body) {
  HttpResponse r;
  r.body = std::move(body);
  return r;
}

HttpResponse health(const ServerState& state) {
  HttpResponse r;
  if (state.draining()) {
    r.status = 503;
    r.body = R"({"status":"draining"})";
  } else {
    r.body = R"({"status":"ok"})";
  }
  return r;
}

HttpResponse metrics(const ServerState& state) {
  HttpResponse r;
  r.content_type = kMetricsContentType;
  MetricsOptions o;
  o.vllm = state.opts.metrics_vllm;
  o.model_name = state.protocol.model_ids.empty() ? std::string() : state.protocol.model_ids.front();
  r.body = metrics_text(state.scheduler.stats(), state.counters(), o);
  return r;
}

}  // namespace

RouteMatch match_route(std::string_view target) {
  const std::string_view path = target.substr(0, target.find('?'));
  RouteMatch m;
  if (path == "/v1/chat/completions") m = {Route::ChatCompletions, {}, "POST", true};
  else if (path == "/v1/completions") m = {Route::Completions, {}, "POST", true};
  else if (path == "/v1/responses") m = {Route::Responses, {}, "POST", true};
  else if (path == "/v1/messages") m = {Route::Messages, {}, "POST", true};
  else if (path == "/v1/models") m = {Route::Models, {}, "GET", true};
  else if (path.starts_with("/v1/models/") && path.size() > 11)
    m = {Route::Model, percent_decode(path.substr(11)), "GET", true};
  else if (path == "/health") m = {Route::Health, {}, "GET", false};
  else if (path == "/metrics") m = {Route::Metrics, {}, "GET", false};
  else if (path == "/tokenize") m = {Route::Tokenize, {}, "POST", true};
  else if (path == "/detokenize") m = {Route::Detokenize, {}, "POST", true};
  return m;
}

void dispatch(ServerState& state, RequestView req, const std::shared_ptr<Responder>& out) {
  // Anthropic's clients read errors in their API's shape.
  const bool anthropic = match_route(req.target).route == Route::Messages;
  try {
    const RouteMatch m = match_route(req.target);
    if (m.route == Route::NotFound) throw not_found("No route for " + req.method + " " + req.target);
    if (req.method != m.allowed) {
      ApiError e = method_not_allowed(m.allowed);
      HttpResponse r = error_response(e);
      r.headers.emplace_back("Allow", m.allowed);
      out->respond(std::move(r));
      return;
    }
    if (m.needs_auth && !authorized(state, req.authorization, req.api_key)) throw unauthorized();
    switch (m.route) {
      case Route::ChatCompletions:
      case Route::Completions:
        if (state.draining()) throw unavailable("The server is shutting down");
        start_generation(state, m.route == Route::ChatCompletions ? Endpoint::Chat : Endpoint::Completion,
                         std::move(req.body), out);
        return;
      case Route::Responses:
      case Route::Messages:
        if (state.draining()) throw unavailable("The server is shutting down");
        start_reply_generation(state, m.route == Route::Responses ? ReplyApi::Responses : ReplyApi::Messages,
                               std::move(req.body), out);
        return;
      case Route::Models:
        out->respond(json_response(models_json({state.protocol.model_ids.at(0)}, state.created)));
        return;
      case Route::Model:
        for (const std::string& id : state.protocol.model_ids)
          if (id == m.model_id) {
            out->respond(json_response(model_json(state.protocol.model_ids.at(0), state.created)));
            return;
          }
        throw model_not_found(m.model_id);
      case Route::Health:
        out->respond(health(state));
        return;
      case Route::Metrics:
        out->respond(metrics(state));
        return;
      case Route::Tokenize:
        out->respond(tokenize_response(state, req.body));
        return;
      case Route::Detokenize:
        out->respond(detokenize_response(state, req.body));
        return;
      case Route::NotFound:
        break;
    }
    throw not_found("No route for " + req.target);
  } catch (const ApiError& e) {
    out->respond(anthropic ? anthropic_error_response(e) : error_response(e));
  } catch (const std::exception& e) {
    spdlog::error("{} {}: {}", req.method, req.target, e.what());
    const ApiError ie = internal_error(e.what());
    out->respond(anthropic ? anthropic_error_response(ie) : error_response(ie));
  }
}

}  // namespace tandem::server
