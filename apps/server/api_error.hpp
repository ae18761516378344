// Errors the HTTP API reports, in OpenAI's shape:
//   {"error": {"message": "...", "type": "...", "param": "..."|null, "code": "..."|null}}
// Handlers throw ApiError; the session turns it into a response with that status and body.
#pragma once
#include <stdexcept>
#include <string>

#include "apps/server/responder.hpp"

namespace tandem::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string type, std::string code = {}, std::string param = {})
      : std::runtime_error(std::move(message)),
        status(status),
        type(std::move(type)),
        code(std::move(code)),
        param(std::move(param)) {}

  int status;         // HTTP status
  std::string type;   // OpenAI error type, e.g. "invalid_request_error"
  std::string code;   // machine-readable code, "" → null
  std::string param;  // offending request field, "" → null
  int retry_after_s = 0;  // > 0: send a Retry-After header (429, 503)
};

// The usual cases, so every handler spells type and code alike.
ApiError bad_request(std::string message, std::string param = {}, std::string code = {});
ApiError not_found(std::string message, std::string code = "not_found");
ApiError model_not_found(const std::string& model);
ApiError unauthorized();
ApiError method_not_allowed(const std::string& allowed);
ApiError payload_too_large(size_t limit);
ApiError queue_full(std::string message);
ApiError unavailable(std::string message);
ApiError internal_error(std::string message);

// The JSON body for an error (no trailing newline), and the whole response with headers.
std::string error_body(const ApiError& e);
HttpResponse error_response(const ApiError& e);

}  // namespace tandem::server
