// Arrays: prefixItems (or draft-07's array-valued items) for the first positions, items for
// the rest, minItems/maxItems as a count. Built from the end: tail_i is what may follow the
// i-th item (each further item after a comma), mandatory while i < minItems.
#include "engine/grammar/gbnf_spell.hpp"
#include "engine/grammar/json_schema.hpp"
#include "engine/grammar/schema_converter.hpp"

namespace tandem::schema {

MaybeFrag Converter::array_type(const json::object& o, const std::string& path, const std::string& hint) {
  const json::value* prefix = o.if_contains("prefixItems");
  const json::value* items = o.if_contains("items");
  std::string prefix_key = "prefixItems", items_key = "items";
  if (prefix && !prefix->is_array()) fail("'prefixItems' must be an array of schemas", path);
  if (items && items->is_array()) {
    // Draft 2019-09 and earlier: an array of items is the tuple, additionalItems the rest.
    if (prefix) fail("'items' must be a schema beside 'prefixItems'", path);
    prefix = items, prefix_key = "items";
    items = o.if_contains("additionalItems"), items_key = "additionalItems";
  }
  const int64_t min = count_keyword(o, "minItems", Count::lower, path).value_or(0);
  int64_t max = count_keyword(o, "maxItems", Count::upper, path).value_or(-1);  // -1: unbounded
  auto cap = [&](int64_t n) { max = max < 0 ? n : std::min(max, n); };

  std::vector<Frag> elems;  // the item schema of each prefix position that can be filled
  if (prefix) {
    const json::array& a = prefix->get_array();
    if (static_cast<int64_t>(a.size()) > kSchemaMaxRepeat)
      fail_keyword(prefix_key, path, "more than " + std::to_string(kSchemaMaxRepeat) + " items");
    for (size_t i = 0; i < a.size() && (max < 0 || static_cast<int64_t>(i) < max); ++i) {
      const std::string name = hint + "-" + std::to_string(i);
      MaybeFrag e = schema(a[i], child_path(child_path(path, prefix_key), std::to_string(i)), name);
      if (!e) break;  // nothing fits here: the array ends before
      elems.push_back(small(name, *e, path));
    }
    if (elems.size() < a.size()) cap(static_cast<int64_t>(elems.size()));
  }
  const int64_t k = static_cast<int64_t>(elems.size());
  MaybeFrag item;
  if (max < 0 || max > k) {
    item = items ? schema(*items, child_path(path, items_key), hint + "-item") : MaybeFrag(use(JsonRule::value));
    if (item) item = small(hint + "-item", *item, path);
  }
  if (!item) cap(k);
  if (max >= 0 && min > max) return std::nullopt;

  const Frag ws = use(JsonRule::ws), comma = atom(gbnf_literal(","));
  const Frag open = atom(gbnf_literal("[")), close = atom(gbnf_literal("]"));
  if (max == 0) return seq({open, ws, close});
  auto at = [&](int64_t i) -> const Frag& { return i < k ? elems[i] : *item; };
  // tail(n): after n items. Past the prefix the items are uniform: a counted repetition.
  const int64_t end = max < 0 ? k : std::min(max, k);
  Frag tail = epsilon();
  if (max < 0 || max > k) {
    const int64_t from = std::max<int64_t>(k, 1);
    const int64_t need = std::max<int64_t>(0, min - from);
    const Frag one = seq({comma, ws, *item, ws});
    Frag needed = repeat(one, need, need);
    Frag more = max < 0 ? repeat(one, 0, -1) : repeat(one, 0, max - from - need);
    tail = seq({needed, more});
  }
  for (int64_t i = end - 1; i >= 1; --i) {
    const Frag step = seq({comma, ws, at(i), ws, small(hint + "-tail", tail, path)});
    tail = i < min ? step : opt(step);
  }
  const Frag items_frag = seq({at(0), ws, tail});
  return seq({open, ws, min > 0 ? items_frag : opt(items_frag), close});
}

}  // namespace tandem::schema
