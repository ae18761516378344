// The HTTP server's protocol layer without networking: OpenAI request parsing and
// validation (every field and error case), response and stream-chunk JSON, error bodies,
// and the Prometheus text of /metrics. tests/server/ runs the real server end to end.
#include <gtest/gtest.h>

#include "engine/grammar/grammar.hpp"
#include "engine/grammar/json_schema.hpp"

#include <boost/json.hpp>
#include <cmath>
#include <limits>
#include <sstream>

#include "apps/server/api_error.hpp"
#include "apps/server/metrics_text.hpp"
#include "apps/server/openai_protocol.hpp"

namespace json = boost::json;
using namespace tandem;
using namespace tandem::server;

namespace {

ProtocolConfig config() {
  ProtocolConfig c;
  c.model_ids = {"smollm2", "smollm2.gguf"};
  c.n_vocab = 1000;
  c.has_draft_model = false;
  c.default_speculative.mode = DraftMode::Ngram;
  c.default_speculative.draft_max = 3;
  return c;
}

ParsedRequest chat(const std::string& body) { return parse_request(Endpoint::Chat, body, config()); }
ParsedRequest completion(const std::string& body) { return parse_request(Endpoint::Completion, body, config()); }

// Runs `fn`, expects an ApiError, returns it.
template <class Fn>
ApiError error_of(Fn fn) {
  try {
    fn();
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no ApiError thrown";
  return ApiError(0, "", "");
}

ApiError chat_error(const std::string& body) { return error_of([&] { chat(body); }); }
ApiError completion_error(const std::string& body) { return error_of([&] { completion(body); }); }

constexpr const char* kMsgs = R"("messages":[{"role":"user","content":"hi"}])";
std::string chat_with(const std::string& extra) { return std::string("{") + kMsgs + (extra.empty() ? "" : "," + extra) + "}"; }

}  // namespace

// ---- chat requests --------------------------------------------------------------------

TEST(OpenAIRequest, MinimalChatTakesOpenAIDefaults) {
  const ParsedRequest r = chat(chat_with(R"("model":"smollm2")"));
  EXPECT_EQ(r.endpoint, Endpoint::Chat);
  EXPECT_EQ(r.model, "smollm2");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "hi");
  EXPECT_FLOAT_EQ(r.opts.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.opts.sampling.top_p, 1.0f);
  EXPECT_EQ(r.opts.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(r.opts.sampling.min_p, 0.0f);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_FALSE(r.max_tokens_given);
  EXPECT_FALSE(r.opts.add_special);  // the template writes BOS
  EXPECT_EQ(r.opts.speculative.mode, DraftMode::Ngram);  // the server default
  EXPECT_EQ(r.opts.speculative.draft_max, 3);
}

TEST(OpenAIRequest, ModelMayBeOmittedOrAnAliasButNotUnknown) {
  EXPECT_EQ(chat(chat_with("")).model, "smollm2");
  EXPECT_EQ(chat(chat_with(R"("model":"smollm2.gguf")")).model, "smollm2");  // alias → served id
  const ApiError e = chat_error(chat_with(R"("model":"gpt-4")"));
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_EQ(e.param, "model");
  EXPECT_EQ(chat_error(chat_with(R"("model":5)")).status, 400);
}

TEST(OpenAIRequest, EveryField) {
  const ParsedRequest r = chat(chat_with(
      R"("max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":20,"min_p":0.1,"seed":42,"stop":["a","bb"],)"
      R"("stream":true,"stream_options":{"include_usage":true},"presence_penalty":0.5,"frequency_penalty":-0.5,)"
      R"("n":1,"repetition_penalty":1.1,"ignore_eos":true,"speculative":{"mode":"none","draft_max":6,"draft_min":1,"policy":"adaptive",)"
      R"("alpha_prior":0.8,"start_budget":-1,"lookup":false,"lookup_min":2},)"
      R"("user":"someone","logprobs":false,"tools":[],"response_format":{"type":"text"},"speculation_metrics":true)"));
  EXPECT_EQ(r.opts.max_tokens, 7);
  EXPECT_TRUE(r.speculation_metrics);
  EXPECT_FALSE(chat(chat_with(R"("max_tokens":7)")).speculation_metrics);
  EXPECT_TRUE(r.max_tokens_given);
  EXPECT_FLOAT_EQ(r.opts.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.opts.sampling.top_p, 0.9f);
  EXPECT_EQ(r.opts.sampling.top_k, 20);
  EXPECT_FLOAT_EQ(r.opts.sampling.min_p, 0.1f);
  EXPECT_EQ(r.opts.sampling.seed, 42u);
  EXPECT_EQ(r.opts.stop, (std::vector<std::string>{"a", "bb"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_FLOAT_EQ(r.opts.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.opts.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.opts.sampling.repetition_penalty, 1.1f);
  EXPECT_TRUE(r.opts.ignore_eos);
  EXPECT_EQ(r.opts.speculative.mode, DraftMode::None);
  EXPECT_EQ(r.opts.speculative.draft_max, 6);
  EXPECT_EQ(r.opts.speculative.draft_min, 1);
  EXPECT_EQ(r.opts.speculative.policy, "adaptive");
  EXPECT_FLOAT_EQ(r.opts.speculative.alpha_prior, 0.8f);
  EXPECT_FLOAT_EQ(r.opts.speculative.start_budget, -1.0f);
  EXPECT_FALSE(r.opts.speculative.lookup);
  EXPECT_EQ(r.opts.speculative.lookup_min, 2);
}

TEST(OpenAIRequest, MaxCompletionTokensWinsAndIntegralFloatsAreIntegers) {
  EXPECT_EQ(chat(chat_with(R"("max_tokens":9,"max_completion_tokens":3)")).opts.max_tokens, 3);
  EXPECT_EQ(chat(chat_with(R"("max_tokens":4.0)")).opts.max_tokens, 4);
  EXPECT_EQ(chat_error(chat_with(R"("max_tokens":4.5)")).param, "max_tokens");
  EXPECT_EQ(chat_error(chat_with(R"("max_tokens":0)")).code, "invalid_value");
  EXPECT_EQ(chat_error(chat_with(R"("max_completion_tokens":-1)")).param, "max_completion_tokens");
}

TEST(OpenAIRequest, NullIsOmitted) {
  const ParsedRequest r = chat(chat_with(R"("model":null,"max_tokens":null,"temperature":null,"stop":null,"seed":null,"stream_options":null)"));
  EXPECT_EQ(r.model, "smollm2");
  EXPECT_FLOAT_EQ(r.opts.sampling.temperature, 1.0f);
  EXPECT_TRUE(r.opts.stop.empty());
}

TEST(OpenAIRequest, StopAsStringAndLimits) {
  EXPECT_EQ(chat(chat_with(R"("stop":"\n")")).opts.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(chat_error(chat_with(R"("stop":[""])")).param, "stop");
  EXPECT_EQ(chat_error(chat_with(R"("stop":[1])")).code, "invalid_type");
  EXPECT_EQ(chat_error(chat_with(R"("stop":{"a":1})")).code, "invalid_type");
  std::string many = R"("stop":[)";
  for (int i = 0; i < 17; ++i) many += std::string(i ? "," : "") + "\"s" + std::to_string(i) + "\"";
  EXPECT_EQ(chat_error(chat_with(many + "]")).param, "stop");
}

TEST(OpenAIRequest, SeedTakesAny64BitInteger) {
  EXPECT_EQ(chat(chat_with(R"("seed":-1)")).opts.sampling.seed, UINT64_MAX);
  EXPECT_EQ(chat(chat_with(R"("seed":18446744073709551615)")).opts.sampling.seed, UINT64_MAX);
  EXPECT_EQ(chat_error(chat_with(R"("seed":"7")")).param, "seed");
  EXPECT_EQ(chat_error(chat_with(R"("seed":1.5)")).param, "seed");
}

TEST(OpenAIRequest, RangesAreChecked) {
  struct Case {
    const char* field;
    const char* value;
  };
  for (const Case& c : {Case{"temperature", "-0.1"}, Case{"temperature", "2.5"}, Case{"top_p", "1.5"},
                        Case{"top_p", "-1"}, Case{"min_p", "2"}, Case{"presence_penalty", "3"},
                        Case{"frequency_penalty", "-2.5"}, Case{"top_k", "-2"}, Case{"repetition_penalty", "0"}}) {
    std::string extra = "\"";
    extra.append(c.field).append("\":").append(c.value);
    const ApiError e = chat_error(chat_with(extra));
    EXPECT_EQ(e.status, 400) << c.field << "=" << c.value;
    EXPECT_EQ(e.param, c.field);
    EXPECT_EQ(e.type, "invalid_request_error");
  }
  EXPECT_EQ(chat(chat_with(R"("top_k":-1)")).opts.sampling.top_k, 0);  // vLLM's "off"
  EXPECT_FLOAT_EQ(chat(chat_with(R"("temperature":0)")).opts.sampling.temperature, 0.0f);
}

TEST(OpenAIRequest, WrongTypesNameTheField) {
  struct Case {
    const char* extra;
    const char* param;
  };
  for (const Case& c : {Case{R"("temperature":"hot")", "temperature"}, Case{R"("max_tokens":"10")", "max_tokens"},
                        Case{R"("stream":"yes")", "stream"}, Case{R"("stream":1)", "stream"},
                        Case{R"("top_k":1.5)", "top_k"}, Case{R"("speculative":"ngram")", "speculative"},
                        Case{R"("speculative":{"draft_max":"4"})", "speculative.draft_max"},
                        Case{R"("stream":true,"stream_options":true)", "stream_options"},
                        Case{R"("stream":true,"stream_options":{"include_usage":"yes"})", "stream_options.include_usage"},
                        Case{R"("ignore_eos":0)", "ignore_eos"}, Case{R"("speculation_metrics":1)", "speculation_metrics"}}) {
    const ApiError e = chat_error(chat_with(c.extra));
    EXPECT_EQ(e.status, 400) << c.extra;
    EXPECT_EQ(e.param, c.param) << c.extra;
    EXPECT_EQ(e.code, "invalid_type") << c.extra;
  }
}

TEST(OpenAIRequest, MalformedBodies) {
  for (const char* body : {"", "{", "not json", "[1,2]", "\"text\"", "{\"messages\": [}", "null"}) {
    const ApiError e = chat_error(body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.code, "invalid_json") << body;
  }
}

TEST(OpenAIRequest, Messages) {
  EXPECT_EQ(chat_error("{}").code, "missing_required_parameter");
  EXPECT_EQ(chat_error(R"({"messages":[]})").param, "messages");
  EXPECT_EQ(chat_error(R"({"messages":"hi"})").code, "invalid_type");
  EXPECT_EQ(chat_error(R"({"messages":["hi"]})").param, "messages[0]");
  EXPECT_EQ(chat_error(R"({"messages":[{"content":"hi"}]})").param, "messages[0].role");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"wizard","content":"hi"}]})").param, "messages[0].role");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user"}]})").param, "messages[0].content");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":5}]})").param, "messages[0].content");
  EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})").code,
            "unsupported_content");

  const ParsedRequest r = chat(
      R"({"messages":[{"role":"developer","content":"be brief"},)"
      R"({"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},)"
      R"({"role":"assistant","content":null},{"role":"user","content":"c"}]})");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.messages[2].content, "");
}

TEST(OpenAIRequest, UnsupportedOptionsAreRefused) {
  for (const char* extra : {R"("tools":[{"type":"function"}])", R"("best_of":3)"}) {
    const ApiError e = chat_error(chat_with(extra));
    EXPECT_EQ(e.status, 400) << extra;
    EXPECT_FALSE(e.param.empty()) << extra;
  }
  EXPECT_EQ(chat_error(chat_with(R"("best_of":2)")).param, "best_of");
  // suffix: fill in the middle of a text prompt (not of token ids, not echoed).
  EXPECT_EQ(completion(R"({"prompt":"x","suffix":"y"})").suffix, "y");
  EXPECT_EQ(completion(R"({"prompt":"x","suffix":""})").suffix, "");
  EXPECT_EQ(completion_error(R"({"prompt":[1,2],"suffix":"y"})").param, "suffix");
  EXPECT_EQ(completion_error(R"({"prompt":"x","suffix":"y","echo":true})").param, "suffix");
}

// logit_bias: token ids as decimal strings, values in [-100, 100], ids inside the vocabulary.
TEST(OpenAIRequest, LogitBiasIsParsedAndChecked) {
  const ParsedRequest r = chat(chat_with(R"("logit_bias":{"5":-100,"17":2.5,"0":0})"));
  EXPECT_EQ(r.opts.sampling.logit_bias, (std::map<int32_t, float>{{0, 0.0f}, {5, -100.0f}, {17, 2.5f}}));
  EXPECT_TRUE(chat(chat_with(R"("logit_bias":{})")).opts.sampling.logit_bias.empty());
  EXPECT_EQ(completion(R"({"prompt":"x","logit_bias":{"3":1}})").opts.sampling.logit_bias.at(3), 1.0f);
  const std::string over = std::to_string(config().n_vocab);
  for (const std::string& bad : {std::string(R"([1])"), std::string(R"({"x":1})"), std::string(R"({"-1":1})"),
                                 std::string(R"({"1.5":1})"), std::string(R"({"":1})"), R"({")" + over + R"(":1})",
                                 std::string(R"({"5":100.5})"), std::string(R"({"5":"1"})"),
                                 std::string(R"({"5":1,"05":2})")}) {
    const ApiError e = chat_error(chat_with(R"("logit_bias":)" + bad));
    EXPECT_EQ(e.status, 400) << bad;
    EXPECT_EQ(e.param.rfind("logit_bias", 0), 0u) << bad << ": " << e.param;
  }
}

TEST(OpenAIRequest, StopTokenIdsAreParsedAndChecked) {
  EXPECT_EQ(chat(chat_with(R"("stop_token_ids":[7,0,7])")).opts.stop_token_ids, (std::vector<int32_t>{7, 0, 7}));
  EXPECT_TRUE(chat(chat_with(R"("stop_token_ids":[])")).opts.stop_token_ids.empty());
  EXPECT_TRUE(chat(chat_with(R"("temperature":0)")).opts.stop_token_ids.empty());
  EXPECT_EQ(completion(R"({"prompt":"x","stop_token_ids":[3]})").opts.stop_token_ids, (std::vector<int32_t>{3}));
  std::string many = "[";
  for (int i = 0; i <= config().max_stop_token_ids; ++i) many += (i ? ",1" : "1");
  many += "]";
  const std::string over = std::to_string(config().n_vocab);
  for (const std::string& bad : {std::string("5"), std::string(R"(["5"])"), std::string("[-1]"), std::string("[1.5]"),
                                 "[" + over + "]", std::string("[1e30]"), many}) {
    const ApiError e = chat_error(chat_with(R"("stop_token_ids":)" + bad));
    EXPECT_EQ(e.status, 400) << bad;
    EXPECT_EQ(e.param, "stop_token_ids") << bad;
  }
}

// echo (completions): with logprobs the prompt is scored (prompt_logprobs, the same number of
// alternatives), max_tokens may be 0, streamed or not.
TEST(OpenAIRequest, EchoScoresThePromptWithLogprobs) {
  const ParsedRequest plain = completion(R"({"prompt":"x"})");
  EXPECT_FALSE(plain.echo);
  EXPECT_EQ(plain.opts.prompt_logprobs, -1);
  const ParsedRequest text = completion(R"({"prompt":"x","echo":true,"max_tokens":3})");
  EXPECT_TRUE(text.echo);
  EXPECT_EQ(text.opts.prompt_logprobs, -1);
  const ParsedRequest scored = completion(R"({"prompt":"x","echo":true,"logprobs":4,"max_tokens":0})");
  EXPECT_EQ(scored.opts.prompt_logprobs, 4);
  EXPECT_EQ(scored.opts.max_tokens, 0);
  EXPECT_EQ(completion(R"({"prompt":"x","echo":true,"stream":true})").stream, true);
  const ParsedRequest streamed = completion(R"({"prompt":"x","echo":true,"logprobs":1,"stream":true})");
  EXPECT_TRUE(streamed.stream && streamed.echo);
  EXPECT_EQ(streamed.opts.prompt_logprobs, 1);
  EXPECT_EQ(completion_error(R"({"prompt":"x","max_tokens":0})").param, "max_tokens");
  EXPECT_EQ(completion_error(R"({"prompt":"x","echo":true,"max_tokens":-1})").param, "max_tokens");
  EXPECT_EQ(completion_error(R"({"prompt":"x","echo":1})").status, 400);
}

// logprobs: chat's boolean with top_logprobs, completions' count; both up to 20.
TEST(OpenAIRequest, Logprobs) {
  EXPECT_EQ(chat(chat_with("")).logprobs, -1);
  EXPECT_EQ(chat(chat_with("")).opts.logprobs, -1);
  EXPECT_EQ(chat(chat_with(R"("logprobs":false)")).logprobs, -1);
  EXPECT_EQ(chat(chat_with(R"("logprobs":true)")).logprobs, 0);
  const ParsedRequest r = chat(chat_with(R"("logprobs":true,"top_logprobs":20)"));
  EXPECT_EQ(r.logprobs, 20);
  EXPECT_EQ(r.opts.logprobs, 20);
  EXPECT_EQ(chat_error(chat_with(R"("logprobs":true,"top_logprobs":21)")).param, "top_logprobs");
  EXPECT_EQ(chat_error(chat_with(R"("logprobs":true,"top_logprobs":-1)")).param, "top_logprobs");
  EXPECT_EQ(chat_error(chat_with(R"("top_logprobs":2)")).param, "top_logprobs");  // needs logprobs: true
  EXPECT_EQ(chat_error(chat_with(R"("logprobs":1)")).code, "invalid_type");
  EXPECT_EQ(completion(R"({"prompt":"x","logprobs":0})").logprobs, 0);
  EXPECT_EQ(completion(R"({"prompt":"x","logprobs":5})").opts.logprobs, 5);
  EXPECT_EQ(completion(R"({"prompt":"x","logprobs":null})").logprobs, -1);
  EXPECT_EQ(completion_error(R"({"prompt":"x","logprobs":21})").param, "logprobs");
  EXPECT_EQ(completion_error(R"({"prompt":"x","logprobs":true})").code, "invalid_type");
  EXPECT_EQ(completion_error(R"({"prompt":"x","top_logprobs":2})").param, "top_logprobs");
}

// n (both endpoints) and best_of (completions), bounded by the server's max_n.
TEST(OpenAIRequest, ChoicesNAndBestOf) {
  const ParsedRequest one = chat(chat_with(""));
  EXPECT_EQ(one.n, 1);
  EXPECT_EQ(one.best_of, 1);
  const ParsedRequest three = chat(chat_with(R"("n":3,"stream":true)"));
  EXPECT_EQ(three.n, 3);
  EXPECT_EQ(three.best_of, 3);
  EXPECT_EQ(chat(chat_with(R"("n":16)")).n, 16);
  for (const char* bad : {R"("n":0)", R"("n":17)", R"("n":-1)"}) {
    const ApiError e = chat_error(chat_with(bad));
    EXPECT_EQ(e.param, "n") << bad;
    EXPECT_EQ(e.code, "invalid_value") << bad;
  }
  ProtocolConfig small = config();
  small.max_n = 4;
  const ApiError e = error_of([&] { parse_request(Endpoint::Chat, chat_with(R"("n":5)"), small); });
  EXPECT_NE(std::string(e.what()).find("between 1 and 4"), std::string::npos) << e.what();
  // best_of > n: the engine computes logprobs to rank by, the response shows none.
  const ParsedRequest best = completion(R"({"prompt":"x","n":2,"best_of":3})");
  EXPECT_EQ(best.n, 2);
  EXPECT_EQ(best.best_of, 3);
  EXPECT_EQ(best.logprobs, -1);
  EXPECT_EQ(best.opts.logprobs, 0);
  EXPECT_EQ(completion(R"({"prompt":"x","n":2,"best_of":3,"logprobs":4})").opts.logprobs, 4);
  EXPECT_EQ(completion(R"({"prompt":"x","best_of":1})").opts.logprobs, -1);
  EXPECT_EQ(completion_error(R"({"prompt":"x","n":3,"best_of":2})").param, "best_of");
  EXPECT_EQ(completion_error(R"({"prompt":"x","best_of":3,"stream":true})").param, "best_of");
  EXPECT_EQ(completion_error(R"({"prompt":"x","best_of":17})").param, "best_of");
}

TEST(OpenAIRequest, ChoiceSeeds) {
  EXPECT_EQ(choice_seed(42, 0), 42u);  // choice 0 of n is the n = 1 request
  std::vector<uint64_t> seen = {42};
  for (int32_t i = 1; i < 16; ++i) {
    const uint64_t s = choice_seed(42, i);
    EXPECT_EQ(std::count(seen.begin(), seen.end(), s), 0) << i;
    seen.push_back(s);
    EXPECT_EQ(choice_seed(42, i), s);  // deterministic
    EXPECT_NE(choice_seed(43, i), s);
  }
}

// Structured output: response_format json_object / json_schema and the `grammar`
// extension become the request's grammar; what a grammar cannot express is a 400 naming it.
TEST(OpenAIRequest, StructuredOutput) {
  EXPECT_EQ(chat(chat_with(R"("response_format":{"type":"text"})")).opts.grammar, "");
  EXPECT_EQ(chat(chat_with(R"("response_format":{"type":"json_object"})")).opts.grammar, json_object_gbnf());
  const ParsedRequest s = chat(chat_with(
      R"("response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":)"
      R"({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}}})"));
  const auto g = Grammar::parse(s.opts.grammar);
  EXPECT_TRUE(g->accepts(R"({"n": 42})"));
  EXPECT_FALSE(g->accepts(R"({"n": "x"})"));
  EXPECT_FALSE(g->accepts(R"({})"));
  EXPECT_EQ(completion(R"({"prompt":"x","response_format":{"type":"json_object"}})").opts.grammar, json_object_gbnf());
  EXPECT_EQ(chat(chat_with(R"("grammar":"root ::= \"yes\" | \"no\"")")).opts.grammar, "root ::= \"yes\" | \"no\"");

  const ApiError pattern = chat_error(chat_with(
      R"("response_format":{"type":"json_schema","json_schema":{"schema":{"type":"string","pattern":"(a)\\1"}}})"));
  EXPECT_EQ(pattern.param, "response_format.json_schema.schema");
  EXPECT_NE(std::string(pattern.what()).find("'pattern'"), std::string::npos) << pattern.what();
  EXPECT_EQ(chat_error(chat_with(R"("response_format":{"type":"json_schema"})")).param, "response_format.json_schema");
  EXPECT_EQ(chat_error(chat_with(R"("response_format":{"type":"xml"})")).param, "response_format.type");
  EXPECT_EQ(chat_error(chat_with(R"("response_format":"json")")).param, "response_format");
  const ApiError bad = chat_error(chat_with(R"("grammar":"root ::= (")"));
  EXPECT_EQ(bad.param, "grammar");
  EXPECT_NE(std::string(bad.what()).find("grammar: 1:"), std::string::npos) << bad.what();
  EXPECT_EQ(chat_error(chat_with(R"("grammar":"root ::= \"a\"","response_format":{"type":"json_object"})")).param,
            "grammar");
}

TEST(OpenAIRequest, StreamOptionsNeedStream) {
  EXPECT_EQ(chat_error(chat_with(R"("stream_options":{"include_usage":true})")).param, "stream_options");
  EXPECT_FALSE(chat(chat_with(R"("stream":true,"stream_options":{})")).include_usage);
}

TEST(OpenAIRequest, Speculative) {
  EXPECT_EQ(chat(chat_with(R"("speculative":{"mode":"ngram"})")).opts.speculative.mode, DraftMode::Ngram);
  EXPECT_EQ(chat(chat_with(R"("speculative":{})")).opts.speculative.draft_max, 3);
  EXPECT_EQ(chat_error(chat_with(R"("speculative":{"mode":"model"})")).param, "speculative.mode");  // no draft model
  EXPECT_EQ(chat_error(chat_with(R"("speculative":{"mode":"magic"})")).param, "speculative.mode");
  EXPECT_EQ(chat_error(chat_with(R"("speculative":{"draft_max":0})")).param, "speculative.draft_max");
  EXPECT_EQ(chat_error(chat_with(R"("speculative":{"draft_max":33})")).param, "speculative.draft_max");
  EXPECT_EQ(chat_error(chat_with(R"("speculative":{"lookup_min":0})")).param, "speculative.lookup_min");
  EXPECT_EQ(chat_error(chat_with(R"("speculative":{"lookup":1})")).param, "speculative.lookup");
  EXPECT_TRUE(chat(chat_with(R"("speculative":{})")).opts.speculative.lookup);  // on unless asked
  EXPECT_EQ(chat_error(chat_with(R"("speculative":{"policy":"yolo"})")).param, "speculative.policy");
  EXPECT_EQ(chat_error(chat_with(R"("speculative":{"alpha_prior":1.5})")).param, "speculative.alpha_prior");
  EXPECT_EQ(chat_error(chat_with(R"("speculative":{"alpha_prior":-0.1})")).param, "speculative.alpha_prior");
  EXPECT_EQ(chat_error(chat_with(R"("speculative":{"alpha_prior":"high"})")).param, "speculative.alpha_prior");
  EXPECT_EQ(chat_error(chat_with(R"("speculative":{"start_budget":1e300})")).param, "speculative.start_budget");
  EXPECT_EQ(chat_error(chat_with(R"("speculative":{"start_budget":[0.1]})")).param, "speculative.start_budget");
  // Left out, the policy's own defaults (0) stay.
  EXPECT_FLOAT_EQ(chat(chat_with(R"("speculative":{"policy":"goodput"})")).opts.speculative.alpha_prior, 0.0f);
  ProtocolConfig c = config();
  c.has_draft_model = true;
  EXPECT_EQ(parse_request(Endpoint::Chat, chat_with(R"("speculative":{"mode":"model"})"), c).opts.speculative.mode,
            DraftMode::Model);
  EXPECT_FLOAT_EQ(chat(chat_with(R"("speculative":{"draft_p_min":0.25})")).opts.speculative.draft_p_min, 0.25f);
  EXPECT_EQ(chat_error(chat_with(R"("speculative":{"draft_p_min":1.5})")).param, "speculative.draft_p_min");
}

// `serve --config`: each request starts from the entry tune measured nearest its temperature.
TEST(OpenAIRequest, SpeculativeDefaultsFollowTheRequestTemperature) {
  ProtocolConfig c = config();
  SpeculativeOptions cold, warm;
  cold.mode = DraftMode::Ngram, cold.draft_max = 5, cold.policy = "fixed";
  warm.mode = DraftMode::None, warm.draft_max = 2, warm.policy = "adaptive";
  c.speculative_by_temp = {{0.0f, cold}, {0.7f, warm}};
  auto at = [&](const char* t) {
    return parse_request(Endpoint::Chat, chat_with(std::string(R"("temperature":)") + t), c).opts.speculative;
  };
  EXPECT_EQ(at("0").draft_max, 5);
  EXPECT_EQ(at("0.2").mode, DraftMode::Ngram);
  EXPECT_EQ(at("0.5").policy, "adaptive");
  EXPECT_EQ(at("1.5").mode, DraftMode::None);
  // A request's own fields still win.
  auto r = parse_request(Endpoint::Chat, chat_with(R"("temperature":0.9,"speculative":{"mode":"ngram"})"), c);
  EXPECT_EQ(r.opts.speculative.mode, DraftMode::Ngram);
  EXPECT_EQ(r.opts.speculative.draft_max, 2);
  // Without entries: the server default.
  EXPECT_EQ(chat(chat_with(R"("temperature":0.9)")).opts.speculative.draft_max, 3);
}

// ---- completion requests ------------------------------------------------------------

TEST(OpenAIRequest, CompletionPrompts) {
  ParsedRequest r = completion(R"({"model":"smollm2","prompt":"Once"})");
  EXPECT_EQ(r.prompt, "Once");
  EXPECT_FALSE(r.prompt_is_tokens);
  EXPECT_EQ(r.opts.max_tokens, 16);  // OpenAI's legacy default
  EXPECT_TRUE(r.opts.add_special);
  EXPECT_EQ(completion(R"({"prompt":["Once"]})").prompt, "Once");
  r = completion(R"({"prompt":[1,2,3]})");
  EXPECT_TRUE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(completion(R"({"prompt":[[4,5]]})").prompt_tokens, (std::vector<int32_t>{4, 5}));

  EXPECT_EQ(completion_error("{}").code, "missing_required_parameter");
  EXPECT_EQ(completion_error(R"({"prompt":["a","b"]})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt":[]})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt":[1000]})").param, "prompt");  // outside the vocabulary
  EXPECT_EQ(completion_error(R"({"prompt":[-1]})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt":5})").code, "invalid_type");
  EXPECT_EQ(completion_error(R"({"prompt":[1.5]})").code, "invalid_type");
}

// serve --max-tokens: asking for more is refused; not asking gets the limit (and the
// context still bounds it).
TEST(OpenAIRequest, ServerMaxTokensLimit) {
  ProtocolConfig c = config();
  c.max_tokens = 50;
  ParsedRequest r = parse_request(Endpoint::Chat, chat_with(""), c);
  EXPECT_EQ(r.opts.max_tokens, 50);
  EXPECT_FALSE(r.max_tokens_given);
  fit_to_context(r, 490, 512);
  EXPECT_EQ(r.opts.max_tokens, 22);
  EXPECT_EQ(parse_request(Endpoint::Chat, chat_with(R"("max_tokens":50)"), c).opts.max_tokens, 50);
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt":"x"})", c).opts.max_tokens, 16);
  for (const char* field : {"max_tokens", "max_completion_tokens"}) {
    const ApiError e = error_of([&] { parse_request(Endpoint::Chat, chat_with(std::string("\"").append(field).append("\":51")), c); });
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "invalid_value");
    EXPECT_EQ(e.param, field);
    EXPECT_NE(std::string(e.what()).find("limit of 50 tokens"), std::string::npos) << e.what();
  }
  c.max_tokens = 5;
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt":"x"})", c).opts.max_tokens, 5);
}

TEST(OpenAIRequest, FitToContext) {
  ParsedRequest r = chat(chat_with(""));
  fit_to_context(r, 100, 512);
  EXPECT_EQ(r.opts.max_tokens, 412);  // chat without max_tokens: the rest of the context
  r = chat(chat_with(R"("max_tokens":1000)"));
  fit_to_context(r, 100, 512);
  EXPECT_EQ(r.opts.max_tokens, 412);  // clamped
  r = chat(chat_with(R"("max_tokens":10)"));
  fit_to_context(r, 100, 512);
  EXPECT_EQ(r.opts.max_tokens, 10);
  const ApiError e = error_of([&] { fit_to_context(r, 512, 512); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_EQ(e.param, "messages");
  ParsedRequest c = completion(R"({"prompt":""})");
  EXPECT_EQ(error_of([&] { fit_to_context(c, 0, 512); }).param, "prompt");
}

// ---- responses ----------------------------------------------------------------------

TEST(OpenAIResponse, ErrorBody) {
  const json::value v = json::parse(error_body(model_not_found("x")));
  const json::object& e = v.at("error").as_object();
  EXPECT_EQ(e.at("type").as_string(), "invalid_request_error");
  EXPECT_EQ(e.at("code").as_string(), "model_not_found");
  EXPECT_EQ(e.at("param").as_string(), "model");
  EXPECT_NE(std::string(e.at("message").as_string()).find("'x'"), std::string::npos);
  const json::value v2 = json::parse(error_body(bad_request("bad")));
  EXPECT_TRUE(v2.at("error").at("param").is_null());
  EXPECT_TRUE(v2.at("error").at("code").is_null());

  const HttpResponse r = error_response(queue_full("busy"));
  EXPECT_EQ(r.status, 429);
  ASSERT_EQ(r.headers.size(), 1u);
  EXPECT_EQ(r.headers[0].first, "Retry-After");
  EXPECT_EQ(error_response(unavailable("bye")).status, 503);
  EXPECT_EQ(error_response(payload_too_large(10)).status, 413);
}

TEST(OpenAIResponse, ChatCompletion) {
  const ResponseMeta m{Endpoint::Chat, "chatcmpl-1", 1700000000, "smollm2"};
  const json::value v = json::parse(completion_json(m, "Hello \"you\"", "stop", Usage{5, 2, {}}));
  EXPECT_EQ(v.at("id").as_string(), "chatcmpl-1");
  EXPECT_EQ(v.at("object").as_string(), "chat.completion");
  EXPECT_EQ(v.at("created").as_int64(), 1700000000);
  EXPECT_EQ(v.at("model").as_string(), "smollm2");
  const json::value& c = v.at("choices").at(0);
  EXPECT_EQ(c.at("index").as_int64(), 0);
  EXPECT_EQ(c.at("message").at("role").as_string(), "assistant");
  EXPECT_EQ(c.at("message").at("content").as_string(), "Hello \"you\"");
  EXPECT_EQ(c.at("finish_reason").as_string(), "stop");
  EXPECT_EQ(v.at("usage").at("prompt_tokens").as_int64(), 5);
  EXPECT_EQ(v.at("usage").at("completion_tokens").as_int64(), 2);
  EXPECT_EQ(v.at("usage").at("total_tokens").as_int64(), 7);
}

TEST(OpenAIResponse, TextCompletion) {
  const ResponseMeta m{Endpoint::Completion, "cmpl-1", 1, "smollm2"};
  const json::value v = json::parse(completion_json(m, "text", "length", Usage{1, 16, {}}));
  EXPECT_EQ(v.at("object").as_string(), "text_completion");
  EXPECT_EQ(v.at("choices").at(0).at("text").as_string(), "text");
  EXPECT_EQ(v.at("choices").at(0).at("finish_reason").as_string(), "length");
}

TEST(OpenAIResponse, ChatChunks) {
  const ResponseMeta m{Endpoint::Chat, "chatcmpl-2", 1, "smollm2"};
  json::value first = json::parse(chunk_json(m, "", nullptr, true, false));
  EXPECT_EQ(first.at("object").as_string(), "chat.completion.chunk");
  EXPECT_EQ(first.at("choices").at(0).at("delta").at("role").as_string(), "assistant");
  EXPECT_EQ(first.at("choices").at(0).at("delta").at("content").as_string(), "");
  EXPECT_TRUE(first.at("choices").at(0).at("finish_reason").is_null());
  EXPECT_EQ(first.as_object().if_contains("usage"), nullptr);

  json::value mid = json::parse(chunk_json(m, "lo", nullptr, false, true));
  EXPECT_EQ(mid.at("choices").at(0).at("delta").at("content").as_string(), "lo");
  EXPECT_EQ(mid.at("choices").at(0).at("delta").as_object().if_contains("role"), nullptr);
  EXPECT_TRUE(mid.at("usage").is_null());  // include_usage: null on every chunk but the last

  json::value last = json::parse(chunk_json(m, "", "stop", false, false));
  EXPECT_TRUE(last.at("choices").at(0).at("delta").as_object().empty());
  EXPECT_EQ(last.at("choices").at(0).at("finish_reason").as_string(), "stop");

  json::value usage = json::parse(usage_chunk_json(m, Usage{3, 4, {}}));
  EXPECT_TRUE(usage.at("choices").as_array().empty());
  EXPECT_EQ(usage.at("usage").at("total_tokens").as_int64(), 7);
}

// A request's speculation figures in its usage, under vLLM's counter names, when asked for;
// absent otherwise.
TEST(OpenAIResponse, UsageCarriesTheRequestsSpeculationFiguresWhenAsked) {
  const ResponseMeta m{Endpoint::Chat, "chatcmpl-3", 1, "smollm2"};
  SpeculativeMetrics s;
  s.drafts = 4;
  s.drafted_tokens = 12;
  s.accepted_tokens = 7;
  s.drafted_per_position = {4, 4, 4};
  s.accepted_per_position = {4, 2, 1};
  const json::value v = json::parse(usage_chunk_json(m, Usage{3, 11, s}));
  const json::object& sp = v.at("usage").at("speculation").as_object();
  EXPECT_EQ(sp.at("num_drafts").as_int64(), 4);
  EXPECT_EQ(sp.at("num_draft_tokens").as_int64(), 12);
  EXPECT_EQ(sp.at("num_accepted_tokens").as_int64(), 7);
  EXPECT_EQ(json::value_to<std::vector<int64_t>>(sp.at("num_accepted_tokens_per_pos")), (std::vector<int64_t>{4, 2, 1}));
  EXPECT_EQ(json::value_to<std::vector<int64_t>>(sp.at("num_draft_tokens_per_pos")), (std::vector<int64_t>{4, 4, 4}));
  EXPECT_DOUBLE_EQ(sp.at("acceptance_rate").as_double(), 7.0 / 12.0);
  EXPECT_DOUBLE_EQ(sp.at("mean_accepted_length").as_double(), 1.0 + 7.0 / 4.0);
  const json::value plain = json::parse(usage_chunk_json(m, Usage{3, 11, {}}));
  EXPECT_EQ(plain.at("usage").as_object().if_contains("speculation"), nullptr);
}

TEST(OpenAIResponse, CompletionChunks) {
  const ResponseMeta m{Endpoint::Completion, "cmpl-2", 1, "smollm2"};
  const json::value v = json::parse(chunk_json(m, "abc", nullptr, false, false));
  EXPECT_EQ(v.at("object").as_string(), "text_completion");
  EXPECT_EQ(v.at("choices").at(0).at("text").as_string(), "abc");
}

namespace {
// A fake vocabulary: token t is "t<t>", token 7 is the first byte of "é" (a cut character).
// (Built with append: GCC 12 misreports `"lit" + std::string(...)` under -Wrestrict.)
std::string fake_bytes(int32_t t) { return t == 7 ? std::string("\xC3") : std::string("t").append(std::to_string(t)); }
const float kNegInf = -std::numeric_limits<float>::infinity();
std::vector<TokenLogprobs> sample_logprobs() {
  return {TokenLogprobs{{3, -0.5f}, {{3, -0.5f}, {4, -1.25f}}}, TokenLogprobs{{7, -2.0f}, {{5, -0.25f}, {6, kNegInf}}}};
}
}  // namespace

TEST(OpenAIResponse, ChatLogprobsAndChoices) {
  const ResponseMeta m{Endpoint::Chat, "chatcmpl-3", 1, "smollm2"};
  const auto lps = sample_logprobs();
  ChoiceOut a, b;
  a.index = 0, a.text = "t3", a.finish_reason = "stop", a.logprobs = &lps;
  b.index = 1, b.text = "x", b.finish_reason = "length";
  const json::value v = json::parse(completion_json(m, {a, b}, Usage{5, 4, {}}, fake_bytes));
  ASSERT_EQ(v.at("choices").as_array().size(), 2u);
  EXPECT_EQ(v.at("choices").at(1).at("index").as_int64(), 1);
  EXPECT_EQ(v.at("choices").at(1).at("finish_reason").as_string(), "length");
  EXPECT_TRUE(v.at("choices").at(1).at("logprobs").is_null());
  const json::value& lp = v.at("choices").at(0).at("logprobs");
  EXPECT_TRUE(lp.at("refusal").is_null());
  const json::array& content = lp.at("content").as_array();
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0].at("token").as_string(), "t3");
  EXPECT_DOUBLE_EQ(content[0].at("logprob").to_number<double>(), -0.5);
  EXPECT_EQ(json::serialize(content[0].at("bytes")), "[116,51]");
  EXPECT_EQ(content[0].at("top_logprobs").as_array().size(), 2u);
  EXPECT_EQ(content[0].at("top_logprobs").at(1).at("token").as_string(), "t4");
  EXPECT_DOUBLE_EQ(content[0].at("top_logprobs").at(1).at("logprob").to_number<double>(), -1.25);
  EXPECT_EQ(content[1].at("token").as_string(), "\xEF\xBF\xBD");  // U+FFFD; the raw byte in "bytes"
  EXPECT_EQ(json::serialize(content[1].at("bytes")), "[195]");
  EXPECT_DOUBLE_EQ(content[1].at("top_logprobs").at(1).at("logprob").to_number<double>(), -9999.0);  // -inf

  ChoiceOut chunk;
  chunk.index = 2, chunk.text = "t3", chunk.logprobs = &lps;
  const json::value c = json::parse(chunk_json(m, chunk, false, false, fake_bytes));
  EXPECT_EQ(c.at("choices").at(0).at("index").as_int64(), 2);
  EXPECT_EQ(c.at("choices").at(0).at("delta").at("content").as_string(), "t3");
  EXPECT_EQ(c.at("choices").at(0).at("logprobs").at("content").as_array().size(), 2u);
}

TEST(OpenAIResponse, CompletionLogprobs) {
  const ResponseMeta m{Endpoint::Completion, "cmpl-3", 1, "smollm2"};
  const auto lps = sample_logprobs();
  ChoiceOut a;
  a.text = "t3", a.finish_reason = "length", a.logprobs = &lps;
  const json::value v = json::parse(completion_json(m, {a}, Usage{1, 2, {}}, fake_bytes));
  const json::value& lp = v.at("choices").at(0).at("logprobs");
  EXPECT_EQ(json::serialize(lp.at("tokens")), "[\"t3\",\"\xEF\xBF\xBD\"]");
  EXPECT_EQ(json::serialize(lp.at("token_logprobs")), "[-5E-1,-2E0]");
  EXPECT_EQ(json::serialize(lp.at("text_offset")), "[0,2]");
  // The alternatives and the chosen token (OpenAI: up to logprobs + 1 entries).
  EXPECT_EQ(lp.at("top_logprobs").at(0).as_object().size(), 2u);
  const json::object& second = lp.at("top_logprobs").at(1).as_object();
  EXPECT_EQ(second.size(), 3u);
  EXPECT_DOUBLE_EQ(second.at("t6").to_number<double>(), -9999.0);
  EXPECT_DOUBLE_EQ(second.at("\xEF\xBF\xBD").to_number<double>(), -2.0);
  // A streamed piece continues the offsets where the last one ended.
  ChoiceOut piece;
  piece.text = "t3";
  piece.logprobs = &lps;
  piece.text_offset = 10;
  const json::value c = json::parse(chunk_json(m, piece, false, false, fake_bytes));
  EXPECT_EQ(json::serialize(c.at("choices").at(0).at("logprobs").at("text_offset")), "[10,12]");
  EXPECT_EQ(text_length(lps, fake_bytes), 3);
}

TEST(OpenAIResponse, SseFramingAndIds) {
  EXPECT_EQ(sse_event("{}"), "data: {}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  const std::string a = new_response_id(Endpoint::Chat), b = new_response_id(Endpoint::Chat);
  EXPECT_EQ(a.rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(a.size(), 9u + 24u);
  EXPECT_NE(a, b);
  EXPECT_EQ(new_response_id(Endpoint::Completion).rfind("cmpl-", 0), 0u);
  EXPECT_STREQ(finish_reason_name(FinishReason::Stop), "stop");
  EXPECT_STREQ(finish_reason_name(FinishReason::Length), "length");
  EXPECT_STREQ(finish_reason_name(FinishReason::Cancelled), "length");
}

TEST(OpenAIResponse, Models) {
  const json::value v = json::parse(models_json({"smollm2"}, 5));
  EXPECT_EQ(v.at("object").as_string(), "list");
  EXPECT_EQ(v.at("data").at(0).at("id").as_string(), "smollm2");
  EXPECT_EQ(v.at("data").at(0).at("object").as_string(), "model");
  EXPECT_EQ(v.at("data").at(0).at("owned_by").as_string(), "tandem");
}

// ---- metrics ------------------------------------------------------------------------

TEST(MetricsText, NumbersAsPrometheusSpellsThem) {
  EXPECT_EQ(prom_number(3), "3");
  EXPECT_EQ(prom_number(0.25), "0.25");
  EXPECT_EQ(prom_number(1e-3), "0.001");
  EXPECT_EQ(prom_number(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(prom_number(std::nan("")), "NaN");
}

TEST(MetricsText, Exposition) {
  SchedulerStats s;
  s.requests_total = 10;
  s.requests_finished = 7;
  s.requests_cancelled = 2;
  s.requests_failed = 1;
  s.queue_length = 3;
  s.running = 4;
  s.preemptions = 5;
  s.kv_blocks_used = 25;
  s.kv_blocks_total = 100;
  s.draft_kv_blocks_used = 40;
  s.kv_bytes_used = 1024;
  s.kv_bytes_total = 4096;
  s.draft_kv_full = 6;
  s.draft_prefill_tokens_total = 321;
  s.steps_draft_prefill_time_limited = 9;
  s.prompt_tokens_total = 1234;
  s.generated_tokens_total = 567;
  s.speculative.drafts = 8;
  s.speculative.drafted_tokens = 30;
  s.speculative.accepted_tokens = 20;
  s.speculative.drafted_per_position = {8, 8, 7, 7};
  s.speculative.accepted_per_position = {7, 6, 4, 3};
  s.speculative.lookup_steps = 2;
  s.speculative.lookup_drafted_tokens = 6;
  s.speculative.lookup_accepted_tokens = 5;
  // TTFT: 0.02 → bucket le=0.025, 0.3 → le=0.5, 50 → +Inf only.
  s.ttft.counts.assign(s.ttft.bounds.size() + 1, 0);
  s.ttft.counts[1] = 1;
  s.ttft.counts[5] = 1;
  s.ttft.counts.back() = 1;
  s.ttft.count = 3;
  s.ttft.sum = 50.32;
  HttpCounters h;
  h.responses_by_status = {{200, 9}, {429, 2}};
  h.client_disconnects = 1;
  h.active_requests = 4;

  const std::string t = metrics_text(s, h);
  auto has = [&](const std::string& line) {
    EXPECT_NE(t.find("\n" + line + "\n"), std::string::npos) << "missing line: " << line << "\n" << t;
  };
  has("tandem_requests_total 10");
  has("tandem_requests_finished_total 7");
  has("tandem_requests_cancelled_total 2");
  has("tandem_requests_failed_total 1");
  has("tandem_queue_length 3");
  has("tandem_running_sequences 4");
  has("tandem_preemptions_total 5");
  has("tandem_kv_blocks_used 25");
  has("tandem_kv_blocks_total 100");
  has("tandem_draft_kv_blocks_used 40");
  has("tandem_kv_bytes_used 1024");
  has("tandem_kv_bytes_total 4096");
  has("tandem_kv_usage_ratio 0.25");
  has("tandem_draft_kv_full_total 6");
  has("tandem_draft_prefill_tokens_total 321");
  has("tandem_scheduler_steps_draft_prefill_time_limited_total 9");
  has("tandem_prompt_tokens_total 1234");
  has("tandem_generation_tokens_total 567");
  has("# TYPE tandem_time_to_first_token_seconds histogram");
  has("tandem_time_to_first_token_seconds_bucket{le=\"0.01\"} 0");
  has("tandem_time_to_first_token_seconds_bucket{le=\"0.025\"} 1");
  has("tandem_time_to_first_token_seconds_bucket{le=\"0.5\"} 2");
  has("tandem_time_to_first_token_seconds_bucket{le=\"30\"} 2");
  has("tandem_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3");
  has("tandem_time_to_first_token_seconds_sum 50.32");
  has("tandem_time_to_first_token_seconds_count 3");
  has("# TYPE tandem_inter_token_latency_seconds histogram");
  has("tandem_inter_token_latency_seconds_count 0");
  has("tandem_spec_drafts_total 8");
  has("tandem_spec_draft_tokens_total 30");
  has("tandem_spec_accepted_tokens_total 20");
  has("tandem_spec_accepted_per_position_total{position=\"0\"} 7");
  has("tandem_spec_accepted_per_position_total{position=\"3\"} 3");
  has("tandem_spec_drafted_per_position_total{position=\"2\"} 7");
  has("tandem_spec_lookup_steps_total 2");
  has("tandem_spec_lookup_draft_tokens_total 6");
  has("tandem_spec_lookup_accepted_tokens_total 5");
  has("tandem_http_responses_total{code=\"429\"} 2");
  has("tandem_http_client_disconnects_total 1");
  has("tandem_http_active_requests 4");

  // Every sample line is `name{labels} value`, and every metric has HELP and TYPE first.
  std::istringstream in(t);
  std::string line, current_type;
  while (std::getline(in, line)) {
    ASSERT_FALSE(line.empty());
    if (line.rfind("# HELP ", 0) == 0) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      current_type = line.substr(7, line.find(' ', 7) - 7);
      continue;
    }
    const std::string name = line.substr(0, line.find_first_of("{ "));
    EXPECT_EQ(name.rfind(current_type, 0), 0u) << line;
    const std::string value = line.substr(line.rfind(' ') + 1);
    EXPECT_NO_THROW((void)std::stod(value == "+Inf" ? "inf" : value)) << line;
  }
}

TEST(MetricsText, EmptyStatsStillWellFormed) {
  const std::string t = metrics_text(SchedulerStats{}, HttpCounters{});
  EXPECT_NE(t.find("tandem_kv_usage_ratio 0\n"), std::string::npos);
  EXPECT_NE(t.find("tandem_inter_token_latency_seconds_bucket{le=\"+Inf\"} 0\n"), std::string::npos);
}
