// The pushdown automaton of grammar.hpp: expanding stacks until a character class is on top,
// and stepping every live stack over one code point (bytes are gathered into code points
// first; while one is incomplete, only the stacks whose class can still match it live on).
#include "engine/grammar/grammar.hpp"

#include <algorithm>

namespace tandem {
namespace {
// A state with more live stacks than this means a grammar so ambiguous that masks would cost
// too much to compute (a mask costs about its stacks times the vocabulary's trie); such a
// request fails cleanly instead of stalling the batch. Real grammars, JSON schemas' included,
// keep a handful alive; `("aa" | "a" | ""){4,580}` kept 580 and took a second of masks over
// a 266-token vocabulary (a fuzz_grammar finding).
constexpr size_t kMaxStacks = 512;
// Calls nested this deep before a character (a long chain of rules that start with rules).
constexpr int kMaxExpandDepth = 2000;
// Distinct places expanded in one step. Each is visited once, so this bounds a step's work;
// real grammars (JSON schemas included) stay in the hundreds.
constexpr size_t kMaxExpansions = 1 << 16;

void sort_unique(std::vector<uint32_t>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}
}  // namespace

bool CharClass::matches(uint32_t cp) const {
  bool in = false;
  for (const auto& [lo, hi] : ranges)
    if (cp >= lo && cp <= hi) {
      in = true;
      break;
    }
  return in != negated;
}

bool CharClass::intersects(uint32_t lo, uint32_t hi) const {
  if (!negated) {
    for (const auto& [a, b] : ranges)
      if (a <= hi && b >= lo) return true;
    return false;
  }
  // Negated: some code point of [lo, hi] lies outside every range. Walk the ranges in order
  // of start, advancing the first candidate past each range that covers it.
  std::vector<std::pair<uint32_t, uint32_t>> rs = ranges;
  std::sort(rs.begin(), rs.end());
  uint64_t cand = lo;
  for (const auto& [a, b] : rs) {
    if (a > cand) break;
    if (b >= cand) cand = static_cast<uint64_t>(b) + 1;
  }
  return cand <= hi;
}

Grammar::Frame Grammar::frame(uint32_t id) const { return frames_[id]; }

uint32_t Grammar::intern(uint32_t pos, uint32_t parent) const {
  const uint64_t key = (static_cast<uint64_t>(pos) << 32) | parent;
  auto [it, fresh] = frame_index_.try_emplace(key, static_cast<uint32_t>(frames_.size()));
  if (fresh) frames_.push_back({pos, parent});
  return it->second;
}

void Grammar::ExpansionSet::clear() {
  count = 0;
  if (++stamp == 0) {  // the stamps wrapped: forget every slot for real
    for (Slot& sl : slots) sl.stamp = 0;
    stamp = 1;
  }
}

bool Grammar::ExpansionSet::insert(uint64_t key) {
  if (2 * (count + 1) > slots.size()) {
    // Grow, keeping this step's keys.
    std::vector<Slot> old(std::max<size_t>(64, 2 * slots.size()), Slot{0, 0});
    old.swap(slots);
    count = 0;
    for (const Slot& sl : old)
      if (sl.stamp == stamp) insert(sl.key);
  }
  const size_t mask = slots.size() - 1;
  for (size_t i = ((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;; i = (i + 1) & mask) {
    Slot& sl = slots[i];
    if (sl.stamp != stamp) {
      sl = {key, stamp};
      ++count;
      return true;
    }
    if (sl.key == key) return false;
  }
}

void Grammar::begin_expansion() const { expanded_.clear(); }

void Grammar::expand(uint32_t pos, uint32_t parent, std::vector<uint32_t>& out, int depth) const {
  if (depth > kMaxExpandDepth) throw std::runtime_error("grammar: rules nested too deeply to expand");
  const Elem& e = elems_[pos];
  if (e.kind == ElemKind::Chars) {
    out.push_back(intern(pos, parent));
    return;
  }
  if (!expanded_.insert((static_cast<uint64_t>(pos) << 32) | parent)) return;
  if (expanded_.count > kMaxExpansions)
    throw std::runtime_error("grammar: more than " + std::to_string(kMaxExpansions) +
                             " places to expand in one step (the grammar is too ambiguous)");
  switch (e.kind) {
    case ElemKind::Chars:
      return;
    case ElemKind::End:
      // This alternative is over: go on where the rule was called (or the grammar ends).
      if (parent == 0) {
        out.push_back(0);
      } else {
        const Frame f = frame(parent);
        expand(f.pos, f.parent, out, depth + 1);
      }
      return;
    case ElemKind::Rule: {
      // The place to return to; a call in tail position returns straight to our caller.
      const uint32_t next = pos + 1;
      const uint32_t ret = elems_[next].kind == ElemKind::End ? parent : intern(next, parent);
      for (uint32_t start : rule_alts_[e.arg]) expand(start, ret, out, depth + 1);
      return;
    }
  }
}

GrammarState Grammar::initial() const {
  std::lock_guard<std::mutex> lk(mu_);
  GrammarState s;
  begin_expansion();
  for (uint32_t start : rule_alts_[root_]) expand(start, 0, s.stacks, 0);
  sort_unique(s.stacks);
  return s;
}

void Grammar::step_code_point(const std::vector<uint32_t>& in, uint32_t cp, std::vector<uint32_t>& out) const {
  out.clear();
  begin_expansion();
  for (uint32_t id : in) {
    if (id == 0) continue;  // the grammar has ended on this stack: nothing more may come
    const Frame f = frame(id);
    if (!classes_[elems_[f.pos].arg].matches(cp)) continue;
    expand(f.pos + 1, f.parent, out, 0);
  }
  sort_unique(out);
  if (out.size() > kMaxStacks)
    throw std::runtime_error("grammar: more than " + std::to_string(kMaxStacks) +
                             " parses alive at once (the grammar is too ambiguous)");
}

GrammarState Grammar::advance(const GrammarState& s, uint8_t b) const {
  GrammarState r = s;
  advance_in_place(r, std::string_view(reinterpret_cast<const char*>(&b), 1));
  return r;
}

void Grammar::advance_in_place(GrammarState& s, std::string_view bytes) const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<uint32_t> next;
  for (char ch : bytes) {
    if (s.stacks.empty()) return;
    const auto b = static_cast<uint8_t>(ch);
    uint32_t lo = 0, hi = 0;
    if (s.utf8_left == 0) {
      if (b < 0x80) {
        step_code_point(s.stacks, b, next);
        s.stacks.swap(next);
        continue;
      }
      // A lead byte: the code point's bits so far and how many bytes are still to come.
      // (C0, C1 and F5.. never occur in UTF-8; nor do continuation bytes here.)
      if (b >= 0xC2 && b <= 0xDF) {
        s.utf8_acc = b & 0x1Fu;
        s.utf8_left = 1;
      } else if (b >= 0xE0 && b <= 0xEF) {
        s.utf8_acc = b & 0x0Fu;
        s.utf8_left = 2;
      } else if (b >= 0xF0 && b <= 0xF4) {
        s.utf8_acc = b & 0x07u;
        s.utf8_left = 3;
      } else {
        s.stacks.clear();
        return;
      }
      s.utf8_len = static_cast<uint8_t>(s.utf8_left + 1);
    } else {
      if ((b & 0xC0) != 0x80) {
        s.stacks.clear();
        s.utf8_left = 0;
        return;
      }
      s.utf8_acc = (s.utf8_acc << 6) | (b & 0x3Fu);
      --s.utf8_left;
    }
    // The code points this many bytes may spell (shorter spellings and surrogates are no UTF-8).
    const uint32_t min_cp = s.utf8_len == 2 ? 0x80 : s.utf8_len == 3 ? 0x800 : 0x10000;
    const uint32_t max_cp = s.utf8_len == 2 ? 0x7FF : s.utf8_len == 3 ? 0xFFFF : 0x10FFFF;
    // The code points that start with these bits.
    lo = s.utf8_acc << (6 * s.utf8_left);
    hi = lo | ((1u << (6 * s.utf8_left)) - 1);
    lo = std::max(lo, min_cp);
    hi = std::min(hi, max_cp);
    const bool surrogates = s.utf8_len == 3 && lo >= 0xD800 && hi <= 0xDFFF;
    if (lo > hi || surrogates) {
      s.stacks.clear();
      s.utf8_left = 0;
      return;
    }
    if (s.utf8_left == 0) {
      const uint32_t cp = s.utf8_acc;
      s.utf8_acc = 0;
      s.utf8_len = 0;
      step_code_point(s.stacks, cp, next);
      s.stacks.swap(next);
      continue;
    }
    // Incomplete: keep the stacks whose class matches some code point with these leading bits.
    next.clear();
    for (uint32_t id : s.stacks)
      if (id != 0 && classes_[elems_[frame(id).pos].arg].intersects(lo, hi)) next.push_back(id);
    s.stacks.swap(next);
  }
}

bool Grammar::accepts(std::string_view text) const {
  GrammarState s = initial();
  advance_in_place(s, text);
  return accepting(s);
}

}  // namespace tandem
