#include "apps/server/api_error.hpp"

#include <boost/json.hpp>

namespace tandem::server {

ApiError bad_request(std::string message, std::string param, std::string code) {
  return ApiError(400, std::move(message), "invalid_request_error", std::move(code), std::move(param));
}

ApiError not_found(std::string message, std::string code) {
  return ApiError(404, std::move(message), "invalid_request_error", std::move(code));
}

ApiError model_not_found(const std::string& model) {
  // Appended piece by piece: `"literal" + std::string` trips GCC 12's -Wrestrict (a false positive).
  std::string m = "The model '";
  m += model;
  m += "' does not exist; see GET /v1/models";
  return ApiError(404, std::move(m), "invalid_request_error", "model_not_found", "model");
}

ApiError unauthorized() {
  return ApiError(401, "Incorrect or missing API key (send 'Authorization: Bearer <key>')", "invalid_request_error",
                  "invalid_api_key");
}

ApiError method_not_allowed(const std::string& allowed) {
  std::string m = "Method not allowed; use ";
  m += allowed;
  return ApiError(405, std::move(m), "invalid_request_error", "method_not_allowed");
}

ApiError payload_too_large(size_t limit) {
  return ApiError(413, "Request body larger than the limit of " + std::to_string(limit) + " bytes",
                  "invalid_request_error", "payload_too_large");
}

ApiError queue_full(std::string message) {
  ApiError e(429, std::move(message), "rate_limit_error", "queue_full");
  e.retry_after_s = 1;  // the queue moves at decoding speed: a short wait is the right hint
  return e;
}

ApiError unavailable(std::string message) {
  ApiError e(503, std::move(message), "server_error", "service_unavailable");
  e.retry_after_s = 5;
  return e;
}

ApiError internal_error(std::string message) {
  return ApiError(500, std::move(message), "server_error", "internal_error");
}

std::string error_body(const ApiError& e) {
  boost::json::object err;
  err["message"] = e.what();
  err["type"] = e.type;
  err["param"] = e.param.empty() ? boost::json::value(nullptr) : boost::json::value(e.param);
  err["code"] = e.code.empty() ? boost::json::value(nullptr) : boost::json::value(e.code);
  boost::json::object o;
  o["error"] = std::move(err);
  return boost::json::serialize(o);
}

HttpResponse error_response(const ApiError& e) {
  HttpResponse r;
  r.status = e.status;
  r.body = error_body(e);
  if (e.retry_after_s > 0) r.headers.emplace_back("Retry-After", std::to_string(e.retry_after_s));
  return r;
}

}  // namespace tandem::server
