// Parsing and validation of OpenAI request bodies (see openai_protocol.hpp).
#include <boost/json.hpp>
#include <charconv>
#include <cmath>
#include <limits>

#include "apps/server/api_error.hpp"
#include "apps/server/openai_protocol.hpp"
#include "engine/base/splitmix.hpp"

namespace json = boost::json;

namespace tandem::server {
namespace {

// "'name'" for messages. (Built with append: GCC 12 misreports `"lit" + std::string(...)`
// under -Wrestrict.)
std::string quoted(std::string_view name) {
  std::string q = "'";
  q.append(name).append("'");
  return q;
}

std::string param_name(std::string_view parent, std::string_view key) {
  std::string n(parent);
  if (!n.empty()) n += '.';
  n.append(key);
  return n;
}

// Field accessors: null counts as absent; a present value of the wrong type is a 400 that
// names the field (`param`), as OpenAI's errors do.
const json::value* field(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v && !v->is_null() ? v : nullptr;
}

std::string type_name(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null: return "null";
    case json::kind::bool_: return "boolean";
    case json::kind::int64:
    case json::kind::uint64: return "integer";
    case json::kind::double_: return "number";
    case json::kind::string: return "string";
    case json::kind::array: return "array";
    case json::kind::object: return "object";
  }
  return "value";
}

ApiError wrong_type(std::string_view param, const char* expected, const json::value& v) {
  return bad_request(quoted(param) + " must be " + expected + ", got " + type_name(v), std::string(param),
                     "invalid_type");
}

std::optional<double> get_number(const json::object& o, std::string_view key, std::string_view parent = {}) {
  const std::string name = param_name(parent, key);
  const json::value* v = field(o, key);
  if (!v) return std::nullopt;
  if (v->is_double()) {
    if (!std::isfinite(v->get_double())) throw bad_request("'" + name + "' must be finite", name);
    return v->get_double();
  }
  if (v->is_int64()) return static_cast<double>(v->get_int64());
  if (v->is_uint64()) return static_cast<double>(v->get_uint64());
  throw wrong_type(name, "a number", *v);
}

// Integers may arrive as 3.0 from some clients; 3.5 is an error.
std::optional<int64_t> get_int(const json::object& o, std::string_view key, std::string_view parent = {}) {
  const std::string name = param_name(parent, key);
  const json::value* v = field(o, key);
  if (!v) return std::nullopt;
  if (v->is_int64()) return v->get_int64();
  if (v->is_uint64()) {
    if (v->get_uint64() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw bad_request("'" + name + "' is too large", name);
    return static_cast<int64_t>(v->get_uint64());
  }
  if (v->is_double()) {
    const double d = v->get_double();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
  }
  throw wrong_type(name, "an integer", *v);
}

std::optional<bool> get_bool(const json::object& o, std::string_view key, std::string_view parent = {}) {
  const std::string name = param_name(parent, key);
  const json::value* v = field(o, key);
  if (!v) return std::nullopt;
  if (!v->is_bool()) throw wrong_type(name, "a boolean", *v);
  return v->get_bool();
}

std::optional<std::string> get_string(const json::object& o, std::string_view key, std::string_view parent = {}) {
  const std::string name = param_name(parent, key);
  const json::value* v = field(o, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw wrong_type(name, "a string", *v);
  return std::string(v->get_string());
}

void check_range(std::string_view key, double v, double lo, double hi) {
  if (!(v >= lo && v <= hi))
    throw bad_request(quoted(key) + " must be between " + json::serialize(json::value(lo)) + " and " +
                          json::serialize(json::value(hi)),
                      std::string(key), "invalid_value");
}

std::string parse_model(const json::object& o, const ProtocolConfig& cfg) {
  const std::optional<std::string> m = get_string(o, "model");
  if (!m) return cfg.model_ids.empty() ? std::string() : cfg.model_ids[0];
  for (const std::string& id : cfg.model_ids)
    if (*m == id) return cfg.model_ids[0];
  throw model_not_found(*m);
}

// "content": a string, or an array of parts of which only {"type": "text"} are supported.
std::string message_content(const json::value& c, const std::string& param) {
  if (c.is_string()) return std::string(c.get_string());
  if (!c.is_array()) throw wrong_type(param, "a string or an array of content parts", c);
  std::string text;
  for (size_t i = 0; i < c.get_array().size(); ++i) {
    const json::value& part = c.get_array()[i];
    const std::string p = param + "[" + std::to_string(i) + "]";
    if (!part.is_object()) throw wrong_type(p, "an object", part);
    const std::optional<std::string> type = get_string(part.get_object(), "type", p);
    if (type != "text") throw bad_request("only content parts of type 'text' are supported", p + ".type", "unsupported_content");
    const json::value* t = part.get_object().if_contains("text");
    if (!t || !t->is_string()) throw bad_request("'" + p + ".text' must be a string", p + ".text", "invalid_type");
    text += t->get_string();
  }
  return text;
}

// An assistant message's tool_calls: [{id, type: "function", function: {name, arguments}}],
// arguments a JSON string (OpenAI's) that is parsed into an object for the chat template;
// text that is not JSON stays a string.
json::array message_tool_calls(const json::value& v, const std::string& p) {
  if (!v.is_array()) throw wrong_type(p, "an array", v);
  json::array out;
  for (size_t i = 0; i < v.get_array().size(); ++i) {
    const std::string at = p + "[" + std::to_string(i) + "]";
    const json::value& c = v.get_array()[i];
    if (!c.is_object()) throw wrong_type(at, "an object", c);
    const json::value* fn = c.get_object().if_contains("function");
    if (!fn || !fn->is_object()) throw bad_request("'" + at + ".function' must be an object", at + ".function");
    const json::value* name = fn->get_object().if_contains("name");
    if (!name || !name->is_string()) throw bad_request("'" + at + ".function.name' must be a string", at + ".function.name");
    json::object call;
    if (const json::value* id = c.get_object().if_contains("id"); id && id->is_string()) call["id"] = *id;
    call["type"] = "function";
    json::object f;
    f["name"] = *name;
    json::value args = json::object{};
    if (const json::value* a = fn->get_object().if_contains("arguments"); a && !a->is_null()) {
      if (a->is_string()) {
        boost::system::error_code ec;
        json::value parsed = json::parse(a->get_string(), ec);
        args = ec ? *a : parsed;
      } else {
        args = *a;
      }
    }
    f["arguments"] = std::move(args);
    call["function"] = std::move(f);
    out.push_back(std::move(call));
  }
  return out;
}

std::vector<InputMessage> parse_messages(const json::object& o) {
  const json::value* v = field(o, "messages");
  if (!v) throw bad_request("'messages' is required", "messages", "missing_required_parameter");
  if (!v->is_array()) throw wrong_type("messages", "an array", *v);
  const json::array& a = v->get_array();
  if (a.empty()) throw bad_request("'messages' must not be empty", "messages", "invalid_value");
  std::vector<InputMessage> out;
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!a[i].is_object()) throw wrong_type(p, "an object", a[i]);
    const json::object& m = a[i].get_object();
    const json::value* role = m.if_contains("role");
    if (!role || role->is_null()) throw bad_request("'" + p + ".role' is required", p + ".role", "missing_required_parameter");
    if (!role->is_string()) throw wrong_type(p + ".role", "a string", *role);
    InputMessage msg;
    msg.role = std::string(role->get_string());
    if (msg.role == "developer") msg.role = "system";  // OpenAI's newer name for the system role
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
      throw bad_request("'" + p + ".role' must be system, developer, user, assistant or tool", p + ".role", "invalid_value");
    const json::value* content = m.if_contains("content");
    if (content && !content->is_null()) {
      msg.content = message_content(*content, p + ".content");
    } else if (msg.role != "assistant") {  // an assistant turn with only tool calls has null content
      throw bad_request("'" + p + ".content' is required", p + ".content", "missing_required_parameter");
    }
    if (const json::value* tc = m.if_contains("tool_calls"); tc && !tc->is_null()) {
      if (msg.role != "assistant") throw bad_request("'" + p + ".tool_calls' is only for assistant messages", p + ".tool_calls");
      msg.tool_calls = message_tool_calls(*tc, p + ".tool_calls");
    }
    if (const json::value* id = m.if_contains("tool_call_id"); id && !id->is_null()) {
      if (!id->is_string()) throw wrong_type(p + ".tool_call_id", "a string", *id);
      msg.tool_call_id = std::string(id->get_string());
    }
    out.push_back(std::move(msg));
  }
  return out;
}

// "prompt": a string, a list of exactly one string, a list of token ids, or a list of one
// list of token ids (batches of prompts are not supported: use separate requests).
// A token id of the model's vocabulary in `param` (else a 400 naming it).
int32_t token_id(const json::value& t, const ProtocolConfig& cfg, const char* param, const char* expected) {
  if (!t.is_int64() && !t.is_uint64()) throw wrong_type(param, expected, t);
  const int64_t id = t.is_int64() ? t.get_int64() : static_cast<int64_t>(std::min<uint64_t>(t.get_uint64(), INT64_MAX));
  if (id < 0 || id >= cfg.n_vocab)
    throw bad_request("token id " + std::to_string(id) + " in " + quoted(param) + " is outside the vocabulary (" +
                          std::to_string(cfg.n_vocab) + " tokens)",
                      param, "invalid_value");
  return static_cast<int32_t>(id);
}

void parse_prompt(const json::object& o, const ProtocolConfig& cfg, ParsedRequest& r) {
  const json::value* v = field(o, "prompt");
  if (!v) throw bad_request("'prompt' is required", "prompt", "missing_required_parameter");
  if (v->is_string()) {
    r.prompt = std::string(v->get_string());
    return;
  }
  if (!v->is_array()) throw wrong_type("prompt", "a string or an array", *v);
  const json::array* a = &v->get_array();
  if (a->size() == 1 && (*a)[0].is_string()) {
    r.prompt = std::string((*a)[0].get_string());
    return;
  }
  if (a->size() == 1 && (*a)[0].is_array()) a = &(*a)[0].get_array();
  if (a->empty()) throw bad_request("'prompt' must not be empty", "prompt", "invalid_value");
  r.prompt_is_tokens = true;
  for (const json::value& t : *a) {
    if (t.is_string())
      throw bad_request("'prompt' as a list must hold exactly one string (send one request per prompt)", "prompt",
                        "invalid_value");
    r.prompt_tokens.push_back(token_id(t, cfg, "prompt", "a string or a list of token ids"));
  }
}

std::vector<std::string> parse_stop(const json::object& o, const ProtocolConfig& cfg) {
  const json::value* v = field(o, "stop");
  if (!v) return {};
  std::vector<std::string> out;
  if (v->is_string()) {
    out.emplace_back(v->get_string());
  } else if (v->is_array()) {
    for (const json::value& s : v->get_array()) {
      if (!s.is_string()) throw wrong_type("stop", "a string or an array of strings", s);
      out.emplace_back(s.get_string());
    }
  } else {
    throw wrong_type("stop", "a string or an array of strings", *v);
  }
  if (static_cast<int32_t>(out.size()) > cfg.max_stop_strings)
    throw bad_request("'stop' may hold at most " + std::to_string(cfg.max_stop_strings) + " strings", "stop",
                      "invalid_value");
  for (const std::string& s : out)
    if (s.empty()) throw bad_request("'stop' strings must not be empty", "stop", "invalid_value");
  return out;
}

// "stop_token_ids" (vLLM's extension): token ids that end the output as an end-of-generation
// token does, each inside the vocabulary.
std::vector<int32_t> parse_stop_token_ids(const json::object& o, const ProtocolConfig& cfg) {
  const json::value* v = field(o, "stop_token_ids");
  if (!v) return {};
  if (!v->is_array()) throw wrong_type("stop_token_ids", "an array of token ids", *v);
  if (static_cast<int64_t>(v->get_array().size()) > cfg.max_stop_token_ids)
    throw bad_request("'stop_token_ids' may hold at most " + std::to_string(cfg.max_stop_token_ids) + " ids",
                      "stop_token_ids", "invalid_value");
  std::vector<int32_t> out;
  for (const json::value& t : v->get_array()) out.push_back(token_id(t, cfg, "stop_token_ids", "an array of token ids"));
  return out;
}

void parse_sampling(const json::object& o, SamplingParams& s) {
  // OpenAI's defaults; top_k and min_p are extensions that default to off.
  s.temperature = 1.0f;
  s.top_p = 1.0f;
  s.top_k = 0;
  s.min_p = 0.0f;
  s.repetition_penalty = 1.0f;
  if (auto t = get_number(o, "temperature")) {
    check_range("temperature", *t, 0.0, 2.0);
    s.temperature = static_cast<float>(*t);
  }
  if (auto p = get_number(o, "top_p")) {
    check_range("top_p", *p, 0.0, 1.0);
    s.top_p = static_cast<float>(*p);
  }
  if (auto k = get_int(o, "top_k")) {
    if (*k < -1) throw bad_request("'top_k' must be -1 or 0 (off) or a positive integer", "top_k", "invalid_value");
    s.top_k = static_cast<int32_t>(std::min<int64_t>(std::max<int64_t>(*k, 0), INT32_MAX));
  }
  if (auto m = get_number(o, "min_p")) {
    check_range("min_p", *m, 0.0, 1.0);
    s.min_p = static_cast<float>(*m);
  }
  if (auto p = get_number(o, "presence_penalty")) {
    check_range("presence_penalty", *p, -2.0, 2.0);
    s.presence_penalty = static_cast<float>(*p);
  }
  if (auto f = get_number(o, "frequency_penalty")) {
    check_range("frequency_penalty", *f, -2.0, 2.0);
    s.frequency_penalty = static_cast<float>(*f);
  }
  if (auto r = get_number(o, "repetition_penalty")) {  // vLLM's extension
    if (!(*r > 0.0 && *r <= 10.0))
      throw bad_request("'repetition_penalty' must be in (0, 10]", "repetition_penalty", "invalid_value");
    s.repetition_penalty = static_cast<float>(*r);
  }
  // Any 64-bit integer; negative seeds are reinterpreted, as OpenAI's int64 seed allows them.
  if (const json::value* v = field(o, "seed")) {
    if (v->is_int64()) s.seed = static_cast<uint64_t>(v->get_int64());
    else if (v->is_uint64()) s.seed = v->get_uint64();
    else s.seed = static_cast<uint64_t>(*get_int(o, "seed"));  // throws for non-integers
  }
}

// Extension: "speculative": {"mode": "ngram"|"model"|"none", "draft_max": K,
//                            "draft_min": N, "policy": "fixed"|"confidence"|"adaptive"|"goodput",
//                            "alpha_prior": A, "start_budget": B,
//                            "verify": "rejection"|"coupled",
//                            "lookup": true|false, "lookup_min": N,
//                            "tree_width": W, "tree_nodes": N}.
void parse_speculative(const json::object& o, const ProtocolConfig& cfg, float temperature, SpeculativeOptions& sp) {
  sp = cfg.speculative_for(temperature);
  const json::value* v = field(o, "speculative");
  if (!v) return;
  if (!v->is_object()) throw wrong_type("speculative", "an object", *v);
  const json::object& so = v->get_object();
  if (auto mode = get_string(so, "mode", "speculative")) {
    if (*mode == "none") sp.mode = DraftMode::None;
    else if (*mode == "ngram") sp.mode = DraftMode::Ngram;
    else if (*mode == "model") sp.mode = DraftMode::Model;
    else throw bad_request("'speculative.mode' must be none, ngram or model", "speculative.mode", "invalid_value");
    if (sp.mode == DraftMode::Model && !cfg.has_draft_model)
      throw bad_request("'speculative.mode' is model but the server has no draft model (start it with --model-draft)",
                        "speculative.mode", "invalid_value");
  }
  if (auto k = get_int(so, "draft_max", "speculative")) {
    if (*k < 1 || *k > 32) throw bad_request("'speculative.draft_max' must be in 1..32", "speculative.draft_max", "invalid_value");
    sp.draft_max = static_cast<int32_t>(*k);
  }
  if (auto k = get_int(so, "draft_min", "speculative")) {
    if (*k < 0 || *k > 32) throw bad_request("'speculative.draft_min' must be in 0..32", "speculative.draft_min", "invalid_value");
    sp.draft_min = static_cast<int32_t>(*k);
  }
  if (auto p = get_number(so, "draft_p_min", "speculative")) {
    if (!(*p >= 0.0 && *p <= 1.0))
      throw bad_request("'speculative.draft_p_min' must be in [0, 1]", "speculative.draft_p_min", "invalid_value");
    sp.draft_p_min = static_cast<float>(*p);
  }
  if (auto p = get_string(so, "policy", "speculative")) {
    if (*p != "fixed" && *p != "confidence" && *p != "adaptive" && *p != "goodput")
      throw bad_request("'speculative.policy' must be fixed, confidence, adaptive or goodput", "speculative.policy",
                        "invalid_value");
    sp.policy = *p;
  }
  // The adaptive policies' knobs (SpeculativeOptions): 0 keeps the policy's default.
  if (auto a = get_number(so, "alpha_prior", "speculative")) {
    if (!(*a >= 0.0 && *a <= 1.0))
      throw bad_request("'speculative.alpha_prior' must be in [0, 1]", "speculative.alpha_prior", "invalid_value");
    sp.alpha_prior = static_cast<float>(*a);
  }
  if (auto b = get_number(so, "start_budget", "speculative")) {
    if (!std::isfinite(*b) || *b > 1e6 || *b < -1e6)
      throw bad_request("'speculative.start_budget' must be a finite number (< 0: no limit)", "speculative.start_budget",
                        "invalid_value");
    sp.start_budget = static_cast<float>(*b);
  }
  if (auto l = get_bool(so, "lookup", "speculative")) sp.lookup = *l;
  if (auto n = get_int(so, "lookup_min", "speculative")) {
    if (*n < 1 || *n > kMaxLookupMin)
      throw bad_request("'speculative.lookup_min' must be in 1.." + std::to_string(kMaxLookupMin),
                        "speculative.lookup_min", "invalid_value");
    sp.lookup_min = static_cast<int32_t>(*n);
  }
  const std::string most = std::to_string(kMaxTreeNodes);
  if (auto w = get_int(so, "tree_width", "speculative")) {
    if (*w < 1 || *w > kMaxTreeNodes)
      throw bad_request("'speculative.tree_width' must be in 1.." + most, "speculative.tree_width", "invalid_value");
    sp.tree_width = static_cast<int32_t>(*w);
  }
  if (auto n = get_int(so, "tree_nodes", "speculative")) {
    if (*n < 0 || *n > kMaxTreeNodes)
      throw bad_request("'speculative.tree_nodes' must be in 0.." + most, "speculative.tree_nodes", "invalid_value");
    sp.tree_nodes = static_cast<int32_t>(*n);
  }
  if (auto m = get_string(so, "verify", "speculative")) {
    if (*m != "rejection" && *m != "coupled")
      throw bad_request("'speculative.verify' must be rejection or coupled", "speculative.verify", "invalid_value");
    sp.verify = parse_verify_mode(*m);
  }
}

// "logit_bias": {"<token id>": bias in [-100, 100], ...}, as OpenAI takes it: keys are token
// ids of the model's vocabulary written as decimal strings.
void parse_logit_bias(const json::object& o, const ProtocolConfig& cfg, SamplingParams& s) {
  const json::value* lb = field(o, "logit_bias");
  if (!lb) return;
  if (!lb->is_object()) throw wrong_type("logit_bias", "an object", *lb);
  for (const auto& kv : lb->get_object()) {
    const std::string key(kv.key());
    const std::string name = "logit_bias." + key;
    int64_t id = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || key.empty())
      throw bad_request("'logit_bias' keys must be token ids (decimal integers); got " + json::serialize(json::value(key)),
                        "logit_bias", "invalid_value");
    if (id < 0 || id >= cfg.n_vocab)
      throw bad_request("token id " + key + " in 'logit_bias' is outside the vocabulary (" +
                            std::to_string(cfg.n_vocab) + " tokens)",
                        "logit_bias", "invalid_value");
    if (!kv.value().is_number()) throw wrong_type(name, "a number", kv.value());
    const double v = kv.value().to_number<double>();
    check_range(name, v, -100.0, 100.0);
    if (s.logit_bias.count(static_cast<int32_t>(id)))
      throw bad_request("token id " + std::to_string(id) + " appears twice in 'logit_bias'", "logit_bias",
                        "invalid_value");
    s.logit_bias[static_cast<int32_t>(id)] = static_cast<float>(v);
  }
}

// Options OpenAI has that this server does not implement: refused rather than ignored, so
// a client never silently gets something other than what it asked for.
void reject_unsupported(const json::object& o, Endpoint ep) {
  if (ep == Endpoint::Completion)
    for (const char* key : {"tools", "functions"})
      if (const json::value* t = field(o, key); t && !(t->is_array() && t->get_array().empty()))
        throw bad_request(std::string(key) + " are only supported by /v1/chat/completions", key, "unsupported_value");
}

// n, best_of (completions) and logprobs: chat's logprobs is a boolean with top_logprobs
// (0..20) alternatives; completions' logprobs is the number of alternatives (OpenAI allows 5;
// we allow 20, as for chat).
void parse_choices(const json::object& o, Endpoint ep, const ProtocolConfig& cfg, ParsedRequest& r) {
  const int64_t max_n = std::max(1, cfg.max_n);
  auto count = [&](const char* key, int64_t v) {
    if (v < 1 || v > max_n)
      throw bad_request(quoted(key) + " must be between 1 and " + std::to_string(max_n) + " on this server", key,
                        "invalid_value");
    return static_cast<int32_t>(v);
  };
  if (auto n = get_int(o, "n")) r.n = count("n", *n);
  r.best_of = r.n;
  if (auto b = get_int(o, "best_of")) {
    if (ep == Endpoint::Chat) throw bad_request("'best_of' is only for /v1/completions", "best_of", "unsupported_value");
    r.best_of = count("best_of", *b);
    if (r.best_of < r.n) throw bad_request("'best_of' must be at least 'n'", "best_of", "invalid_value");
  }
  const std::optional<int64_t> top = get_int(o, "top_logprobs");
  if (top && (*top < 0 || *top > kMaxTopLogprobs))
    throw bad_request("'top_logprobs' must be between 0 and " + std::to_string(kMaxTopLogprobs), "top_logprobs",
                      "invalid_value");
  if (ep == Endpoint::Chat) {
    const bool on = get_bool(o, "logprobs").value_or(false);
    if (top && !on) throw bad_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs", "invalid_value");
    if (on) r.logprobs = static_cast<int32_t>(top.value_or(0));
  } else {
    if (top) throw bad_request("'top_logprobs' is for /v1/chat/completions; use 'logprobs' here", "top_logprobs",
                               "unsupported_value");
    if (auto lp = get_int(o, "logprobs")) {
      if (*lp < 0 || *lp > kMaxTopLogprobs)
        throw bad_request("'logprobs' must be between 0 and " + std::to_string(kMaxTopLogprobs), "logprobs",
                          "invalid_value");
      r.logprobs = static_cast<int32_t>(*lp);
    }
  }
  r.opts.logprobs = r.logprobs;
  // Choosing the best of several needs each token's own logprob.
  if (r.best_of > r.n) r.opts.logprobs = std::max(r.opts.logprobs, 0);
}

}  // namespace

uint64_t choice_seed(uint64_t seed, int32_t i) {
  return i == 0 ? seed : splitmix64_mix(seed + static_cast<uint64_t>(i) * kSplitmixGamma);
}

const SpeculativeOptions& ProtocolConfig::speculative_for(float temperature) const {
  const SpeculativeOptions* best = &default_speculative;
  float gap = 0.0f;
  for (const auto& [t, so] : speculative_by_temp) {
    const float g = std::abs(t - temperature);
    if (best == &default_speculative || g < gap) best = &so, gap = g;
  }
  return *best;
}

ParsedRequest parse_request(Endpoint endpoint, std::string_view body, const ProtocolConfig& cfg) {
  boost::system::error_code ec;
  json::value root = json::parse(json::string_view(body.data(), body.size()), ec);
  if (ec) throw bad_request("The request body is not valid JSON: " + ec.message(), {}, "invalid_json");
  if (!root.is_object()) throw bad_request("The request body must be a JSON object", {}, "invalid_json");
  const json::object& o = root.get_object();

  ParsedRequest r;
  r.endpoint = endpoint;
  r.model = parse_model(o, cfg);
  if (endpoint == Endpoint::Chat) parse_messages(o).swap(r.messages);
  else parse_prompt(o, cfg, r);
  reject_unsupported(o, endpoint);
  if (endpoint == Endpoint::Completion) {
    r.echo = get_bool(o, "echo").value_or(false);
    if (auto s = get_string(o, "suffix"); s && !s->empty()) {
      if (r.prompt_is_tokens)
        throw bad_request("'suffix' needs the prompt as text (the text before the insertion point)", "suffix",
                          "invalid_value");
      if (r.echo) throw bad_request("'echo' with 'suffix' is not supported", "suffix", "unsupported_value");
      r.suffix = std::move(*s);
    }
  }

  // max_completion_tokens is the newer name (chat); it wins over max_tokens when both come.
  std::optional<int64_t> mt = get_int(o, "max_completion_tokens");
  const char* mt_name = "max_completion_tokens";
  if (!mt) {
    mt = get_int(o, "max_tokens");
    mt_name = "max_tokens";
  }
  if (mt) {
    if (*mt < (r.echo ? 0 : 1))
      throw bad_request(std::string("'") + mt_name + "' must be at least 1 (0 only with echo)", mt_name,
                        "invalid_value");
    if (cfg.max_tokens > 0 && *mt > cfg.max_tokens)
      throw bad_request(std::string("'") + mt_name + "' is " + std::to_string(*mt) + ", above this server's limit of " +
                            std::to_string(cfg.max_tokens) + " tokens per request",
                        mt_name, "invalid_value");
    r.opts.max_tokens = static_cast<int32_t>(std::min<int64_t>(*mt, INT32_MAX));
    r.max_tokens_given = true;
  } else {
    r.opts.max_tokens = endpoint == Endpoint::Completion ? 16 : INT32_MAX;  // chat: fitted to the context later
    if (cfg.max_tokens > 0) r.opts.max_tokens = std::min(r.opts.max_tokens, cfg.max_tokens);
  }

  parse_sampling(o, r.opts.sampling);
  parse_logit_bias(o, cfg, r.opts.sampling);
  r.opts.stop = parse_stop(o, cfg);
  r.opts.stop_token_ids = parse_stop_token_ids(o, cfg);
  r.opts.ignore_eos = get_bool(o, "ignore_eos").value_or(false);
  parse_speculative(o, cfg, r.opts.sampling.temperature, r.opts.speculative);
  r.opts.grammar = parse_constraint(o);  // response_format, grammar (openai_constraint.cpp)
  if (endpoint == Endpoint::Chat) {
    // An empty tools array means no tools (some clients always send one).
    const json::value* t = field(o, "tools");
    if (!(t && t->is_array() && t->get_array().empty())) r.tools = parse_tools(o);
    const std::string forced = r.tools ? tool_call_grammar(*r.tools) : std::string();
    if (!forced.empty()) {
      if (!r.opts.grammar.empty())
        throw bad_request("a required tool call cannot be combined with response_format or grammar", "tool_choice",
                          "unsupported_value");
      r.opts.grammar = forced;
    }
  }
  // Chat prompts come from the template, which writes BOS itself where the model wants it.
  r.opts.add_special = endpoint == Endpoint::Completion;
  r.opts.parse_special = true;

  parse_choices(o, endpoint, cfg, r);
  r.stream = get_bool(o, "stream").value_or(false);
  if (r.echo && r.logprobs >= 0) r.opts.prompt_logprobs = r.logprobs;
  r.speculation_metrics = get_bool(o, "speculation_metrics").value_or(cfg.speculation_metrics);
  if (r.stream && r.best_of > r.n)
    throw bad_request("'best_of' greater than 'n' cannot be streamed", "best_of", "invalid_value");
  if (const json::value* so = field(o, "stream_options")) {
    if (!so->is_object()) throw wrong_type("stream_options", "an object", *so);
    if (!r.stream)
      throw bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options", "invalid_value");
    r.include_usage = get_bool(so->get_object(), "include_usage", "stream_options").value_or(false);
  }
  return r;
}

void fit_to_context(ParsedRequest& req, int32_t n_prompt, int32_t context) {
  if (n_prompt <= 0) throw bad_request("The prompt is empty", req.endpoint == Endpoint::Chat ? "messages" : "prompt", "invalid_value");
  if (n_prompt >= context)
    throw bad_request("The prompt is " + std::to_string(n_prompt) + " tokens, but the context is " +
                          std::to_string(context) + " tokens and at least one must remain for the completion",
                      req.endpoint == Endpoint::Chat ? "messages" : "prompt", "context_length_exceeded");
  req.opts.max_tokens = std::min(req.opts.max_tokens, context - n_prompt);
}

}  // namespace tandem::server
