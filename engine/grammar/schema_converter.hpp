// The JSON Schema converter behind json_schema_to_gbnf (json_schema.hpp has the contract):
// one walk over the schema that turns every subschema into a GBNF expression, naming the
// larger ones as rules. Its parts: schema_converter.cpp (keywords, combinators, $ref, enum,
// scalars), schema_object.cpp, schema_array.cpp, schema_range.cpp, schema_pattern.cpp and schema_rules.cpp (the rule
// table: naming, sharing, limits, left recursion, output).
#pragma once
#include <boost/json.hpp>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/grammar/gbnf_frag.hpp"
#include "engine/grammar/json_rules.hpp"

namespace tandem::schema {

namespace json = boost::json;

// nullopt: the subschema matches no JSON value (`false`, an empty enum, minItems > maxItems).
using MaybeFrag = std::optional<Frag>;

[[noreturn]] void fail(const std::string& what, const std::string& path);
[[noreturn]] void fail_keyword(std::string_view keyword, const std::string& path, std::string_view why = {});
// minItems and the like: absent, or a non-negative integer. An upper bound above
// kSchemaMaxRepeat is taken as kSchemaMaxRepeat (fewer documents, all of them valid); a
// lower bound above it is an error.
enum class Count { lower, upper };
std::optional<int64_t> count_keyword(const json::object& o, std::string_view keyword, Count kind,
                                     const std::string& path);
// The content (no quotes) of strings matching the regular expression `pattern`, in the subset
// schema_pattern.cpp describes; `any_char` is one character of a string, in any spelling.
Frag pattern_content(std::string_view pattern, const Frag& any_char, const std::string& path);
// The path of a member of the schema at `path`: "/properties" + "/a~1b".
std::string child_path(const std::string& path, std::string_view key);

class Converter {
 public:
  explicit Converter(const json::value& document);
  // The grammar's text, `root` first.
  std::string run();

 private:
  // --- schema_converter.cpp
  MaybeFrag schema(const json::value& s, const std::string& path, const std::string& hint);
  MaybeFrag schema_object(const json::object& o, const std::string& path, const std::string& hint);
  MaybeFrag reference(const json::object& o, const std::string& path);
  MaybeFrag combinator(const json::object& o, std::string_view keyword, const std::string& path,
                       const std::string& hint);
  MaybeFrag enumeration(const json::object& o, const std::string& path);
  MaybeFrag typed(const json::object& o, const std::string& path, const std::string& hint);
  MaybeFrag string_type(const json::object& o, const std::string& path);
  Frag literal(const json::value& v, const std::string& path);
  // --- schema_object.cpp
  MaybeFrag object_type(const json::object& o, const std::string& path, const std::string& hint);
  Frag keys_except(const std::vector<std::string>& keys, const std::string& hint, const std::string& path);
  // --- schema_array.cpp
  MaybeFrag array_type(const json::object& o, const std::string& path, const std::string& hint);
  // --- schema_range.cpp: minimum, maximum and the exclusive ones
  MaybeFrag integer_range(const json::object& o, const std::string& path);
  MaybeFrag number_range(const json::object& o, const std::string& path);

  // --- schema_rules.cpp
  Frag use(JsonRule r);  // a fixed rule, defined on first use
  std::string new_name(const std::string& hint);
  // Names `f` as a rule (or finds the rule with that body already) and refers to it.
  Frag named(const std::string& hint, const Frag& f, const std::string& path);
  void define(const std::string& name, const Frag& f, const std::string& path);
  // `f` as it is if short, else a rule: for expressions about to be copied into several places.
  Frag small(const std::string& hint, const Frag& f, const std::string& path);
  void check_left_recursion() const;
  std::string text() const;

  struct Rule {
    std::string name;
    std::string body;
    bool nullable = false;
    std::vector<std::string> left;
    std::string path;  // the schema it came from, for errors
  };

  const json::value& doc_;
  int depth_ = 0;
  std::vector<Rule> rules_;
  std::unordered_map<std::string, size_t> rule_index_;    // name -> rules_
  std::unordered_map<std::string, std::string> by_body_;  // body -> name
  std::map<std::string, std::string> ref_names_;          // JSON pointer -> rule name
  std::unordered_set<std::string> reserved_;              // every name given out or fixed
  std::unordered_map<std::string, size_t> next_suffix_;   // base name -> next counter to try
  size_t text_bytes_ = 0;
};

}  // namespace tandem::schema
