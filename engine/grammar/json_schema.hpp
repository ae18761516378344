// JSON Schema to GBNF: the grammars behind OpenAI's `response_format`.
//
// json_schema_to_gbnf turns the subset of JSON Schema that apps send (what Pydantic, Zod and
// OpenAI's structured-output docs produce) into GBNF text whose `root` rule matches the JSON
// documents valid against the schema, up to the approximations below. Grammar::parse
// compiles the text into the automaton that masks tokens; a schema this accepts always
// gives text that compiles.
//
// Supported: boolean schemas; `type` (one or a list); `properties`, `required`,
// `additionalProperties`; `items`, `prefixItems` (and the draft-07 array form of `items`
// with `additionalItems`), `minItems`, `maxItems`; `enum`, `const`; `anyOf`, `oneOf`;
// `allOf` of one constraining schema; local `$ref` (any JSON pointer into the document,
// recursion included) with `$defs` / `definitions`; `minLength`, `maxLength`, `pattern`
// (a regular expression subset, schema_pattern.cpp); `format` `date`, `time`, `date-time`,
// `uuid`; `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`; OpenAPI's
// `nullable`. Annotations (title, description, default, examples...) are ignored.
//
// Approximations. Each makes the grammar accept a subset of the valid documents, except
// `oneOf` (a document matching two branches is not refused) and `nullable` (null is
// allowed as OpenAPI means, which JSON Schema validators refuse):
//  - Properties come in the declared order; an optional one may be left out. Extra
//    properties, where `additionalProperties` allows them (absent, true or a schema), come
//    after the declared ones, with keys other than every declared key (until an extra key
//    differs from every declared one, the escapes \/ and \u are not offered, so that no
//    spelling of a declared key slips through). If a declared key needs escaping in JSON
//    (", \ or a control character), extra properties are not offered at all.
//  - A schema without `type` takes the types its keywords constrain (`properties` means an
//    object, `items` an array, `minLength` a string...); with none of those, any value.
//  - Whitespace between tokens: at most 20 characters of " \t\n\r"; none around the
//    document. Numbers: at most 16 integer digits, 18 fraction digits, 3 exponent digits;
//    integers are written without fraction or exponent.
//  - `enum` and `const` values are written as their compact JSON (whitespace between tokens
//    allowed, object keys in the given order, one spelling of each string and number).
//  - Ranges are exact for integers. For numbers: no exponent, and the integer part decides:
//    I.F for every I whose unit interval [I, I+1) is in range, and at a non-integer bound
//    only the integer inside it (maximum 2.5 offers 2 but not 2.3; minimum 0.5 offers 1,
//    not 0.7).
//  - minLength/maxLength count code points; such strings offer no \u escape of a surrogate
//    (a character beyond U+FFFF is written as itself). maxLength and maxItems above
//    kSchemaMaxRepeat act as kSchemaMaxRepeat; larger minimums are errors.
//  - `pattern`: the characters it matches are written as themselves or as JSON requires
//    (\", \\, \n...), not as other \u escapes; "." and negated classes offer no control
//    characters; \d \w \s and their negations are ASCII. Not beside minLength, maxLength
//    or format.
//  - `date`: years 1000-9999, the days of each month, February 29 in leap years only.
//    `time` needs an offset (RFC 3339 full-time), has no leap second, and like `date-time`
//    writes "T" and "Z" in capitals.
//  - A schema no finite document satisfies (a required property that recurses into itself)
//    gives a grammar with no sentence rather than an error.
// Anything else that constrains (multipleOf, not, if/then/else, uniqueItems: true, other
// formats, backreferences or lookaround in a pattern, remote $ref, unknown keywords but
// "x-..." extensions) is a SchemaError naming the keyword and the JSON pointer of the
// schema holding it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tandem {

// "unsupported JSON Schema keyword 'patternProperties' at /properties/a"; also invalid JSON,
// malformed keyword values, and schemas beyond the limits below.
class SchemaError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Limits on what a schema may make: rules in the grammar, subschemas nested in each other,
// the largest count (minLength, maxItems...) spelled as a bounded repetition, and the GBNF
// text itself.
inline constexpr size_t kSchemaMaxRules = 10000;
inline constexpr int kSchemaMaxDepth = 64;
// (999: Grammar::parse spells X{m,} as m copies of X and one more element, at most 1000.)
inline constexpr int64_t kSchemaMaxRepeat = 999;
inline constexpr size_t kSchemaMaxGbnfBytes = 4 << 20;

// The GBNF of `schema_json` (a JSON Schema document); its start rule is `root`.
std::string json_schema_to_gbnf(std::string_view schema_json);

// Any JSON object: response_format {"type": "json_object"}.
std::string json_object_gbnf();

}  // namespace tandem
