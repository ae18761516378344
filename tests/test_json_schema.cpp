// JSON Schema → GBNF (engine/grammar/json_schema.hpp): for representative schemas, the
// compiled grammar accepts hand-written valid documents and rejects invalid ones (each
// invalid one breaks one rule of the schema or of JSON); every unsupported keyword is a
// SchemaError naming the keyword and where it is; the limits hold.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "engine/grammar/grammar.hpp"
#include "engine/grammar/json_schema.hpp"
#include "tests/support/grammar_walk.hpp"
#include "tests/support/paths.hpp"

using namespace tandem;

namespace {

struct Case {
  const char* schema;
  std::vector<std::string> valid;
  std::vector<std::string> invalid;
};

void check(const Case& c) {
  const std::string gbnf = json_schema_to_gbnf(c.schema);
  SCOPED_TRACE(std::string("schema: ") + c.schema + "\ngrammar:\n" + gbnf);
  const auto g = Grammar::parse(gbnf);
  for (const std::string& doc : c.valid) EXPECT_TRUE(g->accepts(doc)) << "valid document rejected: " << doc;
  for (const std::string& doc : c.invalid) EXPECT_FALSE(g->accepts(doc)) << "invalid document accepted: " << doc;
}

// The SchemaError message for `schema` ("" when it converts).
std::string error_of(const std::string& schema) {
  try {
    json_schema_to_gbnf(schema);
  } catch (const SchemaError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(JsonSchema, Strings) {
  check({R"({"type": "string"})",
         {R"("")", R"("a")", R"("esc \" \\ \/ \b\f\n\r\t")", R"("\u00e9\uD83D\uDE00")",
          "\"h\xC3\xA9llo \xF0\x9F\x98\x80\""},
         {R"("a)", "\"raw\nnewline\"", R"("bad \x41 escape")", R"("\u12")", "abc", R"("""")", R"( "a")", "null"}});
}

TEST(JsonSchema, NumbersAndIntegers) {
  check({R"({"type": "number"})",
         {"0", "-0", "12.5", "-3.25e-10", "1E+2", "6.02e23", "9999999999999999.123456789012345678"},
         {"01", "1.", ".5", "+1", "1e", "--1", "0x10", "NaN", "Infinity", "12345678901234567", "1e1234", "\"1\""}});
  check({R"({"type": "integer"})",
         {"0", "-42", "7", "9999999999999999"},
         {"1.0", "1e3", "-", "007", "12345678901234567", "true"}});
}

TEST(JsonSchema, TypeListsBooleanNullAndNullable) {
  check({R"({"type": ["boolean", "null"]})", {"true", "false", "null"}, {"0", "\"true\"", "nul", "True"}});
  check({R"({"type": "string", "nullable": true, "maxLength": 2})", {"null", R"("ab")"}, {R"("abc")", "0"}});
  check({R"({"type": ["integer", "string"]})", {"-3", R"("x")"}, {"1.5", "[]"}});
}

TEST(JsonSchema, NestedObjectsInDeclaredOrder) {
  const char* person = R"({
    "type": "object",
    "properties": {
      "name": {"type": "string"},
      "age": {"type": "integer"},
      "address": {
        "type": "object",
        "properties": {"street": {"type": "string"}, "city": {"type": "string"}, "zip": {"type": "string"}},
        "required": ["street", "city"],
        "additionalProperties": false
      }
    },
    "required": ["name", "age", "address"],
    "additionalProperties": false
  })";
  check({person,
         {R"({"name":"Ada","age":36,"address":{"street":"1 Main St","city":"London"}})",
          "{\n  \"name\": \"Ada\",\n  \"age\": -1,\n  \"address\": {\n    \"street\": \"x\",\n    \"city\": \"y\",\n"
          "    \"zip\": \"NW1\"\n  }\n}"},
         {R"({"name":"Ada","age":36})",                                              // address missing
          R"({"name":"Ada","age":"36","address":{"street":"s","city":"c"}})",        // age a string
          R"({"name":"Ada","age":36,"address":{"street":"s"}})",                     // city missing
          R"({"name":"Ada","age":36,"address":{"street":"s","city":"c","zip":1}})",  // zip a number
          R"({"name":"Ada","age":36,"address":{"street":"s","city":"c"},"x":1})",    // extra property
          R"({"age":36,"name":"Ada","address":{"street":"s","city":"c"}})",          // not the declared order
          R"({"name":"Ada","age":36,"address":{"street":"s","city":"c"},})"}});      // trailing comma
}

TEST(JsonSchema, OptionalPropertiesAndCommas) {
  check({R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
             "c": {"type": "integer"}}, "additionalProperties": false})",
         {"{}", "{ }", R"({"a":1})", R"({"b":2})", R"({"c":3})", R"({"a":1,"c":3})", R"({"a":1, "b":2 ,"c":3})"},
         {"{,}", R"({"a":1,})", R"({,"a":1})", R"({"a":1 "b":2})", R"({"a":1,"a":1})", R"({"d":4})"}});
  // Optional between required ones.
  check({R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
             "c": {"type": "integer"}}, "required": ["a", "c"], "additionalProperties": false})",
         {R"({"a":1,"c":3})", R"({"a":1,"b":2,"c":3})"},
         {R"({"a":1})", R"({"c":3})", R"({"a":1,"b":2})", R"({"b":2,"c":3})", "{}"}});
}

TEST(JsonSchema, AdditionalProperties) {
  // Absent: extra properties after the declared ones, with any other key.
  check(
      {R"({"type": "object", "properties": {"id": {"type": "integer"}, "idx": {"type": "string"}}, "required": ["id"]})",
       {R"({"id":1})", R"({"id":1,"extra":[1,{"a":null}]})", R"({"id":1,"i":true,"ids":null,"":0})",
        R"({"id":1,"idx":"x","id2":2})", "{\"id\":1,\"\xC3\xA9\":1}"},
       // Duplicates of declared keys, spelled as they are or with escapes.
       {R"({"id":1,"id":2})", R"({"id":1,"idx":"a","idx":"b"})", R"({"id":1,"\u0069d":2})", R"({"id":1,"i\u0064":2})",
        R"({"extra":1})", R"({"id":1,"extra":})"}});
  check({R"({"type": "object", "properties": {"a/b": {"type": "integer"}}, "required": ["a/b"]})",
         {R"({"a/b":1,"a/c\u0041":2,"x\/y":3})"},
         {R"({"a/b":1,"a\/b":2})"}});
  // A schema: the extras' values must match it.
  check({R"({"type": "object", "additionalProperties": {"type": "integer"}})",
         {"{}", R"({"x":1,"y":-2})"},
         {R"({"x":"s"})", R"({"x":1,"y":[]})"}});
  // true, and no properties: any object.
  check({R"({"type": "object", "additionalProperties": true})", {"{}", R"({"a":{"b":[]}})"}, {"[]", R"({"a"})"}});
  // A required key that no property declares.
  check({R"({"type": "object", "required": ["x"]})", {R"({"x":1})", R"({"x":"a","y":2})"}, {"{}", R"({"y":2})"}});
}

TEST(JsonSchema, KeysAreSpelledAsJson) {
  check(
      {R"({"type": "object", "properties": {"quo\"te": {"type": "integer"}, "\u00fcn\u00efc\u00f6de": {"type": "integer"},
             "a/b\\c": {"type": "integer"}}, "required": ["quo\"te", "\u00fcn\u00efc\u00f6de", "a/b\\c"]})",
       {"{\"quo\\\"te\":1,\"\xC3\xBCn\xC3\xAF"
        "c\xC3\xB6"
        "de\":2,\"a/b\\\\c\":3}"},
       {R"({"quote":1,"ünïcöde":2,"a/b\\c":3})", R"({"quo\"te":1})"}});
}

TEST(JsonSchema, EnumAndConst) {
  check({R"({"enum": ["red", "green", "a\"b", 1, 2.5, -1e-7, null, true, [1, 2], {"k": "v"}]})",
         {R"("red")", R"("green")", R"("a\"b")", "1", "2.5", "-1e-07", "null", "true", "[1,2]", "[ 1 , 2 ]",
          R"({"k":"v"})", R"({ "k" : "v" })"},
         {R"("blue")", R"("Red")", "2", "false", "[1]", "[2,1]", R"({"k":"w"})", R"({})", R"("red" )"}});
  check({R"({"const": "fixed"})", {R"("fixed")"}, {R"("fixed2")", R"("")"}});
  check({R"({"enum": ["a", "b"], "const": "a"})", {R"("a")"}, {R"("b")"}});
  // `type` beside enum keeps only the values of that type.
  check({R"({"type": "string", "enum": ["a", 1, "b"]})", {R"("a")", R"("b")"}, {"1"}});
}

TEST(JsonSchema, ArraysOfObjectsWithEnumStatus) {
  check({R"({"type": "array", "minItems": 1, "items": {"type": "object",
             "properties": {"id": {"type": "integer"}, "status": {"enum": ["open", "closed"]}},
             "required": ["id", "status"], "additionalProperties": false}})",
         {R"([{"id":1,"status":"open"}])",
          "[\n  {\"id\": 1, \"status\": \"open\"},\n  {\"id\": 2, \"status\": \"closed\"}\n]"},
         {"[]", R"([{"id":1,"status":"pending"}])", R"([{"id":1}])", R"([{"id":1,"status":"open"},])"}});
}

TEST(JsonSchema, ItemCounts) {
  check({R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})",
         {"[1,2]", "[1,2,3]", "[ 1 , 2 ]"},
         {"[1]", "[1,2,3,4]", "[]", "[1,2,]", "[1,\"2\"]"}});
  check({R"({"type": "array"})", {"[]", "[ ]", R"([1,"a",{},[],null])"}, {"[,]", "[1,]", "[", "{}"}});
  check({R"({"type": "array", "maxItems": 0})", {"[]"}, {"[1]"}});
  std::string items999 = "[0";
  for (int i = 1; i < 999; ++i) items999 += ",0";
  check({R"({"type": "array", "minItems": 999, "maxItems": 5000})", {items999 + "]"}, {items999 + ",0]", "[0]"}});
  check({R"({"type": "array", "items": false})", {"[]"}, {"[1]"}});
}

TEST(JsonSchema, TuplesWithPrefixItems) {
  check({R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false})",
         {"[]", R"(["a"])", R"(["a",1])"},
         {"[1]", R"(["a",1,2])", R"(["a","b"])"}});
  check({R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "minItems": 2,
             "items": {"type": "boolean"}})",
         {R"(["a",1])", R"(["a",1,true,false])"},
         {R"(["a"])", R"(["a",1,2])"}});
  check({R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "minItems": 1})",
         {R"(["a"])", R"(["a",1])", R"(["a",1,null])"},
         {"[]", "[1]"}});
  // The draft-07 spelling: items as an array, additionalItems for the rest.
  check({R"({"type": "array", "items": [{"type": "null"}], "additionalItems": {"type": "integer"}})",
         {"[]", "[null]", "[null,1,2]"},
         {"[1]", "[null,null]"}});
}

TEST(JsonSchema, StringLengthsInCodePoints) {
  check({R"({"type": "string", "minLength": 2, "maxLength": 4})",
         {R"("ab")", R"("abcd")", "\"\xC3\xA9\xC3\xA9\"", R"("\n\t")", "\"\xF0\x9F\x98\x80\xF0\x9F\x98\x80\"",
          R"("\u00e9x")"},
         // A surrogate pair is one code point: not offered as two escapes in a counted string.
         {R"("a")", R"("abcde")", R"("")", "\"\xC3\xA9\"", R"("\uD83D\uDE00")", R"("\ud800")"}});
  check({R"({"type": "string", "maxLength": 0})", {R"("")"}, {R"("a")"}});
  // Above the limit, an upper bound is the limit: fewer strings, all valid. At the limit, both.
  const auto quoted = [](size_t n) { return std::string(1, '"').append(n, 'a').append(1, '"'); };  // (GCC 12: no "+")
  check({R"({"type": "string", "maxLength": 100000})", {R"("")", quoted(999)}, {quoted(1000)}});
  check({R"({"type": "string", "minLength": 999})", {quoted(999), quoted(2000)}, {quoted(998)}});
}

TEST(JsonSchema, AnyOfAndOneOf) {
  check({R"({"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 0}]})",
         {R"("x")", "5", "0"},
         {"-1", "true", "1.5"}});
  const char* shapes = R"({"oneOf": [
      {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
       "required": ["kind", "r"], "additionalProperties": false},
      {"type": "object", "properties": {"kind": {"const": "rect"}, "w": {"type": "number"}, "h": {"type": "number"}},
       "required": ["kind", "w", "h"], "additionalProperties": false}]})";
  check({shapes,
         {R"({"kind":"circle","r":1.5})", R"({"kind":"rect","w":2,"h":3})"},
         {R"({"kind":"circle","w":2,"h":3})", R"({"kind":"rect","r":1})", R"({"kind":"square"})"}});
  // allOf of one constraining schema (Pydantic's wrapping of a $ref).
  check({R"({"allOf": [{"$ref": "#/$defs/x"}], "description": "d", "$defs": {"x": {"type": "integer"}}})",
         {"1"},
         {R"("1")"}});
}

TEST(JsonSchema, RecursiveRefs) {
  const char* tree = R"({
    "$defs": {"node": {"type": "object", "properties": {
      "value": {"type": "integer"},
      "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["value"], "additionalProperties": false}},
    "$ref": "#/$defs/node"})";
  check({tree,
         {R"({"value":1})", R"({"value":1,"children":[]})",
          R"({"value":1,"children":[{"value":2,"children":[{"value":3}]},{"value":4}]})"},
         {R"({"value":1,"children":[{"children":[]}]})", R"({"value":1,"children":[{"value":"2"}]})", "{}"}});
  // "#" is the whole schema; `definitions` is the older name of $defs.
  check({R"({"type": "object", "properties": {"next": {"$ref": "#"}}, "additionalProperties": false})",
         {"{}", R"({"next":{"next":{}}})"},
         {R"({"next":1})"}});
  check({R"({"definitions": {"a~b/c": {"type": "boolean"}}, "$ref": "#/definitions/a~0b~1c"})", {"true"}, {"1"}});
}

TEST(JsonSchema, Formats) {
  check({R"({"type": "string", "format": "date"})",
         {R"("2024-02-29")", R"("2000-02-29")", R"("1999-12-31")", R"("2023-04-30")", R"("2023-02-28")",
          R"("1000-01-01")"},
         {R"("2023-02-29")", R"("1900-02-29")", R"("2023-04-31")", R"("2024-02-30")", R"("2024-13-01")",
          R"("2024-1-01")", R"("2024-01-32")", R"("2024-01-00")", R"("20240101")", R"("0999-01-01")"}});
  // Every day of 1896-1904 and 1999-2001 (1900 is not a leap year; 1896, 1904 and 2000 are).
  const auto date = Grammar::parse(json_schema_to_gbnf(R"({"type": "string", "format": "date"})"));
  for (int y : {1896, 1897, 1900, 1904, 1999, 2000, 2001})
    for (int m = 1; m <= 12; ++m)
      for (int d = 0; d <= 32; ++d) {
        const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        const int days[] = {31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        char buf[32];
        std::snprintf(buf, sizeof buf, "\"%04d-%02d-%02d\"", y, m, d);
        EXPECT_EQ(date->accepts(buf), d >= 1 && d <= days[m - 1]) << buf;
      }
  check({R"({"type": "string", "format": "time"})",
         {R"("23:59:59Z")", R"("08:30:00.123+05:30")", R"("00:00:00-12:00")"},
         {R"("24:00:00Z")", R"("12:00:00")", R"("12:60:00Z")", R"("1:00:00Z")", R"("12:00:00+24:00")"}});
  check({R"({"type": "string", "format": "date-time"})",
         {R"("2024-05-01T12:34:56.789Z")", R"("2024-05-01T12:34:56+01:00")"},
         {R"("2024-05-01 12:34:56Z")", R"("2024-05-01T12:34Z")", R"("2024-05-01")", R"("2023-02-29T00:00:00Z")"}});
  check({R"({"type": "string", "format": "uuid"})",
         {R"("123e4567-e89b-12d3-a456-426614174000")", R"("123E4567-E89B-12D3-A456-426614174000")"},
         {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400g")",
          R"("123e4567-e89b-12d3-a456-4266141740000")"}});
}

TEST(JsonSchema, Patterns) {
  check(
      {R"J({"type": "string", "pattern": "^[A-Z]{2}-\\d{3,4}$"})J",
       {R"J("AB-123")J", R"J("ZZ-0000")J"},
       {R"J("ab-123")J", R"J("AB-12")J", R"J("AB-12345")J", R"J("xAB-123")J", R"J("AB-123 ")J", R"J("A\u0042-123")J"}});
  // Unanchored: a search, anything around the match.
  check({R"J({"type": "string", "pattern": "cat|dog"})J",
         {R"J("cat")J", R"J("a dog!")J", R"J("concatenate")J", R"J("\u00e9 cat \n")J"},
         {R"J("")J", R"J("ca t")J", R"J("CAT")J"}});
  check({R"J({"type": "string", "pattern": "^(?:\\+\\d{1,3} )?\\(?\\d{3}\\)?[ .-]?\\d{4}$"})J",
         {R"J("(555) 1234")J", R"J("+44 555-1234")J", R"J("5551234")J"},
         {R"J("555 12345")J", R"J("+ 555 1234")J", R"J("phone")J"}});
  // Characters JSON escapes are written its way; "." and [^...] leave control characters out.
  check({R"J({"type": "string", "pattern": "^[\"\\\\\\n]+$"})J", {R"J("\"\\\n")J"}, {R"J("a")J", "\"\n\""}});
  check({R"J({"type": "string", "pattern": "^.[^a]\\w\\s\\S\\W$"})J",
         {"\"\xC3\xA9"
          "b_ x!\"",
          R"J("\"\\9\tx.")J"},
         {R"J("\nb_ x!")J", R"J("aa_ x!")J", R"J("ab- x!")J", R"J("ab_xx!")J", R"J("ab_  !")J", R"J("ab_ xx")J"}});
  check({R"J({"type": "string", "pattern": "^\\x41\\u00e9[\\x30-\\x32]?$"})J",
         {"\"A\xC3\xA9\"",
          "\"A\xC3\xA9"
          "2\""},
         {R"J("A\u00e9")J",
          "\"A\xC3\xA9"
          "3\""}});
}

TEST(JsonSchema, IntegerRangesAreExact) {
  check({R"({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10})", {"1", "9"}, {"0", "10", "-1"}});
  check({R"({"type": "integer", "minimum": 5, "exclusiveMinimum": true})", {"6", "100"}, {"5", "4"}});  // draft 4
  check(
      {R"({"type": "integer", "minimum": 0})", {"0", "5", "9999999999999999"}, {"-1", "-5", "-", "10000000000000000"}});
  // Every integer of a window, against the range itself.
  const auto g = Grammar::parse(json_schema_to_gbnf(R"({"type": "integer", "minimum": -123, "maximum": 4567})"));
  for (int n = -1500; n <= 6000; ++n) EXPECT_EQ(g->accepts(std::to_string(n)), n >= -123 && n <= 4567) << n;
  const auto h = Grammar::parse(json_schema_to_gbnf(R"({"type": "integer", "minimum": 1000, "maximum": 1000000})"));
  for (int n : {999, 1000, 1001, 9999, 10000, 99999, 999999, 1000000, 1000001, 2000000})
    EXPECT_EQ(h->accepts(std::to_string(n)), n >= 1000 && n <= 1000000) << n;
  const auto neg = Grammar::parse(json_schema_to_gbnf(R"({"type": "integer", "maximum": -20.5})"));
  for (int n : {-21, -20, -19, 0, -1000}) EXPECT_EQ(neg->accepts(std::to_string(n)), n <= -21) << n;
}

// Number ranges offer a subset (json_schema.hpp): every number the grammar takes is in
// range, and the ones a model would write for the common ranges are there.
TEST(JsonSchema, NumberRangesAreSound) {
  struct Range {
    const char* schema;
    double lo, hi;
    bool lo_excl, hi_excl;
    std::vector<std::string> must;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Range> ranges = {
      {R"({"type": "number", "minimum": 0, "maximum": 1})", 0, 1, false, false, {"0", "0.5", "0.999", "1", "1.0"}},
      {R"({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1})",
       0,
       1,
       true,
       true,
       {"0.5", "0.01", "0.99"}},
      {R"({"type": "number", "minimum": -2.5, "maximum": 3.7})",
       -2.5,
       3.7,
       false,
       false,
       {"-2", "-1.75", "0", "2.99", "3"}},
      {R"({"type": "number", "exclusiveMinimum": -10, "maximum": 0})",
       -10,
       0,
       true,
       false,
       {"-9.99", "-5", "-0.5", "0", "0.0"}},
      {R"({"type": "number", "minimum": 1.5})", 1.5, inf, false, false, {"2", "2.5", "1000000.25"}},
      {R"({"type": "number", "exclusiveMaximum": -0.5})", -inf, -0.5, false, true, {"-1", "-1.5", "-123.456"}},
      {R"({"type": "number", "minimum": 5, "exclusiveMinimum": true, "maximum": 6})", 5, 6, true, false, {"5.5", "6"}},
  };
  std::vector<std::string> probes;
  for (int i = -12; i <= 12; ++i)
    for (const char* f : {"", ".0", ".00", ".01", ".25", ".5", ".75", ".999"}) {
      probes.push_back(std::to_string(i) + f);
      if (i == 0) probes.push_back(std::string("-0") + f);
    }
  for (const Range& r : ranges) {
    const auto g = Grammar::parse(json_schema_to_gbnf(r.schema));
    for (const std::string& p : probes) {
      const double x = std::stod(p);
      const bool in = (r.lo_excl ? x > r.lo : x >= r.lo) && (r.hi_excl ? x < r.hi : x <= r.hi);
      if (g->accepts(p)) {
        EXPECT_TRUE(in) << r.schema << " takes " << p;
      }
    }
    for (const std::string& p : r.must) EXPECT_TRUE(g->accepts(p)) << r.schema << " refuses " << p;
    EXPECT_FALSE(g->accepts("1e0")) << r.schema;  // no exponents in a range
  }
  EXPECT_NE(error_of(R"({"type": "number", "minimum": 1, "maximum": 0})").find("matches no JSON value"),
            std::string::npos);
}

TEST(JsonSchema, BooleanAndEmptySchemas) {
  for (const char* any : {"true", "{}", R"({"title": "t", "description": "d", "x-extension": 1})"})
    check({any, {"1", R"("s")", "null", R"({"a":[true,{}]})", "[]"}, {"", "nul", "[1,]"}});
  EXPECT_NE(error_of("false").find("matches no JSON value"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "array", "minItems": 3, "maxItems": 2})").find("matches no JSON value"),
            std::string::npos);
}

TEST(JsonSchema, TypeImpliedByKeywords) {
  check({R"({"properties": {"a": {"type": "integer"}}, "additionalProperties": false})",
         {"{}", R"({"a":1})"},
         {"1", "[]"}});
  check({R"({"items": {"type": "integer"}})", {"[1]"}, {"{}"}});
  check({R"({"maxLength": 1})", {R"("a")"}, {"1", R"("ab")"}});
}

TEST(JsonSchema, WhitespaceIsBounded) {
  const auto g = Grammar::parse(json_schema_to_gbnf(R"({"type": "object", "properties": {"a": {"type": "integer"}}})"));
  EXPECT_TRUE(g->accepts("{\"a\":" + std::string(20, ' ') + "1}"));
  EXPECT_TRUE(g->accepts("{\n\t\"a\" :\r\n 1\n}"));
  EXPECT_FALSE(g->accepts("{\"a\":" + std::string(21, ' ') + "1}"));
  EXPECT_FALSE(g->accepts(" {\"a\":1}"));  // none around the document
  EXPECT_FALSE(g->accepts("{\"a\":1} "));
}

TEST(JsonSchema, JsonObjectMode) {
  const auto g = Grammar::parse(json_object_gbnf());
  for (const char* ok : {"{}", R"({"a":[1,{"b":null}],"c":"\u00e9"})", "{ \"x\" : -1.5e3 }"})
    EXPECT_TRUE(g->accepts(ok)) << ok;
  for (const char* bad : {"[]", R"("s")", R"({"a"})", R"({"a":1,})", "1"}) EXPECT_FALSE(g->accepts(bad)) << bad;
}

TEST(JsonSchema, UnsupportedKeywordsNameKeywordAndPath) {
  EXPECT_EQ(error_of(R"({"properties": {"a": {"patternProperties": {}}}})"),
            "unsupported JSON Schema keyword 'patternProperties' at /properties/a");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"J({"type": "string", "pattern": "^(a)\\1$"})J", "'pattern' at /: the escape \\1"},
      {R"J({"type": "string", "pattern": "^(?=a)"})J", "'pattern' at /: lookaround"},
      {R"J({"type": "string", "pattern": "\\bword\\b"})J", "'pattern' at /: word boundaries"},
      {R"J({"type": "string", "pattern": "a^b"})J", "'pattern' at /: '^' and '$' only"},
      {R"J({"type": "string", "pattern": "^a|b$"})J", "'pattern' at /: '^' or '$' beside a top-level '|'"},
      {R"J({"type": "string", "pattern": "(a*)*"})J", "'pattern' at /: an unbounded repetition"},
      {R"J({"type": "string", "pattern": "[z-a]"})J", "'pattern' at /: a bad range"},
      {R"J({"type": "string", "pattern": "(ab"})J", "'pattern' at /: unbalanced"},
      {R"J({"type": "string", "pattern": "\\p{L}"})J", "'pattern' at /: the escape \\p"},
      {R"J({"type": "string", "pattern": "a", "maxLength": 3})J", "'pattern' at /: beside"},
      {R"({"type": "integer", "multipleOf": 2})", "'multipleOf' at /"},
      {R"({"not": {"type": "string"}})", "'not' at /"},
      {R"({"if": {}, "then": {}, "else": {}})", "'if' at /"},
      {R"({"properties": {"x": {"then": {}}}})", "'then' at /properties/x"},
      {R"({"items": {"else": {}}})", "'else' at /items"},
      {R"({"type": "object", "dependentRequired": {"a": ["b"]}})", "'dependentRequired' at /"},
      {R"({"type": "object", "dependentSchemas": {}})", "'dependentSchemas' at /"},
      {R"({"type": "array", "uniqueItems": true})", "'uniqueItems' at /"},
      {R"({"type": "array", "contains": {}})", "'contains' at /"},
      {R"({"type": "object", "minProperties": 1})", "'minProperties' at /"},
      {R"({"type": "object", "propertyNames": {}})", "'propertyNames' at /"},
      {R"({"type": "object", "unevaluatedProperties": false})", "'unevaluatedProperties' at /"},
      {R"({"anyOf": [{"type": "string", "format": "email"}]})", "'format' at /anyOf/0"},
      {R"({"$ref": "other.json#/x"})", "'$ref' at /"},
      {R"({"$defs": {"a": {"$ref": "https://example.com/s.json"}}, "$ref": "#/$defs/a"})", "'$ref' at /$defs/a"},
      {R"({"allOf": [{"type": "object"}, {"required": ["a"]}]})", "'allOf' at /"},
      {R"({"$ref": "#/$defs/a", "type": "object", "$defs": {"a": {}}})", "'type' at /"},
      {R"({"anyOf": [{}], "properties": {}})", "'properties' at /"},
      {R"({"properties": {"a~b/c": {"frobnicate": 1}}})", "'frobnicate' at /properties/a~0b~1c"},
      {R"({"anyOf": [{"$ref": "#"}, {"type": "string"}]})", "'$ref' at /"},
      {R"({"type": "string", "format": "time", "maxLength": 30})", "'maxLength' at /"},
      {R"({"type": "string", "minLength": 100000})", "'minLength' at /"},
      {R"({"type": "array", "minItems": 1000})", "'minItems' at /"},
  };
  for (const auto& [schema, want] : cases) {
    const std::string got = error_of(schema);
    EXPECT_NE(got.find("unsupported JSON Schema keyword " + want), std::string::npos) << schema << "\n -> " << got;
  }
}

TEST(JsonSchema, MalformedSchemasAreErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type": "string")", "not valid JSON"},
      {R"({"type": "str"})", "unknown type 'str'"},
      {R"({"type": []})", "'type' must be"},
      {R"({"type": "array", "minItems": -1})", "'minItems' must be a non-negative integer"},
      {R"({"type": "string", "maxLength": "5"})", "'maxLength' must be a non-negative integer"},
      {R"({"type": "object", "required": "a"})", "'required' must be an array"},
      {R"({"properties": []})", "'properties' must be an object"},
      {R"({"$ref": "#/$defs/missing"})", "does not exist"},
      {R"({"anyOf": []})", "'anyOf' must be a non-empty array"},
      {R"({"enum": 1})", "'enum' must be an array"},
      {"[]", "a schema must be an object or a boolean"},
      {R"({"properties": {"a": 1}})", "a schema must be an object or a boolean at /properties/a"},
  };
  for (const auto& [schema, want] : cases) {
    const std::string got = error_of(schema);
    EXPECT_NE(got.find(want), std::string::npos) << schema << "\n -> " << got;
  }
}

TEST(JsonSchema, LimitsOnNestingAndSize) {
  // 70 nested arrays: deeper than kSchemaMaxDepth, but far from the JSON parser's limit.
  std::string deep = "{}";
  for (int i = 0; i < 70; ++i) deep = R"({"type": "array", "items": )" + deep + "}";
  EXPECT_NE(error_of(deep).find("nests deeper than 64 levels"), std::string::npos) << error_of(deep);
  std::string shallow = "{}";
  for (int i = 0; i < 30; ++i) shallow = R"({"type": "array", "items": )" + shallow + "}";
  EXPECT_EQ(error_of(shallow), "");
  // Way past the JSON parser's depth: an error, not a stack overflow.
  EXPECT_NE(error_of(std::string(100000, '[')).find("not valid JSON"), std::string::npos);
  // Too many rules: 12000 properties, each with its own enum (no two rules alike).
  std::string many = R"({"type": "object", "additionalProperties": false, "properties": {)";
  for (int i = 0; i < 12000; ++i) {
    const std::string n = std::to_string(i);
    many += i ? ",\"p" : "\"p";
    many += n;
    many += R"(": {"enum": ["v)";
    many += n;
    many += R"(", "w"]})";
  }
  many += "}}";
  const std::string err = error_of(many);
  EXPECT_TRUE(err.find("grammar rules") != std::string::npos || err.find("does not compile") != std::string::npos)
      << err;
}

// The schemas the Python end-to-end tests use (tests/data/json_schemas/): each converts, and
// each of its "examples" (valid documents, kept in the schema as the annotation) is accepted.
TEST(JsonSchema, DataSchemasAcceptTheirExamples) {
  const std::filesystem::path dir = std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/data/json_schemas";
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    std::ifstream f(e.path());
    std::stringstream text;
    text << f.rdbuf();
    SCOPED_TRACE(e.path().string());
    const auto g = Grammar::parse(json_schema_to_gbnf(text.str()));
    const boost::json::value schema = boost::json::parse(text.str());
    const boost::json::array& examples = schema.at("examples").as_array();
    EXPECT_FALSE(examples.empty());
    for (const boost::json::value& ex : examples) EXPECT_TRUE(g->accepts(boost::json::serialize(ex))) << ex;
    ++n;
  }
  EXPECT_GE(n, 6u);
}

// The independent check: random documents each grammar lets a model write (up to 100 per
// schema), validated by Python's jsonschema (draft 2020-12, formats checked) through
// tests/python/json_schema_check.py. Skipped where jsonschema is not installed.
TEST(JsonSchema, SampledDocumentsPassJsonschema) {
  std::vector<std::string> schemas = {
      R"J({"type": "object", "properties": {"a": {"type": "integer", "minimum": -3, "maximum": 3},
           "b": {"type": "number", "exclusiveMinimum": 0, "maximum": 1}, "c": {"enum": [1, "x", null, [1, {"k": 2}]]}}})J",
      R"J({"type": "object", "properties": {"id": {"type": "string", "pattern": "^[a-f0-9]{4}$"}, "ida": {"type": "boolean"}},
           "required": ["id"], "additionalProperties": {"type": "integer"}})J",
      R"J({"type": "array", "prefixItems": [{"type": "string", "minLength": 2, "maxLength": 3}, {"const": 5}],
           "items": {"type": "number", "minimum": -2.5, "maximum": 7.25}, "minItems": 1, "maxItems": 6})J",
      R"J({"type": "object", "properties": {"s": {"type": "string", "minLength": 1, "maxLength": 4},
           "p": {"type": "string", "pattern": "x[^a-z]\\d"}, "t": {"type": "string", "format": "time"}},
           "required": ["s", "p", "t"], "additionalProperties": false})J",
      R"J({"$defs": {"e": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"$ref": "#/$defs/e"}, "maxItems": 3},
           {"type": "object", "additionalProperties": {"$ref": "#/$defs/e"}}]}}, "$ref": "#/$defs/e"})J",
      R"J({"type": ["string", "null", "boolean"], "maxLength": 2})J",
      "{}",
  };
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/data/json_schemas")) {
    std::ifstream f(e.path());
    std::stringstream text;
    text << f.rdbuf();
    schemas.push_back(text.str());
  }
  const std::string file = test::scratch_dir("json_schema_samples") + "/samples.jsonl";
  std::ofstream out(file);
  size_t sampled = 0;
  for (const std::string& schema : schemas) {
    const auto g = Grammar::parse(json_schema_to_gbnf(schema));
    boost::json::array docs;
    for (uint64_t seed = 0; seed < 400 && docs.size() < 100; ++seed)
      if (auto doc = test::random_sentence(*g, seed * 0x9E3779B97F4A7C15ULL + 1, 600)) docs.emplace_back(*doc);
    EXPECT_GE(docs.size(), 10u) << "few walks ended: " << schema;
    sampled += docs.size();
    out << boost::json::serialize(boost::json::object{{"schema", boost::json::parse(schema)}, {"docs", docs}}) << "\n";
  }
  out.close();
  std::string log;
  const int rc = test::run_python("tests/python/json_schema_check.py", file + " 2>&1", &log);
  if (rc == 77) GTEST_SKIP() << log;
  EXPECT_EQ(rc, 0) << log;
  EXPECT_NE(log.find(std::to_string(sampled) + " documents, 0 invalid"), std::string::npos) << log;
}

// Found by fuzz_json_schema (tests/fuzz/corpus/json_schema/ambiguous_pattern_refused.json):
// a pattern of many `.` and `*` converts and compiles, but stepping it keeps more than 512
// parses alive. The grammar refuses that with a clear std::runtime_error (a request using
// it ends with that error) instead of slowing down without bound; nothing crashes.
TEST(JsonSchema, AGrammarTooAmbiguousToStepIsRefusedWithAClearError) {
  std::ifstream in(std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/fuzz/corpus/json_schema/ambiguous_pattern_refused.json",
                   std::ios::binary);
  ASSERT_TRUE(in);
  const std::string schema((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::shared_ptr<const Grammar> g = Grammar::parse(json_schema_to_gbnf(schema));
  int refused = 0;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    try {
      (void)test::random_sentence(*g, seed * 0x9E3779B97F4A7C15ULL + schema.size());
    } catch (const std::runtime_error& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find("too ambiguous"), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(refused, 0) << "the walk no longer meets the ambiguity limit: pick a new input";
}
