// C API: JSON Schema → GBNF, for tandem_generate_params.grammar (engine/grammar/json_schema.hpp).
#include <cstring>
#include <string>

#include "engine/api/c_api_internal.hpp"
#include "engine/grammar/json_schema.hpp"

namespace {
tandem_status invalid(const char* fn, const std::string& what) {
  return tandem::capi::fail(TANDEM_ERR_INVALID_ARGUMENT, std::string(fn) + ": " + what);
}
}  // namespace

extern "C" {

tandem_status tandem_json_schema_to_grammar(const char* schema_json, char* grammar, size_t capacity, size_t* out_len) {
  using namespace tandem::capi;
  constexpr const char* fn = "tandem_json_schema_to_grammar";
  return guarded(TANDEM_ERR_INTERNAL, [&] {
    if (!schema_json) return invalid(fn, "schema_json is NULL");
    if (!out_len) return invalid(fn, "out_len is NULL");
    if (!grammar && capacity > 0) return invalid(fn, "grammar is NULL but capacity > 0");
    std::string g;
    try {
      g = *schema_json ? tandem::json_schema_to_gbnf(schema_json) : tandem::json_object_gbnf();
    } catch (const tandem::SchemaError& e) {
      return invalid(fn, e.what());
    }
    return copy_text_out(g, grammar, capacity, out_len, fn);
  });
}

}  // extern "C"
