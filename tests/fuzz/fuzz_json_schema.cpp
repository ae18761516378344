// JSON Schema → GBNF (engine/grammar/json_schema.hpp): arbitrary bytes as a schema. Each
// input is refused with a SchemaError or converts into GBNF within the size limit that
// Grammar::parse compiles; and a random walk through that grammar (bytes picked among
// those that keep the automaton alive) that ends in an accepting state has written valid
// JSON: the grammar never lets a model write a non-JSON document.
//
// Input: the schema text.
#include <algorithm>
#include <boost/json/parse.hpp>
#include <cstdio>
#include <optional>
#include <string>

#include "engine/grammar/grammar.hpp"
#include "engine/grammar/json_schema.hpp"
#include "tests/fuzz/fuzz_target.hpp"

using namespace tandem;

extern "C" int LLVMFuzzerInitialize(int*, char***) { return 0; }

namespace {

// Every printable ASCII byte, the JSON white space, a control byte (never allowed raw), and
// the two bytes of U+00E9.
std::string alphabet() {
  std::string a = "\n\t\r\x01\xc3\xa9";
  for (char c = 0x20; c < 0x7f; ++c) a += c;
  return a;
}

// One walk of at most kSteps bytes; the text if it ended accepting, else nothing.
std::optional<std::string> walk(const Grammar& g, uint64_t seed) {
  constexpr int kSteps = 300;
  GrammarState s = g.initial();
  std::string text;
  for (int step = 0; step < kSteps; ++step) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    if (Grammar::accepting(s) && (Grammar::complete(s) || (seed >> 60) < 4 || step > kSteps / 2)) return text;
    // Past half way, try the closing bytes first so that walks tend to finish.
    static const std::string kAlphabet = alphabet();
    std::string order = kAlphabet;
    const size_t rot = (seed >> 33) % order.size();
    std::rotate(order.begin(), order.begin() + static_cast<long>(rot), order.end());
    if (step > kSteps / 2) order = std::string("\"]}0") + order;
    bool moved = false;
    for (char c : order) {
      GrammarState next = g.advance(s, static_cast<uint8_t>(c));
      if (next.dead()) continue;
      s = std::move(next);
      text += c;
      moved = true;
      break;
    }
    if (!moved) return std::nullopt;  // a prefix no byte of the alphabet continues (e.g. inside a \u escape)
  }
  return Grammar::accepting(s) ? std::optional<std::string>(text) : std::nullopt;
}

}  // namespace

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
    if (const std::optional<std::string> doc = walk(*g, seed * 0x9E3779B97F4A7C15ULL + size)) {
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
