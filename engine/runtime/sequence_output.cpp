#include "engine/runtime/sequence_output.hpp"

#include <algorithm>

namespace tandem {

SequenceOutput::SequenceOutput(const Tokenizer& tok, const GenerateOptions& opts, StreamEventCallback cb,
                               std::span<const int32_t> prompt, Clock::time_point start)
    : tok_(tok),
      ignore_eos_(opts.ignore_eos),
      stop_token_ids_(opts.stop_token_ids),
      max_tokens_(opts.max_tokens),
      prompt_logprobs_pending_(opts.prompt_logprobs >= 0),
      cb_(std::move(cb)),
      decoder_(tok),
      stops_(opts.stop),
      start_(start) {
  res_.prompt_tokens.assign(prompt.begin(), prompt.end());
  res_.timings.n_prompt = static_cast<int32_t>(prompt.size());
  std::sort(stop_token_ids_.begin(), stop_token_ids_.end());
}

bool SequenceOutput::ends_output(int32_t token) const {
  return (!ignore_eos_ && tok_.is_eog(token)) ||
         std::binary_search(stop_token_ids_.begin(), stop_token_ids_.end(), token);
}

bool SequenceOutput::push(int32_t token, const TokenLogprobs* lp) {
  res_.tokens.push_back(token);
  if (ends_output(token)) {
    res_.finish = FinishReason::Stop;
    return false;
  }
  if (!emit(stops_.push(decoder_.push(token)), token, lp)) {
    res_.finish = FinishReason::Cancelled;
    return false;
  }
  if (stops_.stopped()) {
    res_.finish = FinishReason::Stop;
    res_.stop_string = stops_.matched();
    return false;
  }
  return true;
}

void SequenceOutput::start_decoding() {
  first_token_ = Clock::now();
  res_.timings.prefill_ms = ms_between(start_, first_token_);
}

bool SequenceOutput::emit(const std::string& text, int32_t token, const TokenLogprobs* lp) {
  res_.text += text;
  StreamEvent ev{text, token, lp};
  if (prompt_logprobs_pending_) {
    ev.prompt_logprobs = &res_.prompt_logprobs;
    prompt_logprobs_pending_ = false;
  }
  return !cb_ || cb_(ev);
}

void SequenceOutput::close() {
  if (res_.finish != FinishReason::Cancelled && !stops_.stopped()) {
    std::string tail = stops_.push(decoder_.flush());
    tail += stops_.flush();
    if (!tail.empty()) emit(tail, res_.tokens.empty() ? -1 : res_.tokens.back(), nullptr);
  }
  res_.timings.n_generated = static_cast<int32_t>(res_.tokens.size());
  if (!res_.tokens.empty()) res_.timings.decode_ms = ms_between(first_token_, Clock::now());
}

}  // namespace tandem
