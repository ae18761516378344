#include "apps/server/generation.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>

#include "apps/server/api_error.hpp"
#include "apps/server/server_state.hpp"

namespace tandem::server {
namespace {

// One generation request from submission to its last byte. Owned by the scheduler's
// callbacks (and the closures they post), so it lives exactly until on_done has been
// handled; everything but `stop_` is touched on the connection's strand only.
class GenerationCall : public std::enable_shared_from_this<GenerationCall> {
 public:
  GenerationCall(ServerState& state, ParsedRequest req, std::shared_ptr<Responder> out)
      : state_(state), req_(std::move(req)), out_(std::move(out)), start_(std::chrono::steady_clock::now()) {
    meta_.endpoint = req_.endpoint;
    meta_.id = new_response_id(req_.endpoint);
    meta_.created = std::time(nullptr);
    meta_.model = req_.model;
  }

  void submit(std::vector<int32_t> prompt) {
    n_prompt_ = static_cast<int64_t>(prompt.size());
    ServeRequest sr;
    sr.prompt = std::move(prompt);
    sr.opts = req_.opts;
    std::shared_ptr<GenerationCall> self = shared_from_this();
    // Scheduler thread: hand the text over to the strand and return at once.
    sr.on_text = [self](std::string_view text, int32_t) {
      if (!text.empty()) self->out_->post([self, t = std::string(text)] { self->on_text(t); });
      return !self->stop_.load(std::memory_order_relaxed);
    };
    sr.on_done = [self](const GenerateResult& r, const std::string& error) {
      self->out_->post([self, finish = r.finish, n = static_cast<int64_t>(r.tokens.size()), error] {
        self->on_done(finish, n, error);
      });
    };
    const SubmitResult res = state_.scheduler.submit(std::move(sr));
    switch (res.status) {
      case SubmitStatus::Ok: break;
      case SubmitStatus::QueueFull: throw queue_full("The server is busy (request queue full); retry shortly");
      case SubmitStatus::PromptTooLong:
        throw bad_request(res.message.empty() ? "The prompt does not fit the context" : res.message,
                          req_.endpoint == Endpoint::Chat ? "messages" : "prompt", "context_length_exceeded");
      case SubmitStatus::ShuttingDown: throw unavailable("The server is shutting down");
      case SubmitStatus::Invalid: throw bad_request(res.message.empty() ? "Invalid request" : res.message);
    }
    id_ = res.id;
    state_.request_started(id_);
    std::weak_ptr<GenerationCall> weak = self;
    out_->on_close([weak] {
      if (auto c = weak.lock()) c->client_gone();
    });
    if (state_.opts.request_timeout_s > 0) {
      out_->set_deadline(state_.opts.request_timeout_s, [weak] {
        if (auto c = weak.lock()) c->timed_out();
      });
    }
    if (req_.stream) {
      out_->begin_stream("text/event-stream");
      // OpenAI's chat streams open with the role; clients such as the official SDK's
      // helpers build the message from it.
      if (req_.endpoint == Endpoint::Chat) out_->stream(sse_event(chunk_json(meta_, "", nullptr, true, req_.include_usage)));
    }
  }

 private:
  void on_text(const std::string& text) {
    if (finished_) return;
    text_ += text;
    if (req_.stream && !out_->closed())
      out_->stream(sse_event(chunk_json(meta_, text, nullptr, false, req_.include_usage)));
  }

  void on_done(FinishReason finish, int64_t n_generated, const std::string& error) {
    if (finished_) return;
    finished_ = true;
    out_->clear_deadline();
    out_->on_close({});
    state_.request_finished(id_);
    const Usage usage{n_prompt_, n_generated};
    const char* reason = timed_out_ ? "length" : finish_reason_name(finish);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    spdlog::info("{} {}{}: prompt {} tokens, completion {} tokens, finish {}{}, {:.2f} s", meta_.id,
                 req_.endpoint == Endpoint::Chat ? "chat" : "completion", req_.stream ? " (stream)" : "", n_prompt_,
                 n_generated, error.empty() ? reason : "error",
                 stop_ ? (timed_out_ ? " (timeout)" : " (cancelled)") : "", secs);
    if (out_->closed()) return;
    if (!error.empty()) {
      const ApiError e = internal_error("Generation failed: " + error);
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
      std::string tail = sse_event(chunk_json(meta_, "", reason, false, req_.include_usage));
      if (req_.include_usage) tail += sse_event(usage_chunk_json(meta_, usage));
      tail += kSseDone;
      out_->stream(std::move(tail));
      out_->end_stream();
    } else {
      HttpResponse r;
      r.body = completion_json(meta_, text_, reason, usage);
      out_->respond(std::move(r));
    }
  }

  void client_gone() {
    if (finished_ || stop_) return;
    stop_ = true;
    state_.count_disconnect();
    state_.scheduler.cancel(id_);
  }

  void timed_out() {
    if (finished_ || stop_) return;
    stop_ = true;
    timed_out_ = true;
    state_.count_timeout();
    state_.scheduler.cancel(id_);
  }

  ServerState& state_;
  ParsedRequest req_;
  std::shared_ptr<Responder> out_;
  ResponseMeta meta_;
  std::chrono::steady_clock::time_point start_;
  uint64_t id_ = 0;
  int64_t n_prompt_ = 0;
  std::string text_;  // everything streamed so far (the non-streaming response body)
  std::atomic<bool> stop_{false};  // read by on_text on the scheduler thread
  bool timed_out_ = false, finished_ = false;
};

std::vector<int32_t> prompt_tokens(ServerState& state, const ParsedRequest& req) {
  if (req.endpoint == Endpoint::Completion) {
    if (req.prompt_is_tokens) return req.prompt_tokens;
    return state.engine.tokenize(req.prompt, req.opts.add_special, req.opts.parse_special);
  }
  std::vector<ChatMessage> messages;
  messages.reserve(req.messages.size());
  for (const InputMessage& m : req.messages) messages.push_back(ChatMessage{m.role, m.content});
  std::string text;
  try {
    text = state.chat.render(messages);
  } catch (const ChatTemplateError& e) {
    throw bad_request(std::string("The model's chat template rejected the messages: ") + e.what(), "messages",
                      "invalid_messages");
  }
  return state.chat.tokenize(state.engine, text);
}

}  // namespace

void start_generation(ServerState& state, Endpoint endpoint, std::string body, const std::shared_ptr<Responder>& out) {
  ParsedRequest req = parse_request(endpoint, body, state.protocol);
  std::vector<int32_t> prompt = prompt_tokens(state, req);
  fit_to_context(req, static_cast<int32_t>(prompt.size()), state.context);
  auto call = std::make_shared<GenerationCall>(state, std::move(req), out);
  call->submit(std::move(prompt));
}

}  // namespace tandem::server
