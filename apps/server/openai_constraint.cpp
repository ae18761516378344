// Structured output in OpenAI requests: `response_format` ({"type": "text" | "json_object"
// | "json_schema"}) and the `grammar` extension (GBNF, as llama-server takes it), both
// turned into the GBNF of GenerateOptions::grammar (engine/grammar/). What the grammar
// cannot express is a 400 naming it, never a silently unconstrained answer.
#include <boost/json/serialize.hpp>

#include "apps/server/api_error.hpp"
#include "apps/server/openai_protocol.hpp"
#include "engine/grammar/grammar.hpp"
#include "engine/grammar/json_schema.hpp"

namespace json = boost::json;

namespace tandem::server {

std::string parse_constraint(const json::object& o) {
  std::string grammar;
  const json::value* rf = o.if_contains("response_format");
  if (rf && !rf->is_null()) {
    if (!rf->is_object()) throw bad_request("'response_format' must be an object", "response_format");
    const json::object& f = rf->get_object();
    const json::value* type = f.if_contains("type");
    if (!type || !type->is_string())
      throw bad_request("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"",
                        "response_format.type");
    const std::string_view t = type->get_string();
    if (t == "json_object") {
      grammar = json_object_gbnf();
    } else if (t == "json_schema") {
      const json::value* js = f.if_contains("json_schema");
      if (!js || !js->is_object())
        throw bad_request("'response_format.json_schema' must be an object with a 'schema'", "response_format.json_schema");
      const json::value* schema = js->get_object().if_contains("schema");
      if (!schema || !(schema->is_object() || schema->is_bool()))
        throw bad_request("'response_format.json_schema.schema' must be a JSON Schema (an object)",
                          "response_format.json_schema.schema");
      try {
        grammar = json_schema_to_gbnf(json::serialize(*schema));
      } catch (const SchemaError& e) {
        throw bad_request(std::string("response_format.json_schema.schema: ") + e.what(),
                          "response_format.json_schema.schema", "unsupported_value");
      }
    } else if (t != "text") {
      throw bad_request("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"",
                        "response_format.type", "unsupported_value");
    }
  }
  if (const json::value* g = o.if_contains("grammar"); g && !g->is_null()) {
    if (!g->is_string()) throw bad_request("'grammar' must be a string (GBNF)", "grammar");
    if (!grammar.empty()) throw bad_request("give either 'response_format' or 'grammar', not both", "grammar");
    grammar = std::string(g->get_string());
    if (grammar.empty()) return grammar;
    try {
      (void)Grammar::parse(grammar);  // compiled again (and cached) when the request is admitted
    } catch (const GrammarError& e) {
      throw bad_request(std::string("grammar: ") + e.what(), "grammar", "invalid_value");
    }
  }
  return grammar;
}

}  // namespace tandem::server
