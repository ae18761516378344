// Python/Jinja semantics of the operators and of attribute, item and slice access.
//
// Lookups follow Jinja: `obj.name` tries the attribute (for a dict: a method such as
// items) and then the item; `obj[key]` tries the item and then the attribute. A failed
// lookup yields Undefined (printing as ""), and only using that Undefined further -- an
// attribute of it, arithmetic with it -- is an error, as in Jinja's default mode.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "engine/chat/jinja/jinja_ast.hpp"
#include "engine/chat/jinja/jinja_value.hpp"

namespace tandem::jinja::ops {

Value get_attr(const Value& obj, std::string_view name);
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step]; a null or none bound is omitted.
Value slice(const Value& obj, const Value* start, const Value* stop, const Value* step);

// Python iter(): the items of a list/tuple, the keys of a dict, the characters of a
// string; nothing for Undefined. Throws for values that are not iterable.
std::vector<Value> iterate(const Value& v);
size_t length(const Value& v);                               // Python len()
bool contains(const Value& container, const Value& item);    // Python `item in container`

Value binary(ast::BinOp op, const Value& a, const Value& b);  // + - * / // % **
Value negate(const Value& v);                                // -v
Value plus(const Value& v);                                  // +v

}  // namespace tandem::jinja::ops
