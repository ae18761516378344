#include "engine/grammar/gbnf_frag.hpp"

#include <algorithm>
#include <unordered_set>
#include <utility>

namespace tandem {

namespace {

void add_left(std::vector<std::string>& into, const std::vector<std::string>& from) {
  for (const std::string& n : from)
    if (std::find(into.begin(), into.end(), n) == into.end()) into.push_back(n);
}

std::string grouped(const Frag& f) { return f.atom ? f.text : "( " + f.text + " )"; }

}  // namespace

Frag atom(std::string text) { return Frag{std::move(text), false, true, false, {}}; }

Frag ref(std::string name, bool nullable) {
  Frag f{name, false, true, nullable, {}};
  f.left.push_back(std::move(name));
  return f;
}

Frag seq(std::vector<Frag> parts) {
  Frag out = epsilon();
  size_t n = 0;
  for (const Frag& p : parts) {
    if (p.empty()) continue;
    if (out.nullable) add_left(out.left, p.left);
    out.nullable = out.nullable && p.nullable;
    if (!out.text.empty()) out.text += ' ';
    out.text += p.alt ? "( " + p.text + " )" : p.text;
    ++n;
    if (n == 1) out.atom = p.alt || p.atom;  // a lone alternative was parenthesized
  }
  if (n > 1) out.atom = false;
  return out;
}

Frag alt(std::vector<Frag> parts) {
  Frag out{"", false, false, false, {}};
  bool has_empty = false;
  size_t n = 0;
  std::vector<const Frag*> kept;  // identical alternatives once: no needless ambiguity
  std::unordered_set<std::string_view> texts;
  std::unordered_set<std::string> lefts;  // add_left's linear search would be quadratic here
  for (const Frag& p : parts) {
    if (p.empty()) {
      has_empty = true;
      continue;
    }
    if (!texts.insert(p.text).second) continue;
    kept.push_back(&p);
    for (const std::string& name : p.left)
      if (lefts.insert(name).second) out.left.push_back(name);
    out.nullable = out.nullable || p.nullable;
    if (!out.text.empty()) out.text += " | ";
    out.text += p.text;  // '|' binds loosest: a nested alternative needs no parentheses
    ++n;
  }
  if (n == 0) return epsilon();
  if (n == 1) return has_empty ? opt(*kept[0]) : *kept[0];  // the part itself, flags and all
  out.alt = true;
  return has_empty ? opt(out) : out;
}

Frag opt(const Frag& f) { return repeat(f, "?"); }

Frag repeat(const Frag& f, std::string_view op) {
  if (f.empty()) return f;
  Frag out{grouped(f) + std::string(op), false, false, true, f.left};
  out.nullable = f.nullable || op == "?" || op == "*" || op.starts_with("{0");
  return out;
}

Frag repeat(const Frag& f, long long min, long long max) {
  if (max == 0) return epsilon();
  if (min == 1 && max == 1) return f;
  if (max < 0 && min == 0) return repeat(f, "*");
  if (max < 0 && min == 1) return repeat(f, "+");
  if (min == 0 && max == 1) return opt(f);
  // Appended piece by piece: GCC 12's -Wrestrict misfires on "{" + std::to_string(...).
  std::string op = "{";
  op += std::to_string(min);
  if (max != min) op += ',';
  if (max > min) op += std::to_string(max);
  op += '}';
  return repeat(f, op);
}

}  // namespace tandem
