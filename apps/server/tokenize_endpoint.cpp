#include "apps/server/tokenize_endpoint.hpp"

#include <boost/json.hpp>

#include "apps/server/api_error.hpp"
#include "apps/server/generation.hpp"
#include "apps/server/server_state.hpp"
#include "engine/text/utf8.hpp"

namespace tandem::server {
namespace json = boost::json;
namespace {

json::object parse_object(std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) throw bad_request("The body is not valid JSON: " + ec.message(), "", "invalid_json");
  if (!v.is_object()) throw bad_request("The body must be a JSON object", "", "invalid_type");
  return std::move(v.as_object());
}

bool flag(const json::object& o, std::string_view key, bool fallback) {
  const json::value* v = o.if_contains(key);
  if (!v || v->is_null()) return fallback;
  if (!v->is_bool()) throw bad_request(std::string("'") + std::string(key) + "' must be a boolean", std::string(key), "invalid_type");
  return v->get_bool();
}

}  // namespace

HttpResponse tokenize_response(ServerState& state, std::string_view body) {
  const json::object o = parse_object(body);
  std::vector<int32_t> ids;
  bool pieces = false;
  if (o.contains("messages")) {
    // As a chat completion would read them: the same parser, template and tokenizer.
    ids = prompt_tokens(state, parse_request(Endpoint::Chat, body, state.protocol));
  } else {
    const bool vllm = o.contains("prompt");
    const json::value* text = o.if_contains(vllm ? "prompt" : "content");
    if (!text) throw bad_request("Give the text as 'prompt' (or 'content'), or chat 'messages'", "prompt", "missing_field");
    if (!text->is_string()) throw bad_request("The text to tokenize must be a string", vllm ? "prompt" : "content", "invalid_type");
    // vLLM adds the special tokens by default, llama-server does not.
    const bool special = vllm ? flag(o, "add_special_tokens", true) : flag(o, "add_special", false);
    ids = state.engine.tokenize(std::string_view(text->get_string()), special, true);
    pieces = !vllm && flag(o, "with_pieces", false);
  }
  json::array tokens;
  for (int32_t id : ids) {
    // A token may hold part of a character: its piece gets U+FFFD there, as JSON needs UTF-8.
    if (pieces)
      tokens.push_back(json::object{{"id", id}, {"piece", utf8::sanitize(state.engine.detokenize(std::span<const int32_t>(&id, 1)))}});
    else tokens.push_back(id);
  }
  HttpResponse r;
  r.body = json::serialize(json::object{{"tokens", std::move(tokens)},
                                        {"count", static_cast<int64_t>(ids.size())},
                                        {"max_model_len", state.context}});
  return r;
}

HttpResponse detokenize_response(ServerState& state, std::string_view body) {
  const json::object o = parse_object(body);
  const json::value* t = o.if_contains("tokens");
  if (!t) throw bad_request("Give the token ids as 'tokens'", "tokens", "missing_field");
  if (!t->is_array()) throw bad_request("'tokens' must be an array of token ids", "tokens", "invalid_type");
  std::vector<int32_t> ids;
  for (const json::value& v : t->as_array()) {
    if (!v.is_int64() && !v.is_uint64())
      throw bad_request("'tokens' must be an array of token ids", "tokens", "invalid_type");
    const int64_t id = v.is_int64() ? v.get_int64() : static_cast<int64_t>(std::min<uint64_t>(v.get_uint64(), INT64_MAX));
    if (id < 0 || id >= state.protocol.n_vocab)
      throw bad_request("Token id " + std::to_string(id) + " is not in the vocabulary (0.." +
                            std::to_string(state.protocol.n_vocab - 1) + ")",
                        "tokens", "invalid_value");
    ids.push_back(static_cast<int32_t>(id));
  }
  // Ids that end inside a character decode to U+FFFD there (as the tokenizers library's decode
  // does): the reply is JSON, which must be UTF-8.
  const std::string text = utf8::sanitize(state.engine.detokenize(ids));
  HttpResponse r;
  r.body = json::serialize(json::object{{"prompt", text}, {"content", text}});
  return r;
}

}  // namespace tandem::server
