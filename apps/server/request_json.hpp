// Reading request bodies of the APIs translated into chat requests (responses_api.cpp,
// anthropic_api.cpp): the body as a JSON object, and fields that are present and not null.
#pragma once
#include <boost/json/object.hpp>
#include <string_view>

namespace tandem::server {

// Throws ApiError (400, invalid_json) for what is not a JSON object.
boost::json::object parse_object_body(std::string_view body);
// The field, or null when it is absent or JSON null (null means omitted).
const boost::json::value* present(const boost::json::object& o, std::string_view key);

}  // namespace tandem::server
