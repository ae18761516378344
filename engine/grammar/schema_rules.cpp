// The converter's rule table: names, sharing of identical bodies, the size limits, the
// left-recursion check and the final text (only the rules root reaches, root first).
#include <cctype>
#include <unordered_set>

#include "engine/grammar/json_schema.hpp"
#include "engine/grammar/schema_converter.hpp"

namespace tandem::schema {

namespace {

// The rule names a GBNF body refers to: its words outside literals, classes and {m,n}.
std::vector<std::string> referenced_names(std::string_view body) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < body.size()) {
    const char c = body[i];
    if (c == '"' || c == '[') {
      const char close = c == '"' ? '"' : ']';
      for (++i; i < body.size() && body[i] != close; ++i)
        if (body[i] == '\\') ++i;
      ++i;
    } else if (c == '{') {
      while (i < body.size() && body[i] != '}') ++i;
    } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-') {
      const size_t start = i;
      while (i < body.size() && (std::isalnum(static_cast<unsigned char>(body[i])) || body[i] == '_' || body[i] == '-'))
        ++i;
      out.emplace_back(body.substr(start, i - start));
    } else {
      ++i;
    }
  }
  return out;
}

}  // namespace

Frag Converter::use(JsonRule r) {
  const JsonRuleDef& def = json_rule(r);
  const std::string name(def.name);
  if (!rule_index_.contains(name)) {
    // Fixed rules are never on a cycle of left edges: each reads a character first, or
    // (value) refers only to fixed rules that do.
    define(name, atom(std::string(def.body)), "");
    for (JsonRule u : def.uses) use(u);
  }
  return ref(name, r == JsonRule::ws);
}

std::string Converter::new_name(const std::string& hint) {
  // [a-zA-Z0-9-], no doubled or trailing '-', at most 40 characters, then "_<n>" if taken.
  std::string base;
  for (char c : hint) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) && static_cast<unsigned char>(c) < 0x80;
    if (ok)
      base += c;
    else if (!base.empty() && base.back() != '-')
      base += '-';
    if (base.size() >= 40) break;
  }
  while (!base.empty() && base.back() == '-') base.pop_back();
  if (base.empty()) base = "rule";
  // Grammar::parse names the rules it generates "<rule>-<n>": a name of ours ending in
  // "-<digits>" could be taken for one of those, so its last '-' becomes '_'.
  if (const size_t dash = base.rfind('-'); dash != std::string::npos && dash + 1 < base.size() &&
                                           base.find_first_not_of("0123456789", dash + 1) == std::string::npos)
    base[dash] = '_';
  std::string name = base;
  // The counter per base keeps many same-named rules (items of items of...) linear.
  for (size_t& k = next_suffix_[base]; reserved_.contains(name); ++k) name = base + "_" + std::to_string(k);
  reserved_.insert(name);
  return name;
}

void Converter::define(const std::string& name, const Frag& f, const std::string& path) {
  if (rules_.size() >= kSchemaMaxRules)
    fail("the schema needs more than " + std::to_string(kSchemaMaxRules) + " grammar rules", path);
  text_bytes_ += name.size() + f.text.size() + 6;
  if (text_bytes_ > kSchemaMaxGbnfBytes)
    fail("the schema's grammar would exceed " + std::to_string(kSchemaMaxGbnfBytes) + " bytes", path);
  rule_index_[name] = rules_.size();
  by_body_.emplace(f.text, name);
  rules_.push_back(Rule{name, f.text.empty() ? "\"\"" : f.text, f.nullable, f.left, path});
}

Frag Converter::named(const std::string& hint, const Frag& f, const std::string& path) {
  if (auto it = by_body_.find(f.text); it != by_body_.end())
    return ref(it->second, rules_[rule_index_.at(it->second)].nullable);
  const std::string name = new_name(hint);
  define(name, f, path);
  return ref(name, f.nullable);
}

Frag Converter::small(const std::string& hint, const Frag& f, const std::string& path) {
  constexpr size_t kInline = 64;
  return f.text.size() <= kInline ? f : named(hint, f, path);
}

void Converter::check_left_recursion() const {
  // Iterative depth-first search over left edges: 0 unseen, 1 on the stack, 2 done.
  std::vector<int> state(rules_.size(), 0);
  for (size_t start = 0; start < rules_.size(); ++start) {
    if (state[start] != 0) continue;
    std::vector<std::pair<size_t, size_t>> stack{{start, 0}};  // rule, next left edge
    state[start] = 1;
    while (!stack.empty()) {
      auto& [r, next] = stack.back();
      if (next == rules_[r].left.size()) {
        state[r] = 2;
        stack.pop_back();
        continue;
      }
      const auto it = rule_index_.find(rules_[r].left[next++]);
      if (it == rule_index_.end()) continue;
      const size_t to = it->second;
      if (state[to] == 1)
        fail_keyword("$ref", rules_[to].path, "it refers back to itself before any object or array (left recursion)");
      if (state[to] == 0) {
        state[to] = 1;
        stack.push_back({to, 0});
      }
    }
  }
}

std::string Converter::text() const {
  // Breadth-first from root: rules no expression of root's reaches (left over from
  // subschemas that turned out to match nothing) are dropped.
  std::vector<size_t> order{rule_index_.at("root")};
  std::unordered_set<size_t> seen{order[0]};
  for (size_t k = 0; k < order.size(); ++k)
    for (const std::string& n : referenced_names(rules_[order[k]].body))
      if (auto it = rule_index_.find(n); it != rule_index_.end() && seen.insert(it->second).second)
        order.push_back(it->second);
  std::string out;
  for (size_t r : order) out += rules_[r].name + " ::= " + rules_[r].body + "\n";
  return out;
}

}  // namespace tandem::schema
