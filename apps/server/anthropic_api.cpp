#include "apps/server/anthropic_api.hpp"

#include <boost/json.hpp>
#include <random>

#include "apps/server/request_json.hpp"

namespace tandem::server {
namespace json = boost::json;
namespace {

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* kAlnum = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += kAlnum[rng() % 62];
  return s;
}

// Text of a string or of text blocks.
std::string text_of(const json::value& c, const std::string& where) {
  if (c.is_string()) return std::string(c.get_string());
  if (!c.is_array()) throw bad_request("'" + where + "' must be a string or a list of blocks", where, "invalid_type");
  std::string text;
  for (const json::value& b : c.get_array()) {
    const json::object* bo = b.if_object();
    const json::value* type = bo ? bo->if_contains("type") : nullptr;
    if (!type || *type != "text")
      throw bad_request("only text blocks are supported in '" + where + "'", where, "unsupported_value");
    const json::value* t = bo->if_contains("text");
    if (!t || !t->is_string()) throw bad_request("a text block needs 'text'", where, "invalid_value");
    text += t->get_string();
  }
  return text;
}

// One Messages API message as chat messages: text, an assistant's tool_use blocks as its
// tool_calls, a user's tool_result blocks as tool messages.
void add_message(const json::object& m, json::array& out) {
  const json::value* role = m.if_contains("role");
  const json::value* content = m.if_contains("content");
  if (!role || !role->is_string() || (*role != "user" && *role != "assistant"))
    throw bad_request("each message needs a role, \"user\" or \"assistant\"", "messages", "invalid_value");
  if (!content) throw bad_request("each message needs 'content'", "messages", "invalid_value");
  const std::string r(role->get_string());
  if (content->is_string()) {
    out.push_back(json::object{{"role", r}, {"content", content->get_string()}});
    return;
  }
  if (!content->is_array()) throw bad_request("'content' must be a string or a list of blocks", "messages", "invalid_type");
  std::string text;
  json::array calls;
  for (const json::value& b : content->get_array()) {
    const json::object* bo = b.if_object();
    const json::value* type = bo ? bo->if_contains("type") : nullptr;
    if (!type || !type->is_string()) throw bad_request("each content block needs a type", "messages", "invalid_value");
    if (*type == "text") {
      text += text_of(json::array{b}, "messages");
    } else if (*type == "tool_use" && r == "assistant") {
      const json::value* id = bo->if_contains("id");
      const json::value* name = bo->if_contains("name");
      const json::value* input = bo->if_contains("input");
      if (!id || !id->is_string() || !name || !name->is_string() || !input || !input->is_object())
        throw bad_request("a tool_use block needs 'id', 'name' and an 'input' object", "messages", "invalid_value");
      calls.push_back(json::object{{"id", id->get_string()},
                                   {"type", "function"},
                                   {"function", json::object{{"name", name->get_string()},
                                                             {"arguments", json::serialize(*input)}}}});
    } else if (*type == "tool_result" && r == "user") {
      const json::value* id = bo->if_contains("tool_use_id");
      if (!id || !id->is_string()) throw bad_request("a tool_result block needs 'tool_use_id'", "messages", "invalid_value");
      const json::value* c = present(*bo, "content");
      out.push_back(json::object{
          {"role", "tool"}, {"tool_call_id", id->get_string()}, {"content", c ? text_of(*c, "messages") : std::string()}});
    } else {
      throw bad_request("content blocks of type '" + std::string(type->get_string()) + "' are not supported here",
                        "messages", "unsupported_value");
    }
  }
  if (!calls.empty()) {
    out.push_back(json::object{{"role", "assistant"}, {"content", text}, {"tool_calls", std::move(calls)}});
  } else if (!text.empty() || r == "assistant") {
    out.push_back(json::object{{"role", r}, {"content", text}});
  }
}

const char* error_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

std::string error_json(const ApiError& e) {
  return json::serialize(
      json::object{{"type", "error"}, {"error", json::object{{"type", error_type(e.status)}, {"message", e.what()}}}});
}

class MessagesWriter final : public ReplyWriter {
 public:
  explicit MessagesWriter(const ResponseMeta& m) : meta_(m) { id_ = random_id("msg_"); }

  std::string stream_start(int64_t prompt_tokens) override {
    json::object message = base(json::array{}, nullptr, nullptr);
    message["usage"] = json::object{{"input_tokens", prompt_tokens}, {"output_tokens", 0}};
    std::string s = event("message_start", json::object{{"message", std::move(message)}});
    s += event("ping", json::object{});
    return s;
  }

  std::string stream_text(std::string_view delta) override {
    std::string s = open_text();
    s += event("content_block_delta", json::object{{"index", block_},
                                                   {"delta", json::object{{"type", "text_delta"}, {"text", delta}}}});
    return s;
  }

  std::string stream_end(const ReplyInfo& r) override {
    std::string s;
    if (text_open_) {
      s += event("content_block_stop", json::object{{"index", block_}});
      ++block_;
    }
    for (const ToolCall& c : r.calls) {
      const std::string id = tool_id(c);
      s += event("content_block_start",
                 json::object{{"index", block_},
                              {"content_block", json::object{{"type", "tool_use"}, {"id", id}, {"name", c.name},
                                                             {"input", json::object{}}}}});
      s += event("content_block_delta",
                 json::object{{"index", block_},
                              {"delta", json::object{{"type", "input_json_delta"}, {"partial_json", c.arguments}}}});
      s += event("content_block_stop", json::object{{"index", block_}});
      ++block_;
    }
    const auto [reason, sequence] = stop(r);
    s += event("message_delta", json::object{{"delta", json::object{{"stop_reason", reason}, {"stop_sequence", sequence}}},
                                             {"usage", json::object{{"output_tokens", r.usage.completion_tokens}}}});
    s += event("message_stop", json::object{});
    return s;
  }

  std::string body(const ReplyInfo& r) override {
    json::array content;
    if (!r.text.empty() || r.calls.empty()) content.push_back(json::object{{"type", "text"}, {"text", r.text}});
    for (const ToolCall& c : r.calls) {
      boost::system::error_code ec;
      json::value input = json::parse(c.arguments, ec);
      if (ec || !input.is_object()) input = json::object{};
      content.push_back(json::object{{"type", "tool_use"}, {"id", tool_id(c)}, {"name", c.name}, {"input", input}});
    }
    const auto [reason, sequence] = stop(r);
    json::object m = base(std::move(content), reason, sequence);
    m["usage"] = json::object{{"input_tokens", r.usage.prompt_tokens}, {"output_tokens", r.usage.completion_tokens}};
    return json::serialize(m);
  }

  HttpResponse error(const ApiError& e) const override { return anthropic_error_response(e); }
  std::string stream_error(const ApiError& e) const override { return named_event("error", error_json(e)); }
  const char* api() const override { return "messages"; }

 private:
  std::string event(std::string_view type, json::object data) {
    data["type"] = type;
    return named_event(type, json::serialize(data));
  }

  std::string open_text() {
    if (text_open_) return {};
    text_open_ = true;
    return event("content_block_start",
                 json::object{{"index", block_}, {"content_block", json::object{{"type", "text"}, {"text", ""}}}});
  }

  static std::string tool_id(const ToolCall& c) {
    // The call's own id, in Anthropic's form.
    return "toolu_" + (c.id.rfind("call_", 0) == 0 ? c.id.substr(5) : c.id);
  }

  std::pair<json::value, json::value> stop(const ReplyInfo& r) const {
    if (!r.calls.empty()) return {"tool_use", nullptr};
    if (r.finish == FinishReason::Length || r.timed_out) return {"max_tokens", nullptr};
    if (!r.stop_string.empty()) return {"stop_sequence", json::value(r.stop_string)};
    return {"end_turn", nullptr};
  }

  json::object base(json::array content, json::value reason, json::value sequence) const {
    return json::object{{"id", id_},
                        {"type", "message"},
                        {"role", "assistant"},
                        {"model", meta_.model},
                        {"content", std::move(content)},
                        {"stop_reason", std::move(reason)},
                        {"stop_sequence", std::move(sequence)}};
  }

  ResponseMeta meta_;
  std::string id_;
  bool text_open_ = false;
  int64_t block_ = 0;
};

}  // namespace

std::string messages_to_chat(std::string_view body) {
  const json::object in = parse_object_body(body);
  const json::value* max_tokens = present(in, "max_tokens");
  if (!max_tokens) throw bad_request("'max_tokens' is required", "max_tokens", "missing_required_parameter");
  const json::value* msgs = present(in, "messages");
  if (!msgs || !msgs->is_array() || msgs->get_array().empty())
    throw bad_request("'messages' must be a non-empty list", "messages", "invalid_value");
  json::array messages;
  if (const json::value* sys = present(in, "system"))
    messages.push_back(json::object{{"role", "system"}, {"content", text_of(*sys, "system")}});
  for (const json::value& m : msgs->get_array()) {
    if (!m.is_object()) throw bad_request("each message must be an object", "messages", "invalid_type");
    add_message(m.get_object(), messages);
  }
  json::object chat{{"messages", std::move(messages)}, {"max_completion_tokens", *max_tokens}};
  for (const char* k : {"model", "temperature", "top_p", "top_k", "stream", "seed", "speculative",
                        "speculation_metrics", "ignore_eos"})
    if (const json::value* v = present(in, k)) chat[k] = *v;
  // Anthropic's default temperature is 1, as OpenAI's.
  if (const json::value* v = present(in, "stop_sequences")) chat["stop"] = *v;
  if (const json::value* v = present(in, "tools")) {
    if (!v->is_array()) throw bad_request("'tools' must be a list", "tools", "invalid_type");
    json::array tools;
    for (const json::value& t : v->get_array()) {
      const json::object* to = t.if_object();
      const json::value* name = to ? to->if_contains("name") : nullptr;
      if (!name || !name->is_string()) throw bad_request("each tool needs a 'name'", "tools", "invalid_value");
      if (const json::value* type = present(*to, "type"); type && *type != "custom")
        throw bad_request("server tools (" + json::serialize(*type) + ") are not supported", "tools", "unsupported_value");
      json::object fn{{"name", name->get_string()}};
      if (const json::value* d = present(*to, "description")) fn["description"] = *d;
      if (const json::value* s = present(*to, "input_schema")) fn["parameters"] = *s;
      tools.push_back(json::object{{"type", "function"}, {"function", std::move(fn)}});
    }
    chat["tools"] = std::move(tools);
  }
  if (const json::value* v = present(in, "tool_choice")) {
    const json::object* co = v->if_object();
    const json::value* type = co ? co->if_contains("type") : nullptr;
    if (!type || !type->is_string()) throw bad_request("'tool_choice' needs a type", "tool_choice", "invalid_value");
    if (*type == "auto") chat["tool_choice"] = "auto";
    else if (*type == "any") chat["tool_choice"] = "required";
    else if (*type == "none") chat["tool_choice"] = "none";
    else if (*type == "tool" && co->contains("name") && co->at("name").is_string())
      chat["tool_choice"] = json::object{{"type", "function"}, {"function", json::object{{"name", co->at("name")}}}};
    else throw bad_request("'tool_choice' must be auto, any, none or a named tool", "tool_choice", "invalid_value");
    if (const json::value* d = present(*co, "disable_parallel_tool_use"); d && d->is_bool())
      chat["parallel_tool_calls"] = !d->get_bool();
  }
  return json::serialize(chat);
}

std::unique_ptr<ReplyWriter> messages_writer(const ResponseMeta& meta) { return std::make_unique<MessagesWriter>(meta); }

HttpResponse anthropic_error_response(const ApiError& e) {
  HttpResponse r = error_response(e);  // its status and headers (Allow, Retry-After)
  r.body = error_json(e);
  return r;
}

}  // namespace tandem::server
