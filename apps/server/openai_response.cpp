// Building OpenAI response bodies and stream chunks (see openai_protocol.hpp).
#include <boost/json.hpp>
#include <random>

#include "apps/server/openai_protocol.hpp"

namespace json = boost::json;

namespace tandem::server {
namespace {

json::object envelope(const ResponseMeta& m, const char* object) {
  json::object o;
  o["id"] = m.id;
  o["object"] = object;
  o["created"] = static_cast<int64_t>(m.created);
  o["model"] = m.model;
  // The seed the choices were drawn with (not an OpenAI field): sending it back as `seed`
  // with the same request gives the same texts.
  o["seed"] = m.seed;
  return o;
}

json::object speculation_object(const SpeculativeMetrics& m) {
  json::object o;
  o["num_drafts"] = m.drafts;
  o["num_draft_tokens"] = m.drafted_tokens;
  o["num_accepted_tokens"] = m.accepted_tokens;
  o["num_draft_tokens_per_pos"] = json::value_from(m.drafted_per_position);
  o["num_accepted_tokens_per_pos"] = json::value_from(m.accepted_per_position);
  o["acceptance_rate"] = m.acceptance_rate();
  o["mean_accepted_length"] = m.mean_accepted_length();
  if (m.tree_steps > 0) o["num_tree_steps"] = m.tree_steps;  // token trees (tandem's extension)
  return o;
}

json::object usage_object(const Usage& u) {
  json::object o;
  o["prompt_tokens"] = u.prompt_tokens;
  o["completion_tokens"] = u.completion_tokens;
  o["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  if (u.speculation) o["speculation"] = speculation_object(*u.speculation);
  return o;
}

json::value reason_value(const char* finish_reason) {
  return finish_reason ? json::value(finish_reason) : json::value(nullptr);
}

}  // namespace

std::string new_response_id(Endpoint endpoint) {
  // Ids only need to be unique enough to tell responses apart in logs; not a secret.
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = endpoint == Endpoint::Chat ? "chatcmpl-" : "cmpl-";
  for (int i = 0; i < 24; ++i) id += kHex[rng() & 15];
  return id;
}

const char* finish_reason_name(FinishReason r) {
  return r == FinishReason::Stop ? "stop" : "length";
}

std::string completion_json(const ResponseMeta& m, std::string_view text, const char* finish_reason, const Usage& u) {
  ChoiceOut c;
  c.text = text;
  c.finish_reason = finish_reason;
  return completion_json(m, {c}, u, {});
}

namespace {
// OpenAI's tool_calls: [{(index,) id, type: "function", function: {name, arguments}}], with
// `index` in stream deltas.
json::array tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) {
  json::array a;
  for (size_t i = 0; i < calls.size(); ++i) {
    json::object c;
    if (with_index) c["index"] = i;
    c["id"] = calls[i].id;
    c["type"] = "function";
    c["function"] = json::object{{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    a.push_back(std::move(c));
  }
  return a;
}
}  // namespace

std::string completion_json(const ResponseMeta& m, const std::vector<ChoiceOut>& choices, const Usage& u,
                            const TokenBytes& bytes) {
  const bool chat = m.endpoint == Endpoint::Chat;
  json::object o = envelope(m, chat ? "chat.completion" : "text_completion");
  json::array list;
  for (const ChoiceOut& c : choices) {
    json::object choice;
    choice["index"] = c.index;
    if (chat) {
      json::object msg;
      msg["role"] = "assistant";
      if (c.tool_calls && !c.tool_calls->empty()) {
        msg["content"] = c.text.empty() ? json::value(nullptr) : json::value(c.text);
        msg["tool_calls"] = tool_calls_json(*c.tool_calls, false);
      } else {
        msg["content"] = c.text;
      }
      choice["message"] = std::move(msg);
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = c.logprobs ? logprobs_json(m.endpoint, *c.logprobs, bytes, 0) : json::value(nullptr);
    choice["finish_reason"] = reason_value(c.finish_reason);
    list.push_back(std::move(choice));
  }
  o["choices"] = std::move(list);
  o["usage"] = usage_object(u);
  return json::serialize(o);
}

std::string chunk_json(const ResponseMeta& m, std::string_view text, const char* finish_reason, bool role_chunk,
                       bool include_usage) {
  ChoiceOut c;
  c.text = text;
  c.finish_reason = finish_reason;
  return chunk_json(m, c, role_chunk, include_usage, {});
}

std::string chunk_json(const ResponseMeta& m, const ChoiceOut& c, bool role_chunk, bool include_usage,
                       const TokenBytes& bytes) {
  const bool chat = m.endpoint == Endpoint::Chat;
  json::object o = envelope(m, chat ? "chat.completion.chunk" : "text_completion");
  json::object choice;
  choice["index"] = c.index;
  if (chat) {
    json::object delta;
    if (role_chunk) delta["role"] = "assistant";
    if (c.tool_calls && !c.tool_calls->empty()) {
      delta["tool_calls"] = tool_calls_json(*c.tool_calls, true);
    } else if (role_chunk || !c.text.empty() || !c.finish_reason) {
      // The closing chunk (finish_reason set, no text) has an empty delta, as OpenAI's does.
      delta["content"] = c.text;
    }
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = c.text;
  }
  choice["logprobs"] = c.logprobs ? logprobs_json(m.endpoint, *c.logprobs, bytes, c.text_offset) : json::value(nullptr);
  choice["finish_reason"] = reason_value(c.finish_reason);
  o["choices"] = json::array{std::move(choice)};
  if (include_usage) o["usage"] = nullptr;
  return json::serialize(o);
}

std::string usage_chunk_json(const ResponseMeta& m, const Usage& u) {
  json::object o = envelope(m, m.endpoint == Endpoint::Chat ? "chat.completion.chunk" : "text_completion");
  o["choices"] = json::array{};
  o["usage"] = usage_object(u);
  return json::serialize(o);
}

std::string sse_event(std::string_view data) {
  std::string s;
  s.reserve(data.size() + 8);
  s += "data: ";
  s += data;
  s += "\n\n";
  return s;
}

std::string model_json(const std::string& id, std::time_t created) {
  json::object o;
  o["id"] = id;
  o["object"] = "model";
  o["created"] = static_cast<int64_t>(created);
  o["owned_by"] = "tandem";
  return json::serialize(o);
}

std::string models_json(const std::vector<std::string>& ids, std::time_t created) {
  json::array data;
  for (const std::string& id : ids) data.push_back(json::parse(model_json(id, created)));
  json::object o;
  o["object"] = "list";
  o["data"] = std::move(data);
  return json::serialize(o);
}

}  // namespace tandem::server
