// Tool (function) calling for /v1/chat/completions: the request's `tools` and `tool_choice`,
// the grammar that makes the model call a tool when the request requires it, and the tool
// calls parsed back out of the generated text.
//
// The wire format between the server and the model is the one Qwen2.5's template teaches
// (Hermes style), which is also what the fallback system prompt asks of other models:
//     <tool_call>
//     {"name": "get_weather", "arguments": {"city": "Paris"}}
//     </tool_call>
// one block per call. tool_choice "required" or a named function constrains the output to
// such blocks (engine/grammar: the arguments follow the function's JSON Schema); "auto"
// leaves the model free and parses whatever blocks it wrote; "none" neither parses nor
// constrains (the tools still reach the template, as OpenAI describes them to the model).
#pragma once
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::server {

struct ToolSpec {
  std::string name, description;
  std::string parameters;  // a JSON Schema (JSON text); "{}" when the tool gave none
};

enum class ToolChoiceKind { None, Auto, Required, Named };

struct ToolRequest {
  std::vector<ToolSpec> tools;
  ToolChoiceKind choice = ToolChoiceKind::Auto;
  std::string named;              // Named: the function to call
  bool parallel = true;           // parallel_tool_calls: more than one call allowed
  boost::json::array tools_json;  // as given (OpenAI's shape), for the chat template
  bool parse_output() const { return choice != ToolChoiceKind::None; }
};

// `tools`, `tool_choice` and `parallel_tool_calls` of a chat request; nullopt without tools.
// Throws ApiError (400) for malformed tools, a tool_choice naming no given tool, or
// tool_choice "required"/named without tools. The legacy `functions` is refused.
std::optional<ToolRequest> parse_tools(const boost::json::object& body);

// The GBNF that admits only tool-call blocks (one, or several when parallel) for the
// functions tool_choice allows, each with arguments valid against its schema; "" when the
// choice leaves the model free (auto, none). Throws ApiError (400) naming the tool whose
// parameters use JSON Schema the grammar cannot express.
std::string tool_call_grammar(const ToolRequest& t);

// A system message describing the tools and the call format, for chat templates that do not
// render `tools` themselves.
std::string tools_system_prompt(const ToolRequest& t);

struct ToolCall {
  std::string id;         // "call_" + 24 hex digits
  std::string name;
  std::string arguments;  // JSON text of the arguments object
};

struct ToolOutput {
  std::string content;  // the text outside the call blocks (trimmed)
  std::vector<ToolCall> calls;
};

// Splits generated text into content and tool calls. A block that is not a JSON object with
// a string "name" (and an object "arguments", or none) stays in the content, as do calls to
// functions outside `allowed` (when it is not empty).
ToolOutput parse_tool_calls(std::string_view text, const std::vector<ToolSpec>& allowed = {});

// Streaming: text is passed on as it comes until a call block may be starting; from there
// everything is held for parse_tool_calls at the end. push() returns the content that is
// safe to send now.
class ToolStreamFilter {
 public:
  std::string push(std::string_view piece);
  // The rest: content not sent yet, and the calls.
  ToolOutput finish(const std::vector<ToolSpec>& allowed = {});

 private:
  std::string held_;     // not yet sent
  std::string sent_;     // sent as content
  bool in_call_ = false;
};

}  // namespace tandem::server
