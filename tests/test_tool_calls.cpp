// Tool calling's pure parts (apps/server/tool_calls.hpp): parsing tools and tool_choice,
// the grammar that forces calls (every sentence parses back into valid calls), parsing calls
// out of text, and the streaming filter that holds call blocks back.
#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <random>

#include "apps/server/api_error.hpp"
#include "apps/server/tool_calls.hpp"
#include "engine/grammar/grammar.hpp"

namespace json = boost::json;
using namespace tandem;
using namespace tandem::server;

namespace {

json::object body(const std::string& s) { return json::parse(s).as_object(); }

const char* const kTools = R"({"tools": [
  {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
      "unit": {"enum": ["c", "f"]}}, "required": ["city"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "ping"}}]%s})";

std::string with(const std::string& extra) {
  std::string s = kTools;
  return s.replace(s.find("%s"), 2, extra);
}

std::string error_of(const std::string& b) {
  try {
    parse_tools(body(b));
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ToolCalls, ParsesToolsAndChoices) {
  auto t = parse_tools(body(with("")));
  ASSERT_TRUE(t);
  ASSERT_EQ(t->tools.size(), 2u);
  EXPECT_EQ(t->tools[0].name, "get_weather");
  EXPECT_EQ(t->tools[1].parameters, "{\"type\":\"object\"}");
  EXPECT_EQ(t->choice, ToolChoiceKind::Auto);
  EXPECT_TRUE(t->parallel);
  EXPECT_EQ(parse_tools(body(with(R"(, "tool_choice": "required", "parallel_tool_calls": false)")))->choice,
            ToolChoiceKind::Required);
  auto named = parse_tools(body(with(R"(, "tool_choice": {"type": "function", "function": {"name": "ping"}})")));
  EXPECT_EQ(named->choice, ToolChoiceKind::Named);
  EXPECT_EQ(named->named, "ping");
  EXPECT_FALSE(parse_tools(body(R"({"messages": []})")));
  EXPECT_FALSE(parse_tools(body(R"({"tool_choice": "auto"})")));
}

TEST(ToolCalls, BadToolsAreClear400s) {
  EXPECT_NE(error_of(R"({"tools": {}})").find("'tools' must be an array"), std::string::npos);
  EXPECT_NE(error_of(R"({"tools": [{"type": "retrieval"}]})").find("must be \"function\""), std::string::npos);
  EXPECT_NE(error_of(R"({"tools": [{"type": "function", "function": {"name": "a b"}}]})").find("1-64 characters"),
            std::string::npos);
  EXPECT_NE(error_of(with(R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}})")).find("not among"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"tool_choice": "required"})").find("requires 'tools'"), std::string::npos);
  EXPECT_NE(error_of(R"({"functions": []})").find("deprecated"), std::string::npos);
  EXPECT_NE(error_of(R"({"tools": [{"type": "function", "function": {"name": "a"}},
                                   {"type": "function", "function": {"name": "a"}}]})")
                .find("two tools"),
            std::string::npos);
  auto bad = parse_tools(body(R"({"tool_choice": "required", "tools": [{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"x": {"type": "string", "pattern": "(a)\\1"}}}}}]})"));
  try {
    tool_call_grammar(*bad);
    ADD_FAILURE() << "an unsupported schema keyword was accepted";
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("tool 'f'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("pattern"), std::string::npos) << e.what();
  }
}

TEST(ToolCalls, RequiredGrammarAdmitsExactlyValidCalls) {
  auto t = parse_tools(body(with(R"(, "tool_choice": "required")")));
  EXPECT_EQ(tool_call_grammar(*parse_tools(body(with("")))), "");  // auto: free
  const auto g = Grammar::parse(tool_call_grammar(*t));
  const std::string ok1 = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  const std::string ok2 = "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(g->accepts(ok1));
  EXPECT_TRUE(g->accepts(ok1 + "\n" + ok2));  // parallel calls
  EXPECT_FALSE(g->accepts("Sure! " + ok1));
  EXPECT_FALSE(g->accepts("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));  // city required
  EXPECT_FALSE(g->accepts("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"x\": 1}}\n</tool_call>"));
  EXPECT_FALSE(g->accepts("<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  auto single = parse_tools(body(with(R"(, "tool_choice": {"type": "function", "function": {"name": "ping"}},
                                          "parallel_tool_calls": false)")));
  const auto gs = Grammar::parse(tool_call_grammar(*single));
  EXPECT_TRUE(gs->accepts(ok2));
  EXPECT_FALSE(gs->accepts(ok1));
  EXPECT_FALSE(gs->accepts(ok2 + "\n" + ok2));
}

TEST(ToolCalls, ParsesCallsOutOfText) {
  const std::vector<ToolSpec> allowed = parse_tools(body(with("")))->tools;
  auto o = parse_tool_calls(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>{\"name\": \"ping\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
      allowed);
  ASSERT_EQ(o.calls.size(), 2u);
  EXPECT_EQ(o.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(o.calls[0].arguments), json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(o.calls[1].arguments, "{\"a\":1}");  // arguments given as a JSON string
  EXPECT_EQ(o.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(o.calls[0].id.size(), 29u);
  EXPECT_NE(o.calls[0].id, o.calls[1].id);
  EXPECT_EQ(o.content, "Let me check.");
  // Broken blocks and unknown functions stay text; no call → the text untouched.
  for (const std::string text : {"<tool_call>{not json}</tool_call>", "<tool_call>{\"name\": \"nope\"}</tool_call>",
                                 "no calls here", "<tool_call>{\"name\": \"ping\"} unterminated"}) {
    auto p = parse_tool_calls(text, allowed);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

// Whatever the cut of a text into pieces, the filter sends the content before a block at
// once, never a piece of "<tool_call>", and the calls at the end.
TEST(ToolCalls, StreamFilterHoldsBackCallBlocks) {
  const std::string text =
      "Checking <tool the weather.\n<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>";
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    ToolStreamFilter f;
    std::string sent;
    for (size_t i = 0; i < text.size();) {
      const size_t n = std::min(text.size() - i, static_cast<size_t>(rng() % 5));
      const std::string piece = f.push(text.substr(i, n));
      EXPECT_EQ(piece.find("<tool_call"), std::string::npos);
      sent += piece;
      i += n;
    }
    EXPECT_EQ(sent, "Checking <tool the weather.\n");
    const ToolOutput rest = f.finish();
    ASSERT_EQ(rest.calls.size(), 1u);
    EXPECT_EQ(rest.calls[0].name, "ping");
    EXPECT_EQ(rest.content, "");
  }
  ToolStreamFilter plain;
  EXPECT_EQ(plain.push("no call <tool"), "no call ");
  EXPECT_EQ(plain.finish().content, "<tool");
}
