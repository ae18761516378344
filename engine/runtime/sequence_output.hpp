// What a run gives its client: the output tokens as they are committed, their text through
// the streaming detokenizer and the stop strings, the stream callback, each token's logprobs,
// and the finish reason and timings: the GenerateResult. SequenceRun decides which tokens
// are committed; this part decides when the output, as the client sees it, is over.
#pragma once
#include <span>
#include <string>
#include <vector>

#include "engine/base/clock.hpp"
#include "engine/text/stop_strings.hpp"
#include "engine/text/tokenizer.hpp"
#include "tandem/generation.hpp"

namespace tandem {

class SequenceOutput {
 public:
  SequenceOutput(const Tokenizer& tok, const GenerateOptions& opts, StreamEventCallback cb,
                 std::span<const int32_t> prompt, Clock::time_point start);

  // One more output token and its logprobs (null when not asked for): its text goes out.
  // False once the output is over: an end-of-generation token (unless ignore_eos) or one of
  // the stop token ids, a stop string in the text, or the client cancelling (the stream callback returned false); the
  // finish reason is then set.
  bool push(int32_t token, const TokenLogprobs* lp);
  // Whether max_tokens are out.
  bool full() const { return static_cast<int32_t>(res_.tokens.size()) >= max_tokens_; }
  // The first step's tokens come now: the prefill's time ends here.
  void start_decoding();
  // Sends the text still held back (unless cancelled or stopped) and closes the timings.
  void close();

  GenerateResult& result() { return res_; }
  const GenerateResult& result() const { return res_; }
  size_t generated() const { return res_.tokens.size(); }

 private:
  bool emit(const std::string& text, int32_t token, const TokenLogprobs* lp);
  bool ends_output(int32_t token) const;

  const Tokenizer& tok_;
  bool ignore_eos_;
  std::vector<int32_t> stop_token_ids_;  // sorted
  int32_t max_tokens_;
  bool prompt_logprobs_pending_;  // the first event is still to bring the prompt's logprobs
  StreamEventCallback cb_;
  StreamDecoder decoder_;
  StopMatcher stops_;
  GenerateResult res_;
  Clock::time_point start_, first_token_{};
};

}  // namespace tandem
