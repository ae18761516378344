// Objects: properties in declared order, the required ones always there, the optional ones
// free to be left out, extra properties (where additionalProperties allows them) after the
// declared ones, keyed by any string but the declared keys.
//
// The members are a chain that knows whether a member has been written yet, so that commas
// fall only between members:
//   head_i: nothing written yet, members i.. to come:  kv_i ws tail_{i+1} (| head_{i+1} if i is optional)
//   tail_i: something written already:                  "," ws kv_i ws tail_{i+1} (made optional if i is)
// Every alternative starts with a different key, so the grammar stays unambiguous.
#include <map>
#include <set>

#include "engine/grammar/gbnf_spell.hpp"
#include "engine/grammar/schema_converter.hpp"

namespace tandem::schema {

MaybeFrag Converter::object_type(const json::object& o, const std::string& path, const std::string& hint) {
  const json::value* props = o.if_contains("properties");
  if (props && !props->is_object()) fail("'properties' must be an object", path);
  std::vector<std::string> required_order;
  std::set<std::string> required;
  if (const json::value* r = o.if_contains("required")) {
    if (!r->is_array()) fail("'required' must be an array of strings", path);
    for (const json::value& k : r->get_array()) {
      if (!k.is_string()) fail("'required' must be an array of strings", path);
      if (required.insert(std::string(k.get_string())).second) required_order.emplace_back(k.get_string());
    }
  }
  const json::value* extra = o.if_contains("additionalProperties");
  static const json::value kAny(true);

  struct Member {
    std::string key;
    const json::value* schema;
    std::string path;
    bool required;
  };
  std::vector<Member> members;
  std::vector<std::string> keys;
  if (props) {
    for (const auto& kv : props->get_object()) {
      const std::string key(kv.key());
      members.push_back({key, &kv.value(), child_path(child_path(path, "properties"), key), required.contains(key)});
      keys.push_back(key);
    }
  }
  // A required key with no property schema: an additional property that must be there.
  for (const std::string& key : required_order) {
    if (props && props->get_object().contains(key)) continue;
    members.push_back({key, extra ? extra : &kAny, child_path(path, "additionalProperties"), true});
    keys.push_back(key);
  }

  MaybeFrag extra_value = extra ? schema(*extra, child_path(path, "additionalProperties"), hint + "-extra")
                                : MaybeFrag(use(JsonRule::value));
  if (members.empty() && extra_value && extra_value->text == json_rule(JsonRule::value).name)
    return use(JsonRule::object);
  // Keys that JSON spells with escapes would need escapes in the "any other key" rule too:
  // rare enough to offer no extra properties instead.
  for (const std::string& key : keys)
    if (json_string_spelling(key) != "\"" + key + "\"") extra_value.reset();

  const Frag ws = use(JsonRule::ws), comma = atom(gbnf_literal(",")), colon = atom(gbnf_literal(":"));
  struct Built {
    Frag kv;
    bool required;
  };
  std::vector<Built> built;
  for (const Member& m : members) {
    const std::string name = hint + "-" + m.key;
    MaybeFrag v = schema(*m.schema, m.path, name);
    if (!v) {
      if (m.required) return std::nullopt;
      continue;  // a property whose schema is false: it must not be there
    }
    const Frag kv = seq({atom(gbnf_literal(json_string_spelling(m.key))), ws, colon, ws, *v});
    built.push_back({small(name, kv, m.path), m.required});
  }

  // The tails from the end; the head as one list of alternatives: member i may come first
  // if every member before it is optional.
  Frag tail = epsilon(), extra_head = epsilon();
  if (extra_value) {
    const Frag key = keys.empty() ? use(JsonRule::string) : keys_except(keys, hint + "-xkey", path);
    const Frag kv = small(hint + "-extra", seq({key, ws, colon, ws, *extra_value}), path);
    tail = repeat(seq({comma, ws, kv, ws}), "*");
    extra_head = opt(seq({kv, ws, tail}));
  }
  std::vector<Frag> firsts(built.size());  // member i first: kv_i ws tail_{i+1}
  for (size_t i = built.size(); i-- > 0;) {
    const Frag& kv = built[i].kv;
    const Frag rest = small(hint + "-tail", tail, path);  // in both firsts[i] and tail_i
    firsts[i] = seq({kv, ws, rest});
    tail = built[i].required ? seq({comma, ws, kv, ws, rest}) : seq({opt(seq({comma, ws, kv, ws})), rest});
  }
  std::vector<Frag> heads;
  bool all_optional = true;
  for (size_t i = 0; i < built.size() && all_optional; ++i) {
    heads.push_back(std::move(firsts[i]));
    all_optional = !built[i].required;
  }
  if (all_optional) heads.push_back(extra_head);  // no member at all, or only extra ones
  return seq({atom(gbnf_literal("{")), ws, alt(std::move(heads)), atom(gbnf_literal("}"))});
}

Frag Converter::keys_except(const std::vector<std::string>& keys, const std::string& hint, const std::string& path) {
  // A trie of the keys' code points; node 0 is the empty prefix, children come after parents.
  struct Node {
    std::map<char32_t, size_t> next;
    bool key = false;
  };
  std::vector<Node> nodes(1);
  for (const std::string& key : keys) {
    size_t n = 0;
    for (char32_t cp : utf8_code_points(key)) {
      const auto [it, added] = nodes[n].next.try_emplace(cp, nodes.size());
      const size_t child = it->second;
      if (added) nodes.emplace_back();
      n = child;
    }
    nodes[n].key = true;
  }
  const Frag quote = atom(gbnf_literal("\"")), chr = use(JsonRule::chr);
  const Frag rest = seq({repeat(chr, "*"), quote});  // anything, then the closing quote
  // Escapes of characters no key here has (keys with ", \ or control characters get no
  // extra properties): "\/" and "\u..." could spell a key's character, so they are not
  // offered before the key has diverged.
  const Frag escape = seq({atom(gbnf_literal("\\")), atom(R"(["\\bfnrt])")});
  // Bottom-up: what may follow each prefix so that the whole is no key.
  std::vector<Frag> after(nodes.size());
  for (size_t i = nodes.size(); i-- > 0;) {
    const Node& node = nodes[i];
    if (node.next.empty()) {  // a key and no longer one: at least one more character
      after[i] = seq({repeat(chr, "+"), quote});
      continue;
    }
    std::vector<Frag> alts;
    if (!node.key) alts.push_back(quote);
    std::string other = R"([^"\\\x00-\x1f)";
    for (const auto& [cp, child] : node.next) {
      alts.push_back(seq({atom(gbnf_literal(cp)), after[child]}));
      other += gbnf_class_char(cp);
    }
    alts.push_back(seq({atom(other + "]"), rest}));
    alts.push_back(seq({escape, rest}));
    after[i] = named(hint, alt(std::move(alts)), path);
  }
  return seq({quote, after[0]});
}

}  // namespace tandem::schema
