// Random sentences of a grammar, for checking what a grammar lets a model write: a walk
// through the automaton that picks, byte by byte, among the bytes that keep it alive.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "engine/grammar/grammar.hpp"

namespace tandem::test {

// One walk of at most `max_bytes` from the seed: the text if it ended in an accepting state
// (it stops at the first accepting state with probability 1/4, always past half way, and
// past half way it tries the bytes that close strings and containers first), else nullopt.
// The bytes tried: printable ASCII, \t \n \r, a control byte, and U+00E9's two bytes.
std::optional<std::string> random_sentence(const Grammar& g, uint64_t seed, int max_bytes = 300);

}  // namespace tandem::test
