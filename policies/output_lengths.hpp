// How long outputs run, learnt from those that finished: the estimate of the tokens a
// sequence still has to generate that the adaptive policies start the draft on.
//
// A request's max_tokens is a limit, not a length: a code completion that ends after one
// line, or a short answer, stops long before it. A policy that takes the limit for the length
// starts the draft (paying its pass over the prompt) for gains over tokens that never come,
// and such an output runs slower than plain decoding. The lengths of the outputs this engine
// finished are the evidence there is: a sequence that has generated g tokens is expected to
// generate what the finished outputs that ran past g generated after g (at most its own
// limit), averaged, with the limit itself counted as one more such output so that a few
// short outputs lower the estimate without ever ruling out a long one. Outputs cut by their
// own limit count as running to the current one (they might have gone on). Without evidence
// the estimate is the limit, as before any output finished.
//
// One tracker is shared by the sequences of an engine (next to the cost model), and kept in
// the cost models' cache file (section "lengths") so that a new `tandem generate` starts from
// what earlier ones saw. Thread-safe.
#pragma once
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "policies/cache_file.hpp"

namespace tandem {

class OutputLengths {
 public:
  // The most recent outputs kept: the estimate follows the workload as it changes.
  static constexpr size_t kKept = 64;

  struct Record {
    int32_t generated = 0;  // tokens the output had when it finished
    bool stopped = false;   // it ended itself (an end token, a stop string, a grammar) before its limit
  };

  // One finished output (not a cancelled one: it says nothing of its length).
  void add(int32_t generated, bool stopped);
  // Tokens expected still to come for a sequence that has generated `generated` of at most
  // `limit` (> generated; 0 otherwise).
  double expected_left(int32_t generated, int32_t limit) const;

  std::vector<Record> records() const;  // oldest first
  void restore(const std::vector<Record>& r);  // the last kKept of them
  void reset();

 private:
  mutable std::mutex mu_;
  std::deque<Record> recent_;
};

// What an OutputLengths saved under `key` in the cache file, or nullopt (no file, no entry,
// or one that is not a list of records).
std::optional<std::vector<OutputLengths::Record>> load_cached_output_lengths(const std::string& path,
                                                                             const std::string& key);
// Saves `r` under `key`, dropping the entries of other keys `keep` refuses; throws
// std::runtime_error when the file cannot be written.
void save_cached_output_lengths(const std::string& path, const std::string& key,
                                const std::vector<OutputLengths::Record>& r, const CacheKeyFilter& keep = {});

}  // namespace tandem
