// OpenAI's Responses API and Anthropic's Messages API as the server takes them: translated into
// the chat request they mean (then parsed like any chat request), and their replies written in
// each API's shape. tests/python/other_apis_cases.py drives both with the official clients.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "apps/server/anthropic_api.hpp"
#include "apps/server/responses_api.hpp"

namespace tandem::server {
namespace {
namespace json = boost::json;

json::object chat_of(const std::string& text) { return json::parse(text).as_object(); }

ApiError error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return ApiError(0, "", "");
}

TEST(ResponsesApi, InputInstructionsToolsAndFormatBecomeTheChatRequest) {
  const json::object c = chat_of(responses_to_chat(R"({
    "model": "m", "instructions": "Be brief.", "max_output_tokens": 50, "temperature": 0.2, "stream": true,
    "input": [
      {"role": "user", "content": [{"type": "input_text", "text": "Weather "}, {"type": "input_text", "text": "in Paris?"}]},
      {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
      {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "18 C"},
      {"role": "developer", "content": "Use Celsius."}],
    "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": true}],
    "tool_choice": {"type": "function", "name": "get_weather"},
    "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": true}}})"));
  const json::array& m = c.at("messages").as_array();
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].at("role"), "system");
  EXPECT_EQ(m[0].at("content"), "Be brief.");
  EXPECT_EQ(m[1].at("content"), "Weather in Paris?");
  // The two calls of one turn: one assistant message.
  EXPECT_EQ(m[2].at("role"), "assistant");
  ASSERT_EQ(m[2].at("tool_calls").as_array().size(), 2u);
  EXPECT_EQ(m[2].at("tool_calls").at(1).at("function").at("name"), "get_time");
  EXPECT_EQ(m[3].at("role"), "tool");
  EXPECT_EQ(m[3].at("tool_call_id"), "call_1");
  EXPECT_EQ(m[4].at("role"), "system");  // developer
  EXPECT_EQ(c.at("max_completion_tokens").as_int64(), 50);
  EXPECT_EQ(c.at("stream"), true);
  EXPECT_EQ(c.at("tools").at(0).at("function").at("name"), "get_weather");
  EXPECT_EQ(c.at("tool_choice").at("function").at("name"), "get_weather");
  EXPECT_EQ(c.at("response_format").at("type"), "json_schema");
  EXPECT_EQ(c.at("response_format").at("json_schema").at("name"), "w");
  EXPECT_EQ(chat_of(responses_to_chat(R"({"input": "hi"})")).at("messages").at(0).at("content"), "hi");
}

TEST(ResponsesApi, WhatItCannotHonourIsA400NamingTheField) {
  struct Case {
    const char* body;
    const char* param;
  };
  for (const Case& c : {Case{R"({"model": "m"})", "input"}, Case{R"({"input": 5})", "input"},
                        Case{R"({"input": []})", "input"}, Case{R"({"input": "x", "previous_response_id": "r"})", "previous_response_id"},
                        Case{R"({"input": "x", "tools": [{"type": "web_search"}]})", "tools"},
                        Case{R"({"input": [{"type": "input_image", "image_url": "u"}]})", "input"},
                        Case{R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})", "input"},
                        Case{R"({"input": "x", "text": {"format": {"type": "xml"}}})", "text.format"},
                        Case{R"({"input": "x", "tool_choice": 3})", "tool_choice"}, Case{"[1]", ""}, Case{"{", ""}}) {
    const ApiError e = error_of([&] { responses_to_chat(c.body); });
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
  }
}

TEST(ResponsesApi, TheReplyIsAResponseObjectWithItsItems) {
  ResponseMeta meta{Endpoint::Chat, "x", 1700000000, "smollm2", 7};
  auto w = responses_writer(meta, R"({"input": "x", "max_output_tokens": 9})");
  ReplyInfo r;
  r.text = "Hello";
  r.calls = {ToolCall{"call_abc", "get_time", "{}"}};
  r.usage = Usage{3, 9, {}};
  r.finish = FinishReason::Length;
  const json::object o = json::parse(w->body(r)).as_object();
  EXPECT_EQ(o.at("object"), "response");
  EXPECT_EQ(o.at("status"), "incomplete");
  EXPECT_EQ(o.at("incomplete_details").at("reason"), "max_output_tokens");
  EXPECT_EQ(o.at("max_output_tokens").as_int64(), 9);
  ASSERT_EQ(o.at("output").as_array().size(), 2u);
  EXPECT_EQ(o.at("output").at(0).at("content").at(0).at("text"), "Hello");
  EXPECT_EQ(o.at("output").at(1).at("type"), "function_call");
  EXPECT_EQ(o.at("output").at(1).at("call_id"), "call_abc");
  EXPECT_EQ(o.at("usage").at("total_tokens").as_int64(), 12);
  // Streamed: numbered events from response.created to response.incomplete.
  std::string s = w->stream_start(3) + w->stream_text("Hel") + w->stream_text("lo") + w->stream_end(r);
  EXPECT_EQ(s.rfind("event: response.created\n", 0), 0u);
  EXPECT_NE(s.find("\"sequence_number\":0"), std::string::npos);
  EXPECT_NE(s.find("event: response.function_call_arguments.done"), std::string::npos);
  EXPECT_NE(s.find("event: response.incomplete"), std::string::npos);
  EXPECT_EQ(s.find("event: response.completed"), std::string::npos);
}

TEST(MessagesApi, SystemBlocksToolUseAndToolResultsBecomeTheChatRequest) {
  const json::object c = chat_of(messages_to_chat(R"({
    "model": "m", "max_tokens": 64, "system": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}],
    "stop_sequences": ["END"], "top_k": 5,
    "messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
                                        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18 C"}]}]}],
    "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true}})"));
  const json::array& m = c.at("messages").as_array();
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].at("content"), "Be brief.");
  EXPECT_EQ(m[2].at("content"), "Checking.");
  EXPECT_EQ(json::parse(m[2].at("tool_calls").at(0).at("function").at("arguments").as_string()),
            json::parse(R"({"city":"Paris"})"));
  EXPECT_EQ(m[3].at("role"), "tool");
  EXPECT_EQ(m[3].at("content"), "18 C");
  EXPECT_EQ(c.at("max_completion_tokens").as_int64(), 64);
  EXPECT_EQ(c.at("stop").at(0), "END");
  EXPECT_EQ(c.at("top_k").as_int64(), 5);
  EXPECT_EQ(c.at("tool_choice"), "required");
  EXPECT_EQ(c.at("parallel_tool_calls"), false);
  EXPECT_EQ(c.at("tools").at(0).at("function").at("parameters").at("type"), "object");
}

TEST(MessagesApi, ErrorsTakeAnthropicsShape) {
  for (const char* body : {R"({"messages": [{"role": "user", "content": "x"}]})", R"({"max_tokens": 5, "messages": []})",
                           R"({"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]})",
                           R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image"}]}]})",
                           R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "bash_20250124", "name": "bash"}]})"}) {
    const ApiError e = error_of([&] { messages_to_chat(body); });
    EXPECT_EQ(e.status, 400) << body;
    const HttpResponse r = anthropic_error_response(e);
    EXPECT_EQ(r.status, 400);
    const json::object o = json::parse(r.body).as_object();
    EXPECT_EQ(o.at("type"), "error");
    EXPECT_EQ(o.at("error").at("type"), "invalid_request_error");
    EXPECT_FALSE(o.at("error").at("message").as_string().empty());
  }
  EXPECT_EQ(json::parse(anthropic_error_response(unauthorized()).body).at("error").at("type"), "authentication_error");
  EXPECT_EQ(json::parse(anthropic_error_response(model_not_found("x")).body).at("error").at("type"), "not_found_error");
}

TEST(MessagesApi, TheReplyIsAMessageWithItsStopReason) {
  ResponseMeta meta{Endpoint::Chat, "x", 1, "smollm2", 7};
  auto w = messages_writer(meta);
  ReplyInfo r;
  r.text = "Paris";
  r.stop_string = "END";
  r.usage = Usage{4, 2, {}};
  json::object o = json::parse(w->body(r)).as_object();
  EXPECT_EQ(o.at("type"), "message");
  EXPECT_EQ(o.at("stop_reason"), "stop_sequence");
  EXPECT_EQ(o.at("stop_sequence"), "END");
  EXPECT_EQ(o.at("content").at(0).at("text"), "Paris");
  EXPECT_EQ(o.at("usage").at("output_tokens").as_int64(), 2);
  r.stop_string.clear();
  EXPECT_EQ(json::parse(w->body(r)).at("stop_reason"), "end_turn");
  r.finish = FinishReason::Length;
  EXPECT_EQ(json::parse(w->body(r)).at("stop_reason"), "max_tokens");
  r.calls = {ToolCall{"call_x1", "get_time", R"({"zone":"UTC"})"}};
  o = json::parse(w->body(r)).as_object();
  EXPECT_EQ(o.at("stop_reason"), "tool_use");
  EXPECT_EQ(o.at("content").at(1).at("type"), "tool_use");
  EXPECT_EQ(o.at("content").at(1).at("id"), "toolu_x1");
  EXPECT_EQ(o.at("content").at(1).at("input").at("zone"), "UTC");
  const std::string s = w->stream_start(4) + w->stream_text("Par") + w->stream_end(r);
  for (const char* e : {"event: message_start", "event: content_block_start", "event: content_block_delta",
                        "\"input_json_delta\"", "event: message_delta", "event: message_stop"})
    EXPECT_NE(s.find(e), std::string::npos) << e;
}

}  // namespace
}  // namespace tandem::server
