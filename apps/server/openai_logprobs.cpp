// The "logprobs" objects of OpenAI's responses (see openai_protocol.hpp): chat's list of
// {token, logprob, bytes, top_logprobs} and the legacy completions' parallel arrays.
#include <boost/json.hpp>
#include <cmath>

#include "apps/server/openai_protocol.hpp"
#include "engine/text/utf8.hpp"

namespace json = boost::json;

namespace tandem::server {
namespace {

// JSON has no -inf; OpenAI and vLLM print a token with no chance as -9999.0.
double printable(float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0; }

json::array byte_list(const std::string& raw) {
  json::array a;
  for (unsigned char c : raw) a.push_back(static_cast<int64_t>(c));
  return a;
}

json::object chat_entry(const TokenLogprob& t, const TokenBytes& bytes) {
  const std::string raw = bytes(t.token);
  json::object o;
  o["token"] = utf8::sanitize(raw);
  o["logprob"] = printable(t.logprob);
  o["bytes"] = byte_list(raw);
  return o;
}

int64_t characters(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;  // count lead bytes
  return n;
}

}  // namespace

int64_t text_length(const std::vector<TokenLogprobs>& lps, const TokenBytes& bytes) {
  int64_t n = 0;
  for (const TokenLogprobs& lp : lps) n += characters(utf8::sanitize(bytes(lp.chosen.token)));
  return n;
}

json::value logprobs_json(Endpoint ep, const std::vector<TokenLogprobs>& lps, const TokenBytes& bytes,
                          int64_t text_offset) {
  if (ep == Endpoint::Chat) {
    json::array content;
    for (const TokenLogprobs& lp : lps) {
      json::object e = chat_entry(lp.chosen, bytes);
      json::array top;
      for (const TokenLogprob& t : lp.top) top.push_back(chat_entry(t, bytes));
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    json::object o;
    o["content"] = std::move(content);
    o["refusal"] = nullptr;
    return o;
  }
  json::array tokens, token_logprobs, top_logprobs, offsets;
  for (const TokenLogprobs& lp : lps) {
    const std::string text = utf8::sanitize(bytes(lp.chosen.token));
    tokens.push_back(json::string(text));
    if (std::isnan(lp.chosen.logprob)) {  // an echoed prompt's first token: nothing before it to score it by
      token_logprobs.push_back(nullptr);
      top_logprobs.push_back(nullptr);
      offsets.push_back(text_offset);
      text_offset += characters(text);
      continue;
    }
    token_logprobs.push_back(printable(lp.chosen.logprob));
    json::object top;
    for (const TokenLogprob& t : lp.top) top[utf8::sanitize(bytes(t.token))] = printable(t.logprob);
    // "up to logprobs + 1 elements": the chosen token is always there.
    if (!top.contains(text)) top[text] = printable(lp.chosen.logprob);
    top_logprobs.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += characters(text);
  }
  json::object o;
  o["tokens"] = std::move(tokens);
  o["token_logprobs"] = std::move(token_logprobs);
  o["top_logprobs"] = std::move(top_logprobs);
  o["text_offset"] = std::move(offsets);
  return o;
}

}  // namespace tandem::server
