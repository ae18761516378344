// The entry points: parse the schema text (bounded nesting), run the converter.
#include "engine/grammar/json_schema.hpp"

#include <boost/json.hpp>

#include "engine/grammar/grammar.hpp"
#include "engine/grammar/json_rules.hpp"
#include "engine/grammar/schema_converter.hpp"

namespace tandem {

namespace {

// Deep enough for kSchemaMaxDepth subschemas (each one or two JSON levels down from its
// parent) plus enum values; the converter then enforces its own limit with a path.
constexpr size_t kMaxJsonDepth = 4 * kSchemaMaxDepth;

}  // namespace

std::string json_schema_to_gbnf(std::string_view schema_json) {
  boost::json::parse_options opts;
  opts.max_depth = kMaxJsonDepth;
  boost::system::error_code ec;
  const boost::json::value doc = boost::json::parse(schema_json, ec, {}, opts);
  if (ec) throw SchemaError("the schema is not valid JSON: " + ec.message());
  std::string gbnf = schema::Converter(doc).run();
  // The converter's limits are on its own rules; Grammar::parse has its own on everything
  // (the rules its repetitions expand to included). Checking here means a schema this
  // accepts always gives a grammar that compiles.
  try {
    Grammar::parse(gbnf);
  } catch (const GrammarError& e) {
    throw SchemaError(std::string("the schema's grammar does not compile (too large?): ") + e.what());
  }
  return gbnf;
}

std::string json_object_gbnf() {
  // The fixed rules an object needs, root first.
  std::string out = "root ::= object\n";
  for (JsonRule r : {JsonRule::object, JsonRule::value, JsonRule::array, JsonRule::string, JsonRule::chr,
                     JsonRule::number, JsonRule::boolean, JsonRule::null, JsonRule::ws}) {
    const JsonRuleDef& def = json_rule(r);
    out += std::string(def.name) + " ::= " + std::string(def.body) + "\n";
  }
  return out;
}

}  // namespace tandem
