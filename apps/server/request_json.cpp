#include "apps/server/request_json.hpp"

#include <boost/json/parse.hpp>

#include "apps/server/api_error.hpp"

namespace tandem::server {

boost::json::object parse_object_body(std::string_view body) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(boost::json::string_view(body.data(), body.size()), ec);
  if (ec) throw bad_request("The request body is not valid JSON: " + ec.message(), {}, "invalid_json");
  if (!v.is_object()) throw bad_request("The request body must be a JSON object", {}, "invalid_json");
  return std::move(v.as_object());
}

const boost::json::value* present(const boost::json::object& o, std::string_view key) {
  const boost::json::value* v = o.if_contains(key);
  return v && !v->is_null() ? v : nullptr;
}

}  // namespace tandem::server
