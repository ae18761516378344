// GBNF text → the rules of a Grammar (grammar.hpp).
//
//   rule     ::= name "::=" alts            (names: [a-zA-Z0-9_-]+; "root" starts)
//   alts     ::= seq ("|" seq)*
//   seq      ::= (primary postfix*)*
//   primary  ::= "literal" | [class] | [^class] | "." | name | "(" alts ")"
//   postfix  ::= "*" | "+" | "?" | "{" m "}" | "{" m ",}" | "{" m "," n "}"
//   "#" starts a comment to the end of the line.
//
// Newlines are plain white space here: a rule ends where the next one begins (a name followed
// by "::="), so alternatives may continue on the next line. Escapes in literals and classes:
// \n \r \t \\ \" \' \[ \] \- \^ \/ \xHH \uHHHH \UHHHHHHHH.
//
// Groups and repetitions become generated rules ("<rule>-<n>"): X* is R ::= X R | ε (the call
// to R is in tail position, so repetition costs no stack), X+ is X X*, X? is R ::= X | ε, and
// X{m,n} is m copies of X and then n−m nested optional ones.
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <optional>

#include "engine/grammar/grammar.hpp"

namespace tandem {

struct Grammar::Builder {
  Builder(Grammar& grammar, std::string_view text) : g(grammar), src(text) {}
  Grammar& g;
  std::string_view src;
  size_t pos = 0;
  std::map<std::string, uint32_t, std::less<>> ids;  // rule name → id
  std::vector<std::vector<std::vector<Elem>>> bodies;  // rule → alternatives → elements
  std::vector<bool> defined;
  std::vector<size_t> first_use;  // where an undefined rule was first named

  // Limits that keep a hostile grammar (the server takes them from requests) small.
  static constexpr size_t kMaxRules = 20000;
  static constexpr uint32_t kMaxRepeat = 1000;
  static constexpr int kMaxNesting = 100;

  [[noreturn]] void fail(const std::string& what, size_t at) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < src.size(); ++i) {
      if (src[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw GrammarError(std::to_string(line) + ":" + std::to_string(col) + ": " + what);
  }

  bool at_end() const { return pos >= src.size(); }
  char peek(size_t ahead = 0) const { return pos + ahead < src.size() ? src[pos + ahead] : '\0'; }

  void skip_space() {
    while (!at_end()) {
      const char c = peek();
      if (c == '#') {
        while (!at_end() && peek() != '\n') ++pos;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos;
      } else {
        break;
      }
    }
  }

  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  }

  std::string_view read_name() {
    const size_t start = pos;
    while (!at_end() && name_char(peek())) ++pos;
    if (pos == start) fail("expected a rule name", start);
    return src.substr(start, pos - start);
  }

  // Whether a rule definition ("name ::=") starts here.
  bool rule_starts_here() const {
    size_t p = pos;
    while (p < src.size() && name_char(src[p])) ++p;
    if (p == pos) return false;
    while (p < src.size() && (src[p] == ' ' || src[p] == '\t')) ++p;
    return src.substr(p, 3) == "::=";
  }

  uint32_t rule_id(std::string_view name, size_t at) {
    auto it = ids.find(name);
    if (it != ids.end()) return it->second;
    return new_rule(std::string(name), at);
  }

  // named: a rule the text names (looked up by name); generated rules (groups, repetitions)
  // are not, so no rule of the text can clash with one, whatever it is called.
  uint32_t new_rule(std::string name, size_t at, bool named = true) {
    if (bodies.size() >= kMaxRules) fail("more than " + std::to_string(kMaxRules) + " rules", at);
    const auto id = static_cast<uint32_t>(bodies.size());
    if (named) ids.emplace(name, id);
    g.rule_names_.push_back(std::move(name));
    bodies.emplace_back();
    defined.push_back(false);
    first_use.push_back(at);
    return id;
  }

  // The alternatives without repeats (`"" | "" | "a"`): a repeated alternative adds no
  // sentence, only parses the automaton would keep apart.
  static std::vector<std::vector<Elem>> unique_alternatives(std::vector<std::vector<Elem>> alts) {
    std::vector<std::vector<Elem>> out;
    auto same = [](const std::vector<Elem>& a, const std::vector<Elem>& b) {
      return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                        [](const Elem& x, const Elem& y) { return x.kind == y.kind && x.arg == y.arg; });
    };
    for (auto& a : alts)
      if (std::none_of(out.begin(), out.end(), [&](const std::vector<Elem>& b) { return same(a, b); }))
        out.push_back(std::move(a));
    return out;
  }

  uint32_t generated_rule(uint32_t parent, std::vector<std::vector<Elem>> alts, size_t at) {
    const std::string name = g.rule_names_[parent] + "-" + std::to_string(bodies.size());
    const uint32_t id = new_rule(name, at, /*named=*/false);
    bodies[id] = unique_alternatives(std::move(alts));
    defined[id] = true;
    return id;
  }

  // One UTF-8 code point of the grammar text (literals and classes hold any text).
  uint32_t read_utf8() {
    const size_t start = pos;
    const auto b0 = static_cast<uint8_t>(peek());
    int len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
    if (len == 0) fail("invalid UTF-8 in the grammar", start);
    uint32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1Fu) : len == 3 ? (b0 & 0x0Fu) : (b0 & 0x07u);
    ++pos;
    for (int i = 1; i < len; ++i) {
      const auto b = static_cast<uint8_t>(peek());
      if (at_end() || (b & 0xC0) != 0x80) fail("invalid UTF-8 in the grammar", start);
      cp = (cp << 6) | (b & 0x3Fu);
      ++pos;
    }
    return cp;
  }

  uint32_t read_hex(int digits) {
    uint32_t v = 0;
    const size_t start = pos;
    for (int i = 0; i < digits; ++i) {
      const char c = peek();
      int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (at_end() || d < 0) fail("expected " + std::to_string(digits) + " hex digits", start);
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos;
    }
    if (v > 0x10FFFF) fail("code point beyond U+10FFFF", start);
    return v;
  }

  // One character of a literal or a class, escapes decoded.
  uint32_t read_char() {
    if (at_end()) fail("unexpected end of the grammar", pos);
    if (peek() != '\\') return read_utf8();
    const size_t start = pos++;
    const char e = peek();
    ++pos;
    switch (e) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'x': return read_hex(2);
      case 'u': return read_hex(4);
      case 'U': return read_hex(8);
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': return static_cast<uint8_t>(e);
      default: fail(std::string("unknown escape \\") + e, start);
    }
  }

  uint32_t add_class(CharClass c) {
    g.classes_.push_back(std::move(c));
    return static_cast<uint32_t>(g.classes_.size() - 1);
  }

  std::vector<Elem> read_literal() {
    const size_t start = pos++;  // the opening quote
    std::vector<Elem> out;
    while (true) {
      if (at_end()) fail("unterminated string literal", start);
      if (peek() == '"') {
        ++pos;
        break;
      }
      const uint32_t cp = read_char();
      CharClass c;
      c.ranges.push_back({cp, cp});
      out.push_back({ElemKind::Chars, add_class(std::move(c))});
    }
    return out;
  }

  Elem read_class() {
    const size_t start = pos++;  // '['
    CharClass c;
    if (peek() == '^') {
      c.negated = true;
      ++pos;
    }
    while (true) {
      if (at_end()) fail("unterminated character class", start);
      if (peek() == ']') {
        ++pos;
        break;
      }
      const uint32_t lo = read_char();
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && pos + 1 < src.size()) {
        ++pos;
        hi = read_char();
        if (hi < lo) fail("character range out of order", start);
      }
      c.ranges.push_back({lo, hi});
    }
    return {ElemKind::Chars, add_class(std::move(c))};
  }

  // A repetition just written: `x` repeated min..max times (max < 0: unbounded).
  struct Repetition {
    Elem x;
    uint32_t min;
    int64_t max;
  };

  // One primary as elements (a literal is several; the rest are one). A group that holds
  // a single repetition, like `("a"+)`, is that repetition (`rep` says which), so that an
  // operator after it merges with it as after `"a"+` itself.
  std::vector<Elem> read_primary(uint32_t rule, int nesting, std::optional<Repetition>& rep) {
    rep.reset();
    const size_t start = pos;
    const char c = peek();
    if (c == '"') return read_literal();
    if (c == '[') return {read_class()};
    if (c == '.') {
      ++pos;
      CharClass any;
      any.negated = true;  // matches every code point: nothing is excluded
      return {{ElemKind::Chars, add_class(std::move(any))}};
    }
    if (c == '(') {
      if (nesting >= kMaxNesting) fail("groups nested too deeply", start);
      ++pos;
      std::optional<Repetition> whole;
      auto alts = read_alternatives(rule, nesting + 1, &whole);
      skip_space();
      if (peek() != ')') fail("expected ')'", pos);
      ++pos;
      if (whole) {
        rep = whole;
        return std::move(alts[0]);
      }
      return {{ElemKind::Rule, generated_rule(rule, std::move(alts), start)}};
    }
    if (name_char(c)) {
      const std::string_view name = read_name();
      return {{ElemKind::Rule, rule_id(name, start)}};
    }
    fail(std::string("unexpected '") + c + "'", start);
  }

  uint32_t read_count() {
    const size_t start = pos;
    uint64_t v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + static_cast<uint64_t>(peek() - '0');
      if (v > kMaxRepeat) fail("repetition count above " + std::to_string(kMaxRepeat), start);
      ++pos;
    }
    if (pos == start) fail("expected a repetition count", start);
    return static_cast<uint32_t>(v);
  }

  // `item` repeated min..max times (max < 0: unbounded), as elements. `last` is set to the
  // repetition written.
  std::vector<Elem> repeat(uint32_t rule, std::vector<Elem> item, uint32_t min, int64_t max, size_t at,
                           std::optional<Repetition>& last) {
    // One element to repeat: a literal of several characters becomes a rule first.
    Elem x = item.size() == 1 ? item[0] : Elem{ElemKind::Rule, generated_rule(rule, {item}, at)};
    last = Repetition{x, min, max};
    std::vector<Elem> out(min, x);
    if (max < 0) {
      // R ::= x R | ε
      const uint32_t r = generated_rule(rule, {}, at);
      bodies[r] = {{x, {ElemKind::Rule, r}}, {}};
      out.push_back({ElemKind::Rule, r});
    } else if (max > static_cast<int64_t>(min)) {
      // O_1 ::= x | ε;  O_k ::= x O_{k-1} | ε
      uint32_t o = generated_rule(rule, {{x}, {}}, at);
      for (int64_t k = 2; k <= max - static_cast<int64_t>(min); ++k)
        o = generated_rule(rule, {{x, {ElemKind::Rule, o}}, {}}, at);
      out.push_back({ElemKind::Rule, o});
    }
    if (out.size() > kMaxRepeat + 1) fail("repetition too long", at);
    return out;
  }

  // `whole`, when given, is set if the sequence is one repetition and nothing else.
  std::vector<Elem> read_sequence(uint32_t rule, int nesting, std::optional<Repetition>* whole = nullptr) {
    std::vector<Elem> seq;
    size_t items = 0;
    std::optional<Repetition> last;  // the latest item is this repetition
    while (true) {
      skip_space();
      const char c = peek();
      if (at_end() || c == '|' || c == ')' || (nesting == 0 && rule_starts_here())) break;
      const size_t start = pos;
      std::vector<Elem> item = read_primary(rule, nesting, last);
      ++items;
      // item{min,max}. A repetition of a repetition, like `x++`, `(x*)?` or `x?{300}`, is one
      // repetition of x where that is exact: x{m,n}{a,b} is x{m·a, n·b} when m ≤ 1 and n, b ≥ 1
      // (k copies give from k·m to k·n, and for m ≤ 1 the ranges of consecutive k meet). The
      // stacked form is ambiguous, and its parses multiply with each level or copy.
      auto apply = [&](uint32_t min, int64_t max) {
        if (last && last->min <= 1 && last->max != 0 && max != 0) {
          const int64_t m = last->max < 0 || max < 0 ? -1 : last->max * max;
          if (m <= static_cast<int64_t>(kMaxRepeat)) {
            item = repeat(rule, {last->x}, last->min * min, m, start, last);
            return;
          }
        }
        item = repeat(rule, std::move(item), min, max, start, last);
      };
      while (true) {
        const char p = peek();
        if (p == '*') {
          ++pos;
          apply(0, -1);
        } else if (p == '+') {
          ++pos;
          apply(1, -1);
        } else if (p == '?') {
          ++pos;
          apply(0, 1);
        } else if (p == '{') {
          ++pos;
          skip_space();
          const uint32_t min = read_count();
          int64_t max = min;
          skip_space();
          if (peek() == ',') {
            ++pos;
            skip_space();
            max = peek() == '}' ? -1 : static_cast<int64_t>(read_count());
            skip_space();
          }
          if (peek() != '}') fail("expected '}'", pos);
          ++pos;
          if (max >= 0 && max < static_cast<int64_t>(min)) fail("repetition {m,n} with n < m", start);
          apply(min, max);
        } else {
          break;
        }
      }
      seq.insert(seq.end(), item.begin(), item.end());
      if (seq.size() > 100000) fail("rule too long", start);
    }
    if (whole && items == 1 && last) *whole = last;
    return seq;
  }

  // `whole`, when given, is set if there is one alternative and it is one repetition.
  std::vector<std::vector<Elem>> read_alternatives(uint32_t rule, int nesting,
                                                   std::optional<Repetition>* whole = nullptr) {
    std::vector<std::vector<Elem>> alts;
    std::optional<Repetition> first;
    alts.push_back(read_sequence(rule, nesting, &first));
    while (true) {
      skip_space();
      if (peek() != '|') break;
      ++pos;
      alts.push_back(read_sequence(rule, nesting));
    }
    if (whole && alts.size() == 1 && first) *whole = first;
    return alts;
  }

  void parse_rules() {
    skip_space();
    if (at_end()) fail("empty grammar", 0);
    while (true) {
      skip_space();
      if (at_end()) break;
      const size_t start = pos;
      const std::string_view name = read_name();
      skip_space();
      if (src.substr(pos, 3) != "::=") fail("expected '::=' after rule name '" + std::string(name) + "'", pos);
      pos += 3;
      const uint32_t id = rule_id(name, start);
      if (defined[id]) fail("rule '" + std::string(name) + "' defined twice", start);
      defined[id] = true;
      bodies[id] = unique_alternatives(read_alternatives(id, 0));
      skip_space();
      if (!at_end() && !rule_starts_here()) fail(std::string("unexpected '") + peek() + "'", pos);
    }
  }

  // Left recursion: a rule that can call itself before any character is matched would make
  // the automaton expand forever. Found as a cycle of "may call first" edges.
  void check_left_recursion() const {
    const size_t n = bodies.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const auto& alt : bodies[r]) {
          bool all = std::all_of(alt.begin(), alt.end(),
                                 [&](const Elem& e) { return e.kind == ElemKind::Rule && nullable[e.arg]; });
          if (all) {
            nullable[r] = true;
            changed = true;
            break;
          }
        }
      }
    }
    std::vector<std::vector<uint32_t>> first(n);
    for (size_t r = 0; r < n; ++r)
      for (const auto& alt : bodies[r])
        for (const Elem& e : alt) {
          if (e.kind != ElemKind::Rule) break;
          first[r].push_back(e.arg);
          if (!nullable[e.arg]) break;
        }
    // Iterative DFS with colours (a recursive one could overflow on long rule chains).
    std::vector<uint8_t> colour(n, 0);  // 0 new, 1 on the path, 2 done
    for (size_t s = 0; s < n; ++s) {
      if (colour[s]) continue;
      std::vector<std::pair<uint32_t, size_t>> path{{static_cast<uint32_t>(s), 0}};
      colour[s] = 1;
      while (!path.empty()) {
        auto& [r, i] = path.back();
        if (i == first[r].size()) {
          colour[r] = 2;
          path.pop_back();
          continue;
        }
        const uint32_t next = first[r][i++];
        if (colour[next] == 1)
          throw GrammarError("rule '" + g.rule_names_[next] +
                             "' can repeat or call itself without matching a character (left recursion)");
        if (colour[next] == 0) {
          colour[next] = 1;
          path.push_back({next, 0});
        }
      }
    }
  }

  void finish(std::string_view root) {
    for (size_t r = 0; r < bodies.size(); ++r)
      if (!defined[r]) fail("rule '" + g.rule_names_[r] + "' is not defined", first_use[r]);
    auto it = ids.find(root);
    if (it == ids.end()) throw GrammarError("1:1: the grammar has no rule '" + std::string(root) + "'");
    g.root_ = it->second;
    check_left_recursion();
    g.rule_alts_.resize(bodies.size());
    for (size_t r = 0; r < bodies.size(); ++r)
      for (const auto& alt : bodies[r]) {
        g.rule_alts_[r].push_back(static_cast<uint32_t>(g.elems_.size()));
        g.elems_.insert(g.elems_.end(), alt.begin(), alt.end());
        g.elems_.push_back({ElemKind::End, 0});
      }
  }
};

std::shared_ptr<const Grammar> Grammar::parse(std::string_view gbnf, std::string_view root) {
  std::shared_ptr<Grammar> g(new Grammar());
  Builder b(*g, gbnf);
  b.parse_rules();
  b.finish(root);
  g->frames_.push_back({0, 0});  // id 0: the empty stack
  return g;
}

}  // namespace tandem
