// JSON Schema → GBNF (engine/grammar/json_schema.hpp): arbitrary bytes as a schema. Each
// input is refused with a SchemaError or converts into GBNF within the size limit that
// Grammar::parse compiles; and a random walk through that grammar (bytes picked among
// those that keep the automaton alive) that ends in an accepting state has written valid
// JSON: the grammar never lets a model write a non-JSON document.
//
// Stepping a converted grammar may meet the automaton's documented refusal (more than 512
// parses alive, or nesting too deep: a std::runtime_error naming it); the request would end
// with that error, which is not a crash (corpus: ambiguous_pattern_refused.json).
//
// Input: the schema text.
#include <boost/json/parse.hpp>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>

#include "engine/grammar/grammar.hpp"
#include "engine/grammar/json_schema.hpp"
#include "tests/fuzz/fuzz_target.hpp"
#include "tests/support/grammar_walk.hpp"

using namespace tandem;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz_quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string gbnf;
  try {
    gbnf = json_schema_to_gbnf(in);
  } catch (const SchemaError&) {
    return 0;
  }
  fuzz_check(gbnf.size() <= kSchemaMaxGbnfBytes);
  std::shared_ptr<const Grammar> g;
  try {
    g = Grammar::parse(gbnf);
  } catch (const GrammarError& e) {
    std::fprintf(stderr, "%s\n%s\n", e.what(), gbnf.c_str());
    fuzz_check(!"json_schema_to_gbnf's grammar compiles");
  }
  for (uint64_t seed = 0; seed < 4; ++seed) {
    std::optional<std::string> doc;
    try {
      doc = test::random_sentence(*g, seed * 0x9E3779B97F4A7C15ULL + size);
    } catch (const std::runtime_error&) {
      return 0;  // too ambiguous or nested too deeply: the documented refusal
    }
    if (doc) {
      boost::system::error_code ec;
      boost::json::parse_options deep;  // a walk can nest far deeper than the default 32
      deep.max_depth = 100000;
      boost::json::parse(*doc, ec, {}, deep);
      if (ec) std::fprintf(stderr, "not JSON: %s\n", doc->c_str());
      fuzz_check(!ec);
    }
  }
  return 0;
}
