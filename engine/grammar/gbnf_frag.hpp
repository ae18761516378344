// GBNF expressions built up piece by piece, knowing what composing them needs: whether one
// needs parentheses, whether it can match the empty string, and which named rules it can
// enter before it has read a character (its left edge: a cycle through left edges is left
// recursion, which the schema converter must refuse).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

struct Frag {
  std::string text;               // GBNF; empty = the empty string
  bool alt = false;               // top-level '|'
  bool atom = true;               // takes a postfix operator as it is
  bool nullable = false;          // can match the empty string
  std::vector<std::string> left;  // named rules on its left edge

  bool empty() const { return text.empty(); }
};

// A literal already spelled for GBNF (gbnf_literal), a character class, and so on: one atom
// that reads at least one character.
Frag atom(std::string text);
// A reference to a named rule: an atom whose left edge is that rule.
Frag ref(std::string name, bool nullable);
// The empty string.
inline Frag epsilon() { return Frag{"", false, true, true, {}}; }

Frag seq(std::vector<Frag> parts);
// Alternatives; an empty one among them makes the rest optional instead. Needs at least one.
Frag alt(std::vector<Frag> parts);
Frag opt(const Frag& f);
// f followed by a postfix operator: "*", "+", "{3}", "{0,5}".
Frag repeat(const Frag& f, std::string_view op);
// f repeated min..max times (max < 0: unbounded), spelled with the shortest operator.
Frag repeat(const Frag& f, long long min, long long max);

}  // namespace tandem
