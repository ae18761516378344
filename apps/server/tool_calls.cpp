#include "apps/server/tool_calls.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <random>

#include "apps/server/api_error.hpp"
#include "engine/grammar/gbnf_compose.hpp"
#include "engine/grammar/json_schema.hpp"

namespace json = boost::json;

namespace tandem::server {
namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
constexpr size_t kMaxTools = 128;

bool valid_name(std::string_view n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return false;
  return true;
}

std::string trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\n' || s[a] == '\t' || s[a] == '\r')) ++a;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\n' || s[b - 1] == '\t' || s[b - 1] == '\r')) --b;
  return std::string(s.substr(a, b - a));
}

std::string new_call_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += hex[rng() & 15];
  return id;
}

ToolSpec parse_tool(const json::value& v, size_t i) {
  const std::string at = "tools[" + std::to_string(i) + "]";
  if (!v.is_object()) throw bad_request("'" + at + "' must be an object", "tools");
  const json::object& o = v.get_object();
  const json::value* type = o.if_contains("type");
  if (!type || !type->is_string() || type->get_string() != "function")
    throw bad_request("'" + at + ".type' must be \"function\" (the only tool type supported)", "tools", "unsupported_value");
  const json::value* fn = o.if_contains("function");
  if (!fn || !fn->is_object()) throw bad_request("'" + at + ".function' must be an object", "tools");
  const json::object& f = fn->get_object();
  ToolSpec t;
  const json::value* name = f.if_contains("name");
  if (!name || !name->is_string() || !valid_name(name->get_string()))
    throw bad_request("'" + at + ".function.name' must be 1-64 characters of a-z, A-Z, 0-9, _ and -", "tools");
  t.name = std::string(name->get_string());
  if (const json::value* d = f.if_contains("description"); d && !d->is_null()) {
    if (!d->is_string()) throw bad_request("'" + at + ".function.description' must be a string", "tools");
    t.description = std::string(d->get_string());
  }
  t.parameters = "{\"type\":\"object\"}";  // no parameters: an arguments object all the same
  if (const json::value* p = f.if_contains("parameters"); p && !p->is_null()) {
    if (!p->is_object()) throw bad_request("'" + at + ".function.parameters' must be a JSON Schema object", "tools");
    if (!p->get_object().empty()) t.parameters = json::serialize(*p);
  }
  return t;
}

}  // namespace

std::optional<ToolRequest> parse_tools(const json::object& body) {
  for (const char* legacy : {"functions", "function_call"})
    if (const json::value* v = body.if_contains(legacy); v && !v->is_null())
      throw bad_request(std::string("'") + legacy + "' is deprecated and not supported: use 'tools' and 'tool_choice'",
                        legacy, "unsupported_value");
  ToolRequest r;
  const json::value* tools = body.if_contains("tools");
  const bool have = tools && !tools->is_null();
  if (have) {
    if (!tools->is_array()) throw bad_request("'tools' must be an array", "tools");
    if (tools->get_array().size() > kMaxTools)
      throw bad_request("at most " + std::to_string(kMaxTools) + " tools per request", "tools");
    for (size_t i = 0; i < tools->get_array().size(); ++i) {
      r.tools.push_back(parse_tool(tools->get_array()[i], i));
      for (size_t j = 0; j < i; ++j)
        if (r.tools[j].name == r.tools[i].name)
          throw bad_request("two tools are named '" + r.tools[i].name + "'", "tools");
    }
    r.tools_json = tools->get_array();
  }
  if (const json::value* c = body.if_contains("tool_choice"); c && !c->is_null()) {
    if (c->is_string()) {
      const std::string_view s = c->get_string();
      if (s == "none") r.choice = ToolChoiceKind::None;
      else if (s == "auto") r.choice = ToolChoiceKind::Auto;
      else if (s == "required") r.choice = ToolChoiceKind::Required;
      else throw bad_request("'tool_choice' must be \"none\", \"auto\", \"required\" or a function", "tool_choice");
    } else if (c->is_object()) {
      const json::value* fn = c->get_object().if_contains("function");
      const json::value* name = fn && fn->is_object() ? fn->get_object().if_contains("name") : nullptr;
      if (!name || !name->is_string())
        throw bad_request("'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                          "tool_choice");
      r.choice = ToolChoiceKind::Named;
      r.named = std::string(name->get_string());
      bool known = false;
      for (const ToolSpec& t : r.tools) known = known || t.name == r.named;
      if (!known) throw bad_request("'tool_choice' names '" + r.named + "', which is not among the tools", "tool_choice");
    } else {
      throw bad_request("'tool_choice' must be a string or an object", "tool_choice");
    }
  }
  if (const json::value* p = body.if_contains("parallel_tool_calls"); p && !p->is_null()) {
    if (!p->is_bool()) throw bad_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
    r.parallel = p->get_bool();
  }
  if (!have) {
    if (r.choice == ToolChoiceKind::Required || r.choice == ToolChoiceKind::Named)
      throw bad_request("'tool_choice' requires 'tools'", "tool_choice");
    return std::nullopt;
  }
  return r;
}

std::string tool_call_grammar(const ToolRequest& t) {
  if (t.choice != ToolChoiceKind::Required && t.choice != ToolChoiceKind::Named) return "";
  std::string rules, calls;
  for (size_t i = 0; i < t.tools.size(); ++i) {
    const ToolSpec& f = t.tools[i];
    if (t.choice == ToolChoiceKind::Named && f.name != t.named) continue;
    std::string args;
    try {
      args = json_schema_to_gbnf(f.parameters);
    } catch (const SchemaError& e) {
      throw bad_request("tool '" + f.name + "': " + e.what(), "tools", "unsupported_value");
    }
    const std::string prefix = "tool" + std::to_string(i) + "-";
    rules += gbnf_prefix_rules(args, prefix) + "\n";
    const std::string call = "call" + std::to_string(i);
    rules += call + " ::= \"{\" tcws " + gbnf_quote("\"name\"") + " tcws \":\" tcws " + gbnf_quote("\"" + f.name + "\"") +
             " tcws \",\" tcws " + gbnf_quote("\"arguments\"") + " tcws \":\" tcws " + prefix + "root tcws \"}\"\n";
    calls += (calls.empty() ? "" : " | ") + call;
  }
  rules += "tccall ::= " + calls + "\n";
  rules += "tcblock ::= " + gbnf_quote(std::string(kOpen) + "\n") + " tccall " + gbnf_quote("\n" + std::string(kClose)) + "\n";
  rules += "tcws ::= \" \"?\n";
  rules += t.parallel ? "root ::= tcblock ( \"\\n\" tcblock )*\n" : "root ::= tcblock\n";
  return rules;
}

std::string tools_system_prompt(const ToolRequest& t) {
  std::string s =
      "You can call functions to help with the user's request. The functions, as JSON, one per line:\n<tools>\n";
  for (const json::value& v : t.tools_json) s += json::serialize(v) + "\n";
  s += "</tools>\n\nTo call a function, reply with one block per call, each holding a JSON object with the "
       "function's name and its arguments:\n";
  s += std::string(kOpen) + "\n{\"name\": \"<function name>\", \"arguments\": {<arguments as JSON>}}\n" +
       std::string(kClose);
  return s;
}

ToolOutput parse_tool_calls(std::string_view text, const std::vector<ToolSpec>& allowed) {
  ToolOutput out;
  std::string content;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kOpen, pos);
    if (open == std::string_view::npos) break;
    const size_t body = open + kOpen.size();
    const size_t close = text.find(kClose, body);
    if (close == std::string_view::npos) break;
    bool taken = false;
    json::error_code ec;
    const json::value v = json::parse(text.substr(body, close - body), ec);
    if (!ec && v.is_object()) {
      const json::object& o = v.get_object();
      const json::value* name = o.if_contains("name");
      const json::value* args = o.if_contains("arguments");
      if (!args) args = o.if_contains("parameters");
      std::string arguments;
      if (args && args->is_string()) {  // some models write the arguments as a JSON string
        json::error_code ec2;
        const json::value inner = json::parse(args->get_string(), ec2);
        if (!ec2 && inner.is_object()) arguments = json::serialize(inner);
      } else if (args && args->is_object()) {
        arguments = json::serialize(*args);
      } else if (!args) {
        arguments = "{}";
      }
      bool ok = name && name->is_string() && !arguments.empty();
      if (ok && !allowed.empty()) {
        bool found = false;
        for (const ToolSpec& t : allowed) found = found || t.name == name->get_string();
        ok = found;
      }
      if (ok) {
        out.calls.push_back({new_call_id(), std::string(name->get_string()), arguments});
        taken = true;
      }
    }
    content += text.substr(pos, open - pos);
    if (!taken) content += text.substr(open, close + kClose.size() - open);
    pos = close + kClose.size();
  }
  content += text.substr(std::min(pos, text.size()));
  out.content = out.calls.empty() ? std::string(text) : trim(content);
  return out;
}

std::string ToolStreamFilter::push(std::string_view piece) {
  held_ += piece;
  if (in_call_) return "";
  const size_t open = held_.find(kOpen);
  std::string out;
  if (open != std::string::npos) {
    out = held_.substr(0, open);
    held_.erase(0, open);
    in_call_ = true;
  } else {
    // Hold back a tail that may be the start of "<tool_call>".
    size_t keep = 0;
    for (size_t n = std::min(held_.size(), kOpen.size() - 1); n > 0; --n)
      if (held_.compare(held_.size() - n, n, kOpen.substr(0, n)) == 0) {
        keep = n;
        break;
      }
    out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
  }
  sent_ += out;
  return out;
}

ToolOutput ToolStreamFilter::finish(const std::vector<ToolSpec>& allowed) {
  ToolOutput o = parse_tool_calls(held_, allowed);
  if (o.calls.empty()) o.content = held_;
  held_.clear();
  return o;
}

}  // namespace tandem::server
