#include "apps/server/generation.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <optional>
#include <span>

#include <boost/json/serialize.hpp>

#include "apps/server/anthropic_api.hpp"
#include "apps/server/api_error.hpp"
#include "apps/server/reply_writer.hpp"
#include "apps/server/responses_api.hpp"
#include "apps/server/server_state.hpp"
#include "engine/sampling/fresh_seed.hpp"

namespace tandem::server {
namespace {

namespace json = boost::json;

// One generation request from submission to its last byte: its choices (n, or best_of for
// completions) run as a group of scheduler requests (Scheduler::submit_group: they share the
// prompt's KV blocks). Owned by the scheduler's callbacks (and the closures they post), so it
// lives exactly until the last on_done has been handled; everything but `stop_` is touched on
// the connection's strand only.
class GenerationCall : public std::enable_shared_from_this<GenerationCall> {
 public:
  GenerationCall(ServerState& state, ParsedRequest req, std::shared_ptr<Responder> out)
      : state_(state), req_(std::move(req)), out_(std::move(out)), start_(std::chrono::steady_clock::now()) {
    meta_.endpoint = req_.endpoint;
    meta_.id = new_response_id(req_.endpoint);
    meta_.created = std::time(nullptr);
    meta_.model = req_.model;
    // A request without a seed gets a fresh one (its choices derive theirs from it), and the
    // response reports it so that the texts can be reproduced.
    meta_.seed = req_.opts.sampling.seed ? *req_.opts.sampling.seed : fresh_seed();
    bytes_ = [&engine = state_.engine](int32_t t) { return engine.detokenize(std::span<const int32_t>(&t, 1)); };
  }

  const ResponseMeta& meta() const { return meta_; }
  // Writes the reply in another API's shape (reply_writer.hpp); one choice, no logprobs.
  void set_writer(std::unique_ptr<ReplyWriter> w) { writer_ = std::move(w); }

  void submit(std::vector<int32_t> prompt) {
    n_prompt_ = static_cast<int64_t>(prompt.size());
    if (req_.echo) {
      echo_text_ = req_.prompt_is_tokens ? state_.engine.detokenize(prompt) : req_.prompt;
      echo_ids_ = prompt;
    }
    choices_.resize(static_cast<size_t>(req_.best_of));
    std::shared_ptr<GenerationCall> self = shared_from_this();
    std::vector<ServeRequest> group;
    for (int32_t i = 0; i < req_.best_of; ++i) {
      ServeRequest sr;
      sr.prompt = prompt;
      sr.opts = req_.opts;
      sr.opts.sampling.seed = choice_seed(meta_.seed, i);
      // Scheduler thread: hand the text (and logprobs) over to the strand and return at once.
      sr.on_text = [self, i](const StreamEvent& ev) {
        if (!ev.text.empty() || ev.logprobs || ev.prompt_logprobs) {
          std::optional<TokenLogprobs> lp;
          if (ev.logprobs) lp = *ev.logprobs;
          std::optional<std::vector<TokenLogprobs>> prompt_lps;
          if (ev.prompt_logprobs) prompt_lps = *ev.prompt_logprobs;
          self->out_->post([self, i, t = std::string(ev.text), lp = std::move(lp), prompt_lps = std::move(prompt_lps)] {
            if (prompt_lps) self->on_prompt_logprobs(i, *prompt_lps);
            self->on_text(i, t, lp);
          });
        }
        return !self->stop_.load(std::memory_order_relaxed);
      };
      sr.on_done = [self, i](const GenerateResult& r, const std::string& error) {
        SpeculativeMetrics spec;
        if (self->req_.speculation_metrics) {
          spec = r.speculative;
          spec.steps.clear();
        }
        self->out_->post([self, i, finish = r.finish, n = static_cast<int64_t>(r.tokens.size()), error,
                          spec = std::move(spec), stop = r.stop_string, prompt_lps = r.prompt_logprobs] {
          self->choices_[static_cast<size_t>(i)].speculation = spec;
          self->choices_[static_cast<size_t>(i)].stop_string = stop;
          self->choices_[static_cast<size_t>(i)].prompt_logprobs = std::move(prompt_lps);
          self->on_done(i, finish, n, error);
        });
      };
      group.push_back(std::move(sr));
    }
    const SubmitGroupResult res = state_.scheduler.submit_group(std::move(group));
    switch (res.status) {
      case SubmitStatus::Ok: break;
      case SubmitStatus::QueueFull: throw queue_full("The server is busy (request queue full); retry shortly");
      case SubmitStatus::PromptTooLong:
        throw bad_request(res.message.empty() ? "The prompt does not fit the context" : res.message,
                          req_.endpoint == Endpoint::Chat ? "messages" : "prompt", "context_length_exceeded");
      case SubmitStatus::ShuttingDown: throw unavailable("The server is shutting down");
      case SubmitStatus::Invalid: throw bad_request(res.message.empty() ? "Invalid request" : res.message);
    }
    for (size_t i = 0; i < choices_.size(); ++i) {
      choices_[i].id = res.ids[i];
      state_.request_started(res.ids[i]);
    }
    std::weak_ptr<GenerationCall> weak = self;
    out_->on_close([weak] {
      if (auto c = weak.lock()) c->client_gone();
    });
    if (state_.opts.request_timeout_s > 0) {
      out_->set_deadline(state_.opts.request_timeout_s, [weak] {
        if (auto c = weak.lock()) c->timed_out();
      });
    }
    if (req_.stream && writer_) {
      out_->begin_stream("text/event-stream");
      out_->stream(writer_->stream_start(n_prompt_));
    } else if (req_.stream) {
      out_->begin_stream("text/event-stream");
      // OpenAI's chat streams open with the role (per choice); clients such as the official
      // SDK's helpers build the message from it.
      if (req_.endpoint == Endpoint::Chat)
        for (int32_t i = 0; i < req_.n; ++i) {
          ChoiceOut c;
          c.index = i;
          out_->stream(sse_event(chunk_json(meta_, c, true, req_.include_usage, bytes_)));
        }
      // An echoed prompt opens each choice; with logprobs, once the prompt is scored
      // (on_prompt_logprobs).
      if (req_.echo && !echo_text_.empty() && !logprobs_out())
        for (int32_t i = 0; i < req_.n; ++i) {
          ChoiceOut c;
          c.index = i;
          c.text = echo_text_;
          out_->stream(sse_event(chunk_json(meta_, c, false, req_.include_usage, bytes_)));
        }
    }
  }

 private:
  struct Choice {
    uint64_t id = 0;
    std::string text;  // everything generated so far (the non-streaming response body)
    std::vector<TokenLogprobs> logprobs;
    std::vector<TokenLogprobs> prompt_logprobs;  // echo with logprobs: the prompt's, from the result
    std::vector<TokenLogprobs> echoed;           // and the response's list: the prompt's, then `logprobs`
    bool echo_streamed = false;  // streamed echo with logprobs: its prompt chunk went out
    size_t streamed_logprobs = 0;  // of `logprobs`, how many went out in chunks
    int64_t text_offset = 0;       // completions' text_offset of the next chunk
    FinishReason finish = FinishReason::Length;
    int64_t n_generated = 0;
    SpeculativeMetrics speculation;  // its speculation figures, once done
    std::string stop_string;         // the stop string that ended it, if one did
    bool done = false;
    // Tool calls (tools_out()): streamed text passes this filter, which holds call blocks
    // back; the calls parsed out at the end, and the content left around them.
    ToolStreamFilter filter;
    std::vector<ToolCall> calls;
    std::string content;
  };

  bool logprobs_out() const { return req_.logprobs >= 0; }
  bool tools_out() const { return req_.endpoint == Endpoint::Chat && req_.tools && req_.tools->parse_output(); }
  const std::vector<ToolSpec>& tool_specs() const { return req_.tools->tools; }

  // Echo with logprobs, streamed: the prompt and its logprobs open choice i's content, before
  // its first generated token's chunk; the first prompt token has none.
  void on_prompt_logprobs(int32_t i, const std::vector<TokenLogprobs>& prompt_lps) {
    Choice& c = choices_[static_cast<size_t>(i)];
    if (finished_ || !req_.stream || !req_.echo || !logprobs_out() || c.echo_streamed || out_->closed()) return;
    c.echo_streamed = true;
    if (echo_ids_.empty()) return;
    std::vector<TokenLogprobs> lps{echoed_first()};
    lps.insert(lps.end(), prompt_lps.begin(), prompt_lps.end());
    ChoiceOut o;
    o.index = i;
    o.text = echo_text_;
    o.logprobs = &lps;
    o.text_offset = c.text_offset;
    c.text_offset += text_length(lps, bytes_);
    out_->stream(sse_event(chunk_json(meta_, o, false, req_.include_usage, bytes_)));
  }
  // The echoed prompt's first entry: its token, with no logprob (nothing comes before it).
  TokenLogprobs echoed_first() const {
    return TokenLogprobs{{echo_ids_.front(), std::numeric_limits<float>::quiet_NaN()}, {}};
  }

  // One content chunk of choice i: `text` and the logprobs of the tokens not yet streamed.
  void stream_piece(int32_t i, std::string_view text) {
    if (writer_) {
      if (!text.empty()) out_->stream(writer_->stream_text(text));
      return;
    }
    Choice& c = choices_[static_cast<size_t>(i)];
    ChoiceOut o;
    o.index = i;
    o.text = text;
    std::vector<TokenLogprobs> pending;
    if (logprobs_out()) {
      pending.assign(c.logprobs.begin() + static_cast<std::ptrdiff_t>(c.streamed_logprobs), c.logprobs.end());
      c.streamed_logprobs = c.logprobs.size();
      o.logprobs = &pending;
      o.text_offset = c.text_offset;
      c.text_offset += text_length(pending, bytes_);
    }
    out_->stream(sse_event(chunk_json(meta_, o, false, req_.include_usage, bytes_)));
  }

  void on_text(int32_t i, const std::string& text, const std::optional<TokenLogprobs>& lp) {
    if (finished_) return;
    Choice& c = choices_[static_cast<size_t>(i)];
    c.text += text;
    if (lp) c.logprobs.push_back(*lp);
    // A token whose text is held back (an incomplete character or stop string) goes out with
    // the chunk that has its text.
    if (!req_.stream || out_->closed() || text.empty()) return;
    if (!tools_out()) {
      stream_piece(i, text);
      return;
    }
    const std::string piece = c.filter.push(text);
    if (!piece.empty()) stream_piece(i, piece);
  }

  void on_done(int32_t i, FinishReason finish, int64_t n_generated, const std::string& error) {
    if (finished_) return;
    Choice& c = choices_[static_cast<size_t>(i)];
    c.done = true;
    c.finish = finish;
    c.n_generated = n_generated;
    if (!error.empty() && error_.empty()) {
      error_ = error;
      cancel_all();  // the response is an error now: the other choices' work is wasted
    }
    if (req_.stream && error_.empty() && !out_->closed()) {
      // A choice that streamed no token (nothing generated, or an end-of-generation token
      // first) echoes its prompt from the result.
      on_prompt_logprobs(i, c.prompt_logprobs);
      if (tools_out()) {
        // What the filter held: content to send, and the calls, in one delta.
        ToolOutput rest = c.filter.finish(tool_specs());
        if (!rest.content.empty()) stream_piece(i, rest.content);
        c.calls = std::move(rest.calls);
        if (!c.calls.empty() && !writer_) {
          ChoiceOut o;
          o.index = i;
          o.tool_calls = &c.calls;
          out_->stream(sse_event(chunk_json(meta_, o, false, req_.include_usage, bytes_)));
        }
      }
      // Logprobs of tokens whose text never came (a stop string's) close the choice's content.
      if (logprobs_out() && c.streamed_logprobs < c.logprobs.size()) stream_piece(i, "");
      if (!writer_) {
        ChoiceOut o;
        o.index = i;
        o.finish_reason = reason(c);
        out_->stream(sse_event(chunk_json(meta_, o, false, req_.include_usage, bytes_)));
      }
    }
    if (++n_done_ < choices_.size()) return;
    finish_response();
  }

  const char* reason(const Choice& c) const {
    if (timed_out_) return "length";
    return c.calls.empty() ? finish_reason_name(c.finish) : "tool_calls";
  }

  void finish_response() {
    finished_ = true;
    out_->clear_deadline();
    out_->on_close({});
    int64_t n_generated = 0;
    Usage usage{n_prompt_, 0, std::nullopt};
    if (req_.speculation_metrics) usage.speculation.emplace();
    for (const Choice& c : choices_) {
      state_.request_finished(c.id);
      n_generated += c.n_generated;
      if (usage.speculation) usage.speculation->merge(c.speculation);
    }
    usage.completion_tokens = n_generated;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    spdlog::info("{} {}{}: prompt {} tokens, {} choice(s), completion {} tokens, finish {}{}, {:.2f} s", meta_.id,
                 writer_ ? writer_->api() : req_.endpoint == Endpoint::Chat ? "chat" : "completion",
                 req_.stream ? " (stream)" : "", n_prompt_,
                 choices_.size(), n_generated, error_.empty() ? reason(choices_[0]) : "error",
                 stop_ ? (timed_out_ ? " (timeout)" : " (cancelled)") : "", secs);
    if (out_->closed()) return;
    if (writer_) {
      finish_reply(usage);
      return;
    }
    if (!error_.empty()) {
      const ApiError e = internal_error("Generation failed: " + error_);
      if (req_.stream) {
        out_->stream(sse_event(error_body(e)));
        out_->stream(std::string(kSseDone));
        out_->end_stream();
      } else {
        out_->respond(error_response(e));
      }
      return;
    }
    if (req_.stream) {
      std::string tail;
      if (req_.include_usage) tail += sse_event(usage_chunk_json(meta_, usage));
      tail += kSseDone;
      out_->stream(std::move(tail));
      out_->end_stream();
      return;
    }
    if (tools_out())
      for (Choice& c : choices_) {
        ToolOutput t = parse_tool_calls(c.text, tool_specs());
        c.calls = std::move(t.calls);
        c.content = std::move(t.content);
      }
    if (req_.echo)
      for (Choice& c : choices_) {
        c.text.insert(0, echo_text_);
        if (!logprobs_out()) continue;
        // The prompt's tokens first; the first has no logprob (nothing comes before it).
        c.echoed.reserve(echo_ids_.size() + c.logprobs.size());
        c.echoed.push_back(echoed_first());
        c.echoed.insert(c.echoed.end(), c.prompt_logprobs.begin(), c.prompt_logprobs.end());
        c.echoed.insert(c.echoed.end(), c.logprobs.begin(), c.logprobs.end());
      }
    HttpResponse r;
    r.body = completion_json(meta_, returned_choices(), usage, bytes_);
    out_->respond(std::move(r));
  }

  // The end of a reply written by writer_ (one choice): its last events, its body or its error.
  void finish_reply(const Usage& usage) {
    if (!error_.empty()) {
      const ApiError e = internal_error("Generation failed: " + error_);
      if (req_.stream) {
        out_->stream(writer_->stream_error(e));
        out_->end_stream();
      } else {
        out_->respond(writer_->error(e));
      }
      return;
    }
    Choice& c = choices_.front();
    ReplyInfo info;
    info.finish = c.finish;
    info.stop_string = c.stop_string;
    info.timed_out = timed_out_;
    info.usage = usage;
    if (req_.stream) {
      info.calls = c.calls;  // the text went out as it came
      out_->stream(writer_->stream_end(info));
      out_->end_stream();
      return;
    }
    if (tools_out()) {
      ToolOutput t = parse_tool_calls(c.text, tool_specs());
      info.text = std::move(t.content);
      info.calls = std::move(t.calls);
    } else {
      info.text = c.text;
    }
    HttpResponse r;
    r.body = writer_->body(info);
    out_->respond(std::move(r));
  }

  // The n choices of the response: all of them, or with best_of the n of highest mean token
  // logprob (OpenAI's "highest log probability per token"), best first.
  std::vector<ChoiceOut> returned_choices() const {
    std::vector<size_t> order(choices_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (req_.best_of > req_.n) {
      auto mean = [&](size_t i) {
        const auto& lps = choices_[i].logprobs;
        if (lps.empty()) return -std::numeric_limits<double>::infinity();
        double s = 0.0;
        for (const TokenLogprobs& lp : lps) s += lp.chosen.logprob;
        return s / static_cast<double>(lps.size());
      };
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return mean(a) > mean(b); });
      order.resize(static_cast<size_t>(req_.n));
    }
    std::vector<ChoiceOut> out;
    for (size_t k = 0; k < order.size(); ++k) {
      const Choice& c = choices_[order[k]];
      ChoiceOut o;
      o.index = static_cast<int32_t>(k);
      o.text = c.text;
      if (!c.calls.empty()) {
        o.text = c.content;
        o.tool_calls = &c.calls;
      }
      o.finish_reason = reason(c);
      if (logprobs_out()) o.logprobs = req_.echo ? &c.echoed : &c.logprobs;
      out.push_back(o);
    }
    return out;
  }

  void cancel_all() {
    for (const Choice& c : choices_)
      if (!c.done) state_.scheduler.cancel(c.id);
  }

  void client_gone() {
    if (finished_ || stop_) return;
    stop_ = true;
    state_.count_disconnect();
    cancel_all();
  }

  void timed_out() {
    if (finished_ || stop_) return;
    stop_ = true;
    timed_out_ = true;
    state_.count_timeout();
    cancel_all();
  }

  ServerState& state_;
  ParsedRequest req_;
  std::shared_ptr<Responder> out_;
  ResponseMeta meta_;
  TokenBytes bytes_;
  std::unique_ptr<ReplyWriter> writer_;  // another API's shape (null: Chat Completions)
  std::chrono::steady_clock::time_point start_;
  int64_t n_prompt_ = 0;
  std::string echo_text_;          // echo: the prompt as the choices' texts begin
  std::vector<int32_t> echo_ids_;  // and its tokens
  std::vector<Choice> choices_;
  size_t n_done_ = 0;
  std::string error_;  // the first choice's failure: the whole response is then an error
  std::atomic<bool> stop_{false};  // read by on_text on the scheduler thread
  bool timed_out_ = false, finished_ = false;
};

// A conversation with tools or tool calls, for the chat template. A template that renders
// `tools` itself gets them, and the messages as OpenAI sent them (tool_calls, tool_call_id);
// for one that does not, the tools are described in the system message and calls and
// results are written into the text in the format that description asks for.
std::string render_with_tools(const ChatPrompt& chat, const ParsedRequest& req) {
  const bool native = chat.renders_tools();
  json::array messages;
  for (const InputMessage& m : req.messages) {
    json::object o;
    o["role"] = m.role;
    std::string content = m.content;
    if (!native && !m.tool_calls.empty()) {
      for (const json::value& c : m.tool_calls) {
        const json::object& f = c.at("function").as_object();
        if (!content.empty()) content += '\n';
        content.append("<tool_call>\n")
            .append(json::serialize(json::object{{"name", f.at("name")}, {"arguments", f.at("arguments")}}))
            .append("\n</tool_call>");
      }
    }
    if (!native && m.role == "tool") {
      o["role"] = "user";
      content = std::string("<tool_response>\n").append(content).append("\n</tool_response>");
    }
    o["content"] = content;
    if (native && !m.tool_calls.empty()) o["tool_calls"] = m.tool_calls;
    if (native && !m.tool_call_id.empty()) o["tool_call_id"] = m.tool_call_id;
    messages.push_back(std::move(o));
  }
  if (!native && req.tools) {
    const std::string tools_text = tools_system_prompt(*req.tools);
    if (!messages.empty() && messages[0].as_object().at("role") == "system") {
      json::object& sys = messages[0].as_object();
      sys["content"] = std::string(sys.at("content").as_string()) + "\n\n" + tools_text;
    } else {
      messages.insert(messages.begin(), json::object{{"role", "system"}, {"content", tools_text}});
    }
  }
  json::object vars;
  vars["messages"] = std::move(messages);
  if (native && req.tools) vars["tools"] = req.tools->tools_json;
  vars["add_generation_prompt"] = true;
  vars["bos_token"] = chat.bos_token();
  vars["eos_token"] = chat.eos_token();
  return chat.render_json(json::serialize(vars));
}

bool has_tool_parts(const ParsedRequest& req) {
  if (req.tools) return true;
  for (const InputMessage& m : req.messages)
    if (!m.tool_calls.empty() || m.role == "tool") return true;
  return false;
}

}  // namespace

std::vector<int32_t> prompt_tokens(ServerState& state, const ParsedRequest& req) {
  if (req.endpoint == Endpoint::Completion) {
    if (req.prompt_is_tokens) return req.prompt_tokens;
    if (!req.suffix.empty()) {
      try {
        return state.engine.fim_prompt(req.prompt, req.suffix);
      } catch (const std::invalid_argument& e) {
        throw bad_request(e.what(), "suffix", "unsupported_value");
      }
    }
    return state.engine.tokenize(req.prompt, req.opts.add_special, req.opts.parse_special);
  }
  std::vector<ChatMessage> messages;
  messages.reserve(req.messages.size());
  for (const InputMessage& m : req.messages) messages.push_back(ChatMessage{m.role, m.content});
  std::string text;
  try {
    text = has_tool_parts(req) ? render_with_tools(state.chat, req) : state.chat.render(messages);
  } catch (const ChatTemplateError& e) {
    throw bad_request(std::string("The model's chat template rejected the messages: ") + e.what(), "messages",
                      "invalid_messages");
  }
  return state.chat.tokenize(state.engine, text);
}

void start_reply_generation(ServerState& state, ReplyApi api, std::string body, const std::shared_ptr<Responder>& out) {
  const std::string chat = api == ReplyApi::Responses ? responses_to_chat(body) : messages_to_chat(body);
  ParsedRequest req = parse_request(Endpoint::Chat, chat, state.protocol);
  std::vector<int32_t> prompt = prompt_tokens(state, req);
  fit_to_context(req, static_cast<int32_t>(prompt.size()), state.context);
  auto call = std::make_shared<GenerationCall>(state, std::move(req), out);
  call->set_writer(api == ReplyApi::Responses ? responses_writer(call->meta(), body) : messages_writer(call->meta()));
  call->submit(std::move(prompt));
}

void start_generation(ServerState& state, Endpoint endpoint, std::string body, const std::shared_ptr<Responder>& out) {
  ParsedRequest req = parse_request(endpoint, body, state.protocol);
  std::vector<int32_t> prompt = prompt_tokens(state, req);
  fit_to_context(req, static_cast<int32_t>(prompt.size()), state.context);
  auto call = std::make_shared<GenerationCall>(state, std::move(req), out);
  call->submit(std::move(prompt));
}

}  // namespace tandem::server
