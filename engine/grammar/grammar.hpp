// A context-free grammar in GBNF (the grammar text format of llama.cpp's `grammar` field,
// which apps already write), compiled to a pushdown automaton over Unicode code points.
//
// Representation: every rule is a list of alternatives; an alternative is a flat run of
// elements in `elems` ending with End. An element matches one code point (a character
// class) or calls a rule. Groups, `*`, `+`, `?` and `{m,n}` are rewritten into generated
// rules by the parser (gbnf_parser.cpp), so the automaton knows only those three elements.
//
// A parse in progress is a *stack*: the element to match next (always a character class)
// above the positions to return to when the rules called so far end. Stacks are interned
// (StackPool): equal stacks get equal ids, so a set of stacks — the automaton's state, since
// a grammar may be ambiguous — is a sorted vector of ids, cheap to compare and to hash (the
// token masks are cached by it, token_grammar.hpp). A call in tail position pushes nothing,
// so `x*` (a right-recursive rule) runs in constant stack depth.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tandem {

// Bad grammar text: the message starts with "line:col: ".
struct GrammarError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

struct CharClass {
  bool negated = false;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive code point ranges
  bool matches(uint32_t cp) const;
  bool intersects(uint32_t lo, uint32_t hi) const;  // some code point in [lo, hi] matches
};

enum class ElemKind : uint8_t { End, Chars, Rule };
struct Elem {
  ElemKind kind;
  uint32_t arg;  // Chars: index into classes; Rule: rule id
};

// Where parsing stands between bytes: the live stacks, and the UTF-8 bytes of a code point
// read only in part (utf8_left > 0: that many continuation bytes still to come).
struct GrammarState {
  std::vector<uint32_t> stacks;  // sorted, unique; id 0 is the empty stack (the root rule ended)
  uint32_t utf8_acc = 0;
  uint8_t utf8_left = 0;
  uint8_t utf8_len = 0;  // the code point's length in bytes (while utf8_left > 0)
  bool dead() const { return stacks.empty(); }
  bool operator==(const GrammarState&) const = default;
};

class Grammar {
 public:
  // Throws GrammarError for bad text, unknown or missing rules (root included), and rules
  // that can call themselves before matching anything (left recursion: the automaton would
  // never stop expanding them).
  static std::shared_ptr<const Grammar> parse(std::string_view gbnf, std::string_view root = "root");

  // The state before any text.
  GrammarState initial() const;
  // The state after one more byte (dead when the text so far is no prefix of a sentence).
  GrammarState advance(const GrammarState& s, uint8_t byte) const;
  void advance_in_place(GrammarState& s, std::string_view bytes) const;
  // The text read so far is a whole sentence (the root rule may end here).
  static bool accepting(const GrammarState& s) { return s.utf8_left == 0 && !s.stacks.empty() && s.stacks[0] == 0; }
  // ... and nothing may follow it.
  static bool complete(const GrammarState& s) { return accepting(s) && s.stacks.size() == 1; }
  // Whether the whole text is a sentence of the grammar.
  bool accepts(std::string_view text) const;

  // For the parser (gbnf_parser.cpp): the grammar under construction.
  struct Builder;

 private:
  Grammar() = default;
  struct Frame {
    uint32_t pos, parent;
  };
  // Pushes onto `out` every stack that continues at element `pos` above stack `parent`,
  // with a character class on top (or the empty stack, where the grammar ends).
  // Each (pos, parent) is expanded once per step (`expanded_`): its stacks are the same every
  // time, and a grammar like `(("a"+)+)+` reaches the same place along exponentially many
  // paths.
  void expand(uint32_t pos, uint32_t parent, std::vector<uint32_t>& out, int depth) const;
  void begin_expansion() const;
  uint32_t intern(uint32_t pos, uint32_t parent) const;
  Frame frame(uint32_t id) const;
  void step_code_point(const std::vector<uint32_t>& in, uint32_t cp, std::vector<uint32_t>& out) const;

  std::vector<Elem> elems_;
  std::vector<CharClass> classes_;
  std::vector<std::vector<uint32_t>> rule_alts_;  // rule id → start positions of its alternatives
  std::vector<std::string> rule_names_;
  uint32_t root_ = 0;

  // The stack pool: frames by id (id 0 is the empty stack), and the index that interns them.
  // Shared by every request using this grammar (the scheduler thread, and C API threads), so
  // guarded; states only ever hold ids, so the pool only grows.
  mutable std::mutex mu_;
  mutable std::vector<Frame> frames_;
  mutable std::unordered_map<uint64_t, uint32_t> frame_index_;
  // The (pos, parent) pairs expanded in the current step (bounded: kMaxExpansions). Open
  // addressing with a step stamp per slot, so starting a step costs nothing.
  struct ExpansionSet {
    struct Slot {
      uint64_t key;
      uint32_t stamp;
    };
    std::vector<Slot> slots;
    uint32_t stamp = 1;  // slots start at 0: empty
    size_t count = 0;
    void clear();
    bool insert(uint64_t key);  // false if already there this step
  };
  mutable ExpansionSet expanded_;
};

}  // namespace tandem
