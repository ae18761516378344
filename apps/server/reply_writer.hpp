// The reply of a request made through an API other than OpenAI's Chat Completions: OpenAI's
// Responses API (responses_api.hpp) and Anthropic's Messages API (anthropic_api.hpp). Such a
// request is translated into a chat request (the same template, sampling, speculation, tools
// and constraints), generated as one choice by the chat machinery (generation.cpp), and its
// output written by a ReplyWriter in its own API's shape: the streamed events, the final body
// and the errors.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "apps/server/api_error.hpp"
#include "apps/server/openai_protocol.hpp"
#include "apps/server/tool_calls.hpp"

namespace tandem::server {

// One finished reply: its text outside tool calls, the calls, why it ended, the token counts.
struct ReplyInfo {
  std::string text;
  std::vector<ToolCall> calls;
  FinishReason finish = FinishReason::Stop;
  std::string stop_string;  // the stop sequence that ended it ("" for none)
  bool timed_out = false;   // a server limit cut it short
  Usage usage;
};

class ReplyWriter {
 public:
  virtual ~ReplyWriter() = default;
  // Server-sent events: before any text (prompt_tokens known), a piece of text, and the end
  // (the rest of the events, the stream closed after them).
  virtual std::string stream_start(int64_t prompt_tokens) = 0;
  virtual std::string stream_text(std::string_view delta) = 0;
  virtual std::string stream_end(const ReplyInfo& r) = 0;
  // The whole reply as one JSON body.
  virtual std::string body(const ReplyInfo& r) = 0;
  // An error in this API's shape: as a response, and as the stream's last event.
  virtual HttpResponse error(const ApiError& e) const = 0;
  virtual std::string stream_error(const ApiError& e) const = 0;
  virtual const char* api() const = 0;  // for the log line
};

// "event: <name>\ndata: <json>\n\n".
std::string named_event(std::string_view name, std::string_view data);

}  // namespace tandem::server
