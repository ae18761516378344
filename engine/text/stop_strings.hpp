// Finds stop strings in streamed text. Text that could still turn out to be the start of a
// stop string is held back, so a client never receives part of a stop string.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Feeds newly decoded text. Returns the text that is now safe to emit; sets stopped()
  // when a stop string appeared (the text before it is emitted, the rest dropped).
  std::string push(std::string_view text);
  // Everything still held back (at the end of generation, when no stop string came).
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that appeared ("" until one did); of several at the same place, the
  // first given.
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  std::string matched_;
  bool stopped_ = false;
};

}  // namespace tandem
