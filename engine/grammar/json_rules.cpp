#include "engine/grammar/json_rules.hpp"

#include <array>

namespace tandem {

namespace {

using R = JsonRule;
constexpr R kString[] = {R::chr};
constexpr R kValue[] = {R::object, R::array, R::string, R::number, R::boolean, R::null};
constexpr R kObject[] = {R::ws, R::string, R::value};
constexpr R kArray[] = {R::ws, R::value};
constexpr R kDateTime[] = {R::date, R::time};
constexpr R kDate[] = {R::year, R::leap_year};

// Indexed by JsonRule. Whitespace is one class repeated (a single way to match any run, so
// the automaton never holds several parses of it). Numbers: 16 integer digits are enough
// for any int64 an app means and for a double's 17 significant digits with the fraction.
constexpr std::array<JsonRuleDef, static_cast<size_t>(R::count_)> kRules = {{
    {"ws", R"([ \t\n\r]{0,20})", {}},
    {"string", R"("\"" char* "\"")", kString},
    {"char", R"([^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ))", {}},
    // For counted strings (minLength, maxLength count code points): a surrogate pair written
    // as two \u escapes is one code point, so escapes of surrogates are left out.
    {"char1",
     R"([^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) ))",
     {}},
    {"number", R"("-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,18} )? ( [eE] [-+]? [0-9]{1,3} )?)", {}},
    {"integer", R"("-"? ( "0" | [1-9] [0-9]{0,15} ))", {}},
    {"boolean", R"("true" | "false")", {}},
    {"null", R"("null")", {}},
    {"value", "object | array | string | number | boolean | null", kValue},
    {"object", R"("{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}")", kObject},
    {"array", R"("[" ws ( value ws ( "," ws value ws )* )? "]")", kArray},
    // Years 1000-9999 (what every date library reads), the days of each month, and
    // February 29 in leap years only: the last two digits divisible by 4 and not 00, or
    // 00 in a year divisible by 400 (1600, 2000...).
    {"date",
     R"(year "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) )"
     R"(| ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) )"
     R"(| "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ) | leap-year "-02-29")",
     kDate},
    {"year", R"([1-9] [0-9]{3})", {}},
    {"leap-year",
     R"([1-9] [0-9] ( "0" [48] | [2468] [048] | [13579] [26] ) | ( [2468] [048] | [13579] [26] ) "00")",
     {}},
    // RFC 3339 full-time: the offset is part of it. Seconds 00-59 (no leap second); "T" and
    // "Z" in capitals only (RFC 3339 allows either case; some checkers do not).
    {"time",
     R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,9} )? )"
     R"(( "Z" | [-+] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))",
     {}},
    {"date-time", R"(date "T" time)", kDateTime},
    {"uuid", R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})", {}},
}};
// One entry per JsonRule, in its order: a missing one would leave the last empty.
static_assert(kRules.back().name == "uuid");

}  // namespace

const JsonRuleDef& json_rule(JsonRule r) { return kRules[static_cast<size_t>(r)]; }

}  // namespace tandem
