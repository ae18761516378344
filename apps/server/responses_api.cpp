#include "apps/server/responses_api.hpp"

#include <boost/json.hpp>
#include <ctime>
#include <random>

#include "apps/server/request_json.hpp"

namespace tandem::server {
namespace json = boost::json;
namespace {

// A message's content: a string, or parts of type input_text / output_text (text only).
std::string content_text(const json::value& c, const std::string& where) {
  if (c.is_string()) return std::string(c.get_string());
  if (!c.is_array()) throw bad_request("'" + where + "' must be a string or a list of content parts", where, "invalid_type");
  std::string text;
  for (const json::value& p : c.get_array()) {
    const json::object* po = p.if_object();
    const json::value* type = po ? po->if_contains("type") : nullptr;
    if (!type || !type->is_string())
      throw bad_request("each content part of '" + where + "' needs a type", where, "invalid_value");
    const std::string t(type->get_string());
    if (t != "input_text" && t != "output_text" && t != "text")
      throw bad_request("content parts of type '" + t + "' are not supported (text only)", where, "unsupported_value");
    const json::value* tx = po->if_contains("text");
    if (!tx || !tx->is_string()) throw bad_request("a text part needs 'text'", where, "invalid_value");
    text += tx->get_string();
  }
  return text;
}

json::array input_messages(const json::value& input) {
  json::array msgs;
  if (input.is_string()) {
    msgs.push_back(json::object{{"role", "user"}, {"content", input.get_string()}});
    return msgs;
  }
  if (!input.is_array()) throw bad_request("'input' must be a string or a list of items", "input", "invalid_type");
  for (const json::value& item : input.get_array()) {
    const json::object* io = item.if_object();
    if (!io) throw bad_request("each item of 'input' must be an object", "input", "invalid_type");
    const json::value* type = io->if_contains("type");
    const std::string t = type && type->is_string() ? std::string(type->get_string()) : "message";
    if (t == "message") {
      const json::value* role = io->if_contains("role");
      const json::value* content = io->if_contains("content");
      if (!role || !role->is_string() || !content)
        throw bad_request("a message item needs 'role' and 'content'", "input", "invalid_value");
      std::string r(role->get_string());
      if (r == "developer") r = "system";
      if (r != "user" && r != "assistant" && r != "system")
        throw bad_request("message role '" + r + "' is not supported", "input", "invalid_value");
      msgs.push_back(json::object{{"role", r}, {"content", content_text(*content, "input")}});
    } else if (t == "function_call") {
      const json::value* name = io->if_contains("name");
      const json::value* args = io->if_contains("arguments");
      const json::value* call_id = io->if_contains("call_id");
      if (!name || !name->is_string() || !args || !args->is_string() || !call_id || !call_id->is_string())
        throw bad_request("a function_call item needs 'call_id', 'name' and 'arguments'", "input", "invalid_value");
      json::object fn{{"name", name->get_string()}, {"arguments", args->get_string()}};
      json::object call{{"id", call_id->get_string()}, {"type", "function"}, {"function", std::move(fn)}};
      // Consecutive calls of one turn go into one assistant message.
      if (!msgs.empty() && msgs.back().as_object().at("role") == "assistant" &&
          msgs.back().as_object().contains("tool_calls")) {
        msgs.back().as_object()["tool_calls"].as_array().push_back(std::move(call));
      } else {
        msgs.push_back(json::object{{"role", "assistant"}, {"content", ""}, {"tool_calls", json::array{std::move(call)}}});
      }
    } else if (t == "function_call_output") {
      const json::value* call_id = io->if_contains("call_id");
      const json::value* output = io->if_contains("output");
      if (!call_id || !call_id->is_string() || !output)
        throw bad_request("a function_call_output item needs 'call_id' and 'output'", "input", "invalid_value");
      msgs.push_back(json::object{{"role", "tool"},
                                  {"tool_call_id", call_id->get_string()},
                                  {"content", output->is_string() ? std::string(output->get_string())
                                                                  : content_text(*output, "input")}});
    } else {
      throw bad_request("input items of type '" + t + "' are not supported", "input", "unsupported_value");
    }
  }
  if (msgs.empty()) throw bad_request("'input' is empty", "input", "invalid_value");
  return msgs;
}

json::array chat_tools(const json::value& tools) {
  if (!tools.is_array()) throw bad_request("'tools' must be a list", "tools", "invalid_type");
  json::array out;
  for (const json::value& t : tools.get_array()) {
    const json::object* to = t.if_object();
    const json::value* type = to ? to->if_contains("type") : nullptr;
    if (!type || *type != "function")
      throw bad_request("only function tools are supported", "tools", "unsupported_value");
    json::object fn;
    for (const char* k : {"name", "description", "parameters", "strict"})
      if (const json::value* v = present(*to, k)) fn[k] = *v;
    out.push_back(json::object{{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

json::value chat_tool_choice(const json::value& c) {
  if (c.is_string()) return c;
  const json::object* co = c.if_object();
  const json::value* type = co ? co->if_contains("type") : nullptr;
  const json::value* name = co ? co->if_contains("name") : nullptr;
  if (type && *type == "function" && name && name->is_string())
    return json::object{{"type", "function"}, {"function", json::object{{"name", name->get_string()}}}};
  throw bad_request("'tool_choice' must be \"auto\", \"none\", \"required\" or a function", "tool_choice", "invalid_value");
}

json::value response_format(const json::value& text) {
  const json::object* to = text.if_object();
  if (!to) throw bad_request("'text' must be an object", "text", "invalid_type");
  const json::value* f = present(*to, "format");
  if (!f) return json::object{{"type", "text"}};
  const json::object* fo = f->if_object();
  const json::value* type = fo ? fo->if_contains("type") : nullptr;
  if (!type || !type->is_string()) throw bad_request("'text.format' needs a type", "text.format", "invalid_value");
  if (*type == "json_schema") {
    json::object schema;
    for (const char* k : {"name", "schema", "strict", "description"})
      if (const json::value* v = present(*fo, k)) schema[k] = *v;
    return json::object{{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  }
  if (*type == "json_object" || *type == "text") return json::object{{"type", type->get_string()}};
  throw bad_request("'text.format' of type '" + std::string(type->get_string()) + "' is not supported", "text.format",
                    "unsupported_value");
}

std::string random_hex(size_t n) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += kHex[rng() & 15];
  return s;
}

class ResponsesWriter final : public ReplyWriter {
 public:
  ResponsesWriter(const ResponseMeta& m, std::string_view request) : meta_(m) {
    id_ = "resp_" + random_hex(32);
    msg_id_ = "msg_" + random_hex(32);
    boost::system::error_code ec;
    json::value v = json::parse(json::string_view(request.data(), request.size()), ec);
    if (!ec && v.is_object()) request_ = std::move(v.as_object());
  }

  std::string stream_start(int64_t prompt_tokens) override {
    prompt_tokens_ = prompt_tokens;
    json::object r = response("in_progress", json::array{}, nullptr);
    std::string s = event("response.created", json::object{{"response", r}});
    s += event("response.in_progress", json::object{{"response", std::move(r)}});
    return s;
  }

  std::string stream_text(std::string_view delta) override {
    std::string s = open_message();
    text_ += delta;
    s += event("response.output_text.delta", json::object{{"item_id", msg_id_},
                                                           {"output_index", 0},
                                                           {"content_index", 0},
                                                           {"delta", delta},
                                                           {"logprobs", json::array{}}});
    return s;
  }

  std::string stream_end(const ReplyInfo& r) override {
    std::string s;
    int64_t index = 0;
    if (message_open_ || r.calls.empty()) {  // a reply that is only calls has no message
      s += open_message();
      s += event("response.output_text.done",
                 json::object{{"item_id", msg_id_}, {"output_index", 0}, {"content_index", 0}, {"text", text_},
                              {"logprobs", json::array{}}});
      s += event("response.content_part.done", json::object{{"item_id", msg_id_},
                                                             {"output_index", 0},
                                                             {"content_index", 0},
                                                             {"part", text_part(text_)}});
      s += event("response.output_item.done", json::object{{"output_index", 0}, {"item", message(text_, "completed")}});
      index = 1;
    }
    for (const ToolCall& c : r.calls) {
      const json::object item = call_item(c, "in_progress", "");
      s += event("response.output_item.added", json::object{{"output_index", index}, {"item", item}});
      s += event("response.function_call_arguments.delta",
                 json::object{{"item_id", item.at("id")}, {"output_index", index}, {"delta", c.arguments}});
      s += event("response.function_call_arguments.done",
                 json::object{{"item_id", item.at("id")}, {"output_index", index}, {"arguments", c.arguments}});
      s += event("response.output_item.done",
                 json::object{{"output_index", index}, {"item", call_item(c, "completed", item.at("id").as_string())}});
      ++index;
    }
    const bool incomplete = r.finish == FinishReason::Length || r.timed_out;
    s += event(incomplete ? "response.incomplete" : "response.completed",
               json::object{{"response", final_response(r, text_)}});
    return s;
  }

  std::string body(const ReplyInfo& r) override {
    prompt_tokens_ = r.usage.prompt_tokens;
    return json::serialize(final_response(r, r.text));
  }

  HttpResponse error(const ApiError& e) const override { return error_response(e); }
  std::string stream_error(const ApiError& e) const override {
    json::value body = json::parse(error_body(e));
    json::object ev{{"type", "error"}, {"sequence_number", seq_}};
    const json::object& err = body.as_object().at("error").as_object();
    for (const auto& kv : err) ev[kv.key()] = kv.value();
    return named_event("error", json::serialize(ev));
  }
  const char* api() const override { return "responses"; }

 private:
  std::string event(std::string_view type, json::object data) {
    data["type"] = type;
    data["sequence_number"] = seq_++;
    return named_event(type, json::serialize(data));
  }

  static json::object text_part(const std::string& text) {
    return json::object{{"type", "output_text"}, {"text", text}, {"annotations", json::array{}}, {"logprobs", json::array{}}};
  }

  json::object message(const std::string& text, const char* status) const {
    json::array content;
    if (std::string(status) == "completed" || !text.empty()) content.push_back(text_part(text));
    return json::object{
        {"type", "message"}, {"id", msg_id_}, {"status", status}, {"role", "assistant"}, {"content", std::move(content)}};
  }

  static json::object call_item(const ToolCall& c, const char* status, std::string_view id) {
    return json::object{{"type", "function_call"},
                        {"id", id.empty() ? "fc_" + random_hex(32) : std::string(id)},
                        {"call_id", c.id},
                        {"name", c.name},
                        {"arguments", std::string(status) == "completed" ? c.arguments : std::string()},
                        {"status", status}};
  }

  // The message item and its text part, announced once, before the first text.
  std::string open_message() {
    if (message_open_) return {};
    message_open_ = true;
    json::object item{{"type", "message"}, {"id", msg_id_}, {"status", "in_progress"}, {"role", "assistant"},
                      {"content", json::array{}}};
    std::string s = event("response.output_item.added", json::object{{"output_index", 0}, {"item", std::move(item)}});
    s += event("response.content_part.added", json::object{{"item_id", msg_id_},
                                                            {"output_index", 0},
                                                            {"content_index", 0},
                                                            {"part", text_part("")}});
    return s;
  }

  json::object final_response(const ReplyInfo& r, const std::string& text) const {
    json::array output;
    if (!text.empty() || r.calls.empty()) output.push_back(message(text, "completed"));
    for (const ToolCall& c : r.calls) output.push_back(call_item(c, "completed", ""));
    const bool incomplete = r.finish == FinishReason::Length || r.timed_out;
    json::object usage{{"input_tokens", r.usage.prompt_tokens},
                       {"input_tokens_details", json::object{{"cached_tokens", 0}}},
                       {"output_tokens", r.usage.completion_tokens},
                       {"output_tokens_details", json::object{{"reasoning_tokens", 0}}},
                       {"total_tokens", r.usage.prompt_tokens + r.usage.completion_tokens}};
    json::object resp = response(incomplete ? "incomplete" : "completed", std::move(output), std::move(usage));
    if (incomplete) resp["incomplete_details"] = json::object{{"reason", "max_output_tokens"}};
    return resp;
  }

  // The response object; request settings echoed as the API does.
  json::object response(const char* status, json::array output, json::value usage) const {
    auto echo = [&](const char* k, json::value fallback) {
      const json::value* v = present(request_, k);
      return v ? *v : fallback;
    };
    json::object o{{"id", id_},
                   {"object", "response"},
                   {"created_at", static_cast<int64_t>(meta_.created)},
                   {"status", status},
                   {"error", nullptr},
                   {"incomplete_details", nullptr},
                   {"instructions", echo("instructions", nullptr)},
                   {"max_output_tokens", echo("max_output_tokens", nullptr)},
                   {"model", meta_.model},
                   {"output", std::move(output)},
                   {"parallel_tool_calls", echo("parallel_tool_calls", true)},
                   {"previous_response_id", nullptr},
                   {"temperature", echo("temperature", 1.0)},
                   {"text", echo("text", json::object{{"format", json::object{{"type", "text"}}}})},
                   {"tool_choice", echo("tool_choice", "auto")},
                   {"tools", echo("tools", json::array{})},
                   {"top_p", echo("top_p", 1.0)},
                   {"metadata", echo("metadata", json::object{})},
                   {"usage", std::move(usage)},
                   {"seed", meta_.seed}};
    return o;
  }

  ResponseMeta meta_;
  json::object request_;
  std::string id_, msg_id_, text_;
  bool message_open_ = false;
  int64_t seq_ = 0, prompt_tokens_ = 0;
};

}  // namespace

std::string named_event(std::string_view name, std::string_view data) {
  std::string s = "event: ";
  s += name;
  s += "\ndata: ";
  s += data;
  s += "\n\n";
  return s;
}

std::string responses_to_chat(std::string_view body) {
  const json::object in = parse_object_body(body);
  if (present(in, "previous_response_id"))
    throw bad_request("'previous_response_id' is not supported: this server keeps no responses; send the whole input",
                      "previous_response_id", "unsupported_value");
  const json::value* input = present(in, "input");
  if (!input) throw bad_request("'input' is required", "input", "missing_required_parameter");
  json::array messages = input_messages(*input);
  if (const json::value* ins = present(in, "instructions")) {
    if (!ins->is_string()) throw bad_request("'instructions' must be a string", "instructions", "invalid_type");
    messages.insert(messages.begin(), json::object{{"role", "system"}, {"content", ins->get_string()}});
  }
  json::object chat{{"messages", std::move(messages)}};
  // Fields with the same meaning and name.
  for (const char* k : {"model", "temperature", "top_p", "stream", "parallel_tool_calls", "seed", "top_k", "min_p",
                        "stop", "speculative", "speculation_metrics", "ignore_eos"})
    if (const json::value* v = present(in, k)) chat[k] = *v;
  if (const json::value* v = present(in, "max_output_tokens")) chat["max_completion_tokens"] = *v;
  if (const json::value* v = present(in, "tools")) chat["tools"] = chat_tools(*v);
  if (const json::value* v = present(in, "tool_choice")) chat["tool_choice"] = chat_tool_choice(*v);
  if (const json::value* v = present(in, "text")) chat["response_format"] = response_format(*v);
  if (const json::value* v = present(in, "reasoning"); v && !v->is_object())
    throw bad_request("'reasoning' must be an object", "reasoning", "invalid_type");
  return json::serialize(chat);
}

std::unique_ptr<ReplyWriter> responses_writer(const ResponseMeta& meta, std::string_view request_body) {
  return std::make_unique<ResponsesWriter>(meta, request_body);
}

}  // namespace tandem::server
