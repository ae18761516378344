#include "apps/server/http_session.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <optional>

#include "apps/server/api_error.hpp"
#include "apps/server/responder.hpp"
#include "apps/server/router.hpp"
#include "apps/server/server_state.hpp"

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;

namespace tandem::server {
namespace {

constexpr size_t kHeaderLimit = 16 * 1024;
// Pipelined bytes buffered while a generation runs; beyond this the session stops
// watching (and so stops noticing a disconnect before its next write).
constexpr size_t kWatchBufferLimit = 64 * 1024;

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

// A timer whose stale completions are ignored: cancel() can race with an expiry that is
// already queued, so each arm() bumps an epoch the handler checks.
class Deadline {
 public:
  explicit Deadline(const net::any_io_executor& ex) : timer_(ex) {}
  template <class Fn>
  void arm(double secs, Fn fn) {
    const uint64_t epoch = ++epoch_;
    timer_.expires_after(seconds(secs));
    timer_.async_wait([this, epoch, fn = std::move(fn)](error_code ec) mutable {
      if (!ec && epoch == epoch_) fn();
    });
  }
  void cancel() {
    ++epoch_;
    timer_.cancel();
  }

 private:
  net::steady_timer timer_;
  uint64_t epoch_ = 0;
};

// Templated on the socket so the fuzz harness (tests/fuzz/fuzz_http.cpp) runs this very
// code over a local socket pair; the server instantiates it for TCP.
template <class Socket>
class HttpSession : public Responder, public std::enable_shared_from_this<HttpSession<Socket>> {
 public:
  HttpSession(Socket socket, ServerState& state)
      : socket_(std::move(socket)),
        state_(state),
        read_deadline_(socket_.get_executor()),
        write_deadline_(socket_.get_executor()),
        request_deadline_(socket_.get_executor()) {
    state_.connection_opened();
  }
  ~HttpSession() override { state_.connection_closed(); }

  void start() {
    net::dispatch(socket_.get_executor(), [self = this->shared_from_this()] { self->read_request(); });
  }

  // ---- Responder ----
  void respond(HttpResponse r) override {
    if (closed_ || !in_request_) return;
    status_ = r.status;
    std::string head = status_line(r.status);
    head += "Content-Type: " + r.content_type + "\r\nContent-Length: " + std::to_string(r.body.size()) + "\r\n";
    finish_head(head, r.headers);
    queue(std::move(head));
    queue(std::move(r.body));
    response_complete();
  }

  void begin_stream(std::string_view content_type) override {
    if (closed_ || !in_request_) return;
    status_ = 200;
    chunked_ = version_ >= 11;  // HTTP/1.0 has no chunking: the stream ends with the connection
    if (!chunked_) keep_alive_ = false;
    std::string head = status_line(200);
    head.append("Content-Type: ").append(content_type).append("\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\n");
    if (chunked_) head += "Transfer-Encoding: chunked\r\n";
    finish_head(head, {});
    queue(std::move(head));
  }

  void stream(std::string data) override {
    if (closed_ || !in_request_ || data.empty()) return;
    if (chunked_) {
      char size[20];
      const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
      pending_.append(size, static_cast<size_t>(n));
      pending_ += data;
      pending_ += "\r\n";
      flush();
    } else {
      queue(std::move(data));
    }
  }

  void end_stream() override {
    if (closed_ || !in_request_) return;
    if (chunked_) queue("0\r\n\r\n");
    response_complete();
  }

  bool closed() const override { return closed_; }

  void post(std::function<void()> fn) override {
    net::post(socket_.get_executor(), [self = this->shared_from_this(), fn = std::move(fn)] { fn(); });
  }

  void on_close(std::function<void()> fn) override { on_close_ = std::move(fn); }

  void set_deadline(double secs, std::function<void()> fn) override {
    request_deadline_.arm(secs, [self = this->shared_from_this(), fn = std::move(fn)] { fn(); });
  }
  void clear_deadline() override { request_deadline_.cancel(); }

 private:
  // ---- reading ----
  void read_request() {
    if (closed_) return;
    if (state_.draining()) {  // no new requests on kept-alive connections during shutdown
      close();
      return;
    }
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(state_.opts.max_body);
    read_timed_out_ = nullptr;
    if (buffer_.size() > 0) return read_header();  // a pipelined request is already here
    // Idle until the request's first byte; from then on the header timeout runs.
    read_deadline_.arm(state_.opts.idle_timeout_s, [self = this->shared_from_this()] { self->close(); });
    socket_.async_wait(Socket::wait_read, [self = this->shared_from_this()](error_code ec) {
      if (self->closed_) return;
      if (ec) return self->read_failed(ec);
      self->read_header();
    });
  }

  void read_header() {
    read_deadline_.arm(state_.opts.header_timeout_s,
                       [self = this->shared_from_this()] { self->read_too_slow("headers"); });
    http::async_read_header(socket_, buffer_, *parser_,
                            [self = this->shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
  }

  // A slow client (slow-loris): cancel the read; its handler answers 408 and closes.
  void read_too_slow(const char* what) {
    read_timed_out_ = what;
    error_code ignored;
    socket_.cancel(ignored);
  }

  void on_header(error_code ec) {
    if (closed_) return;
    if (ec) return read_failed(ec);
    read_timed_out_ = nullptr;  // an expiry that raced with the completion
    read_deadline_.arm(state_.opts.body_timeout_s, [self = this->shared_from_this()] { self->read_too_slow("body"); });
    const auto& req = parser_->get();
    // From the header itself (the parser has validated it): refuse a body that will not fit
    // before it is sent. (Not parser_->content_length(): its boost::optional trips GCC's
    // -Wmaybe-uninitialized in sanitizer builds.)
    const auto cl = req[http::field::content_length];
    uint64_t len = 0;
    if (!cl.empty() && std::from_chars(cl.data(), cl.data() + cl.size(), len).ec == std::errc() &&
        len > state_.opts.max_body) {
      begin_request(req.version(), false);
      return reject(payload_too_large(state_.opts.max_body));
    }
    // curl and others wait for this before sending a large body.
    if (req[http::field::expect] == "100-continue") {
      queue("HTTP/1.1 100 Continue\r\n\r\n");
    }
    http::async_read(socket_, buffer_, *parser_, [self = this->shared_from_this()](error_code ec, size_t) { self->on_body(ec); });
  }

  void on_body(error_code ec) {
    if (closed_) return;
    read_deadline_.cancel();
    if (ec) return read_failed(ec);
    http::request<http::string_body> req = parser_->release();
    parser_.reset();
    begin_request(req.version(), req.keep_alive());
    RequestView view;
    view.method = std::string(req.method_string());
    view.target = std::string(req.target());
    view.authorization = std::string(req[http::field::authorization]);
    view.api_key = std::string(req["x-api-key"]);
    view.body = std::move(req.body());
    method_ = view.method;
    target_ = view.target;
    dispatch(state_, std::move(view), this->shared_from_this());
    // Still open: a generation is running, so watch for the client going away.
    if (in_request_ && !response_complete_) watch();
  }

  void read_failed(error_code ec) {
    read_deadline_.cancel();
    if (read_timed_out_ && ec == net::error::operation_aborted) {
      state_.count_read_timeout();
      begin_request(11, false);
      reject(ApiError(408, std::string("Request ") + read_timed_out_ + " not received in time (" +
                               std::to_string(read_timed_out_[0] == 'h' ? state_.opts.header_timeout_s
                                                                         : state_.opts.body_timeout_s) +
                               " s)",
                      "invalid_request_error", "request_timeout"));
    } else if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::operation_aborted ||
        ec == net::error::connection_reset || ec == http::error::partial_message) {
      close();  // client closed (or the idle timer did)
    } else if (ec == http::error::body_limit) {
      begin_request(11, false);
      reject(payload_too_large(state_.opts.max_body));
    } else if (ec == http::error::header_limit) {
      begin_request(11, false);
      reject(ApiError(431, "Request headers too large", "invalid_request_error", "headers_too_large"));
    } else {
      begin_request(11, false);
      reject(bad_request("Malformed HTTP request: " + ec.message(), {}, "bad_http"));
    }
  }

  void reject(const ApiError& e) {
    keep_alive_ = false;  // the rest of the stream cannot be trusted to be a request
    respond(error_response(e));
  }

  void begin_request(unsigned version, bool keep_alive) {
    in_request_ = true;
    response_complete_ = false;
    chunked_ = false;
    status_ = 0;
    version_ = version;
    keep_alive_ = keep_alive && !state_.draining();
    started_ = std::chrono::steady_clock::now();
    state_.response_opened();
  }

  void watch() {
    if (closed_ || watching_ || buffer_.size() >= kWatchBufferLimit) return;
    watching_ = true;
    socket_.async_read_some(buffer_.prepare(4096), [self = this->shared_from_this()](error_code ec, size_t n) {
      self->on_watch(ec, n);
    });
  }

  void on_watch(error_code ec, size_t n) {
    watching_ = false;
    if (!ec) buffer_.commit(n);  // a pipelined request: kept for the parser
    if (closed_) return;
    if (lingering_) return drain();
    if (in_request_) {
      if (ec && ec != net::error::operation_aborted) {
        close();  // the client went away mid-request: on_close_ cancels the generation
      } else if (!response_complete_) {
        watch();
      }
      return;
    }
    // The response is done and the watch was cancelled (or returned data): next request.
    read_request();
  }

  // ---- writing ----
  std::string status_line(int status) const {
    const auto reason = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
    std::string line = version_ >= 11 ? "HTTP/1.1 " : "HTTP/1.0 ";
    line.append(std::to_string(status)).append(" ").append(reason.data(), reason.size()).append("\r\nServer: tandem\r\n");
    return line;
  }

  void finish_head(std::string& head, const std::vector<std::pair<std::string, std::string>>& extra) const {
    for (const auto& [k, v] : extra) head += k + ": " + v + "\r\n";
    head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  }

  void queue(std::string bytes) {
    pending_ += bytes;
    flush();
  }

  void flush() {
    if (writing_ || closed_ || pending_.empty()) return;
    writing_ = true;
    inflight_.swap(pending_);
    write_deadline_.arm(state_.opts.write_timeout_s, [self = this->shared_from_this()] { self->close(); });
    net::async_write(socket_, net::buffer(inflight_),
                     [self = this->shared_from_this()](error_code ec, size_t) { self->on_write(ec); });
  }

  void on_write(error_code ec) {
    writing_ = false;
    write_deadline_.cancel();
    inflight_.clear();
    if (closed_) return;
    if (ec) {
      close();  // broken pipe / reset: the client is gone
      return;
    }
    if (!pending_.empty()) {
      flush();
    } else if (response_complete_ && in_request_) {
      response_written();
    }
  }

  void response_complete() {
    response_complete_ = true;
    if (!writing_ && pending_.empty()) response_written();
  }

  // The last byte of the response is on its way: count it, then next request or close.
  void response_written() {
    in_request_ = false;
    finish_response();
    if (!keep_alive_) {
      linger_close();
    } else if (watching_) {
      error_code ignored;
      socket_.cancel(ignored);  // on_watch then reads the next request
    } else {
      read_request();
    }
  }

  // Closing with unread request bytes makes the kernel send a reset, which can destroy the
  // response (a 413 most of all) before the client reads it. So: half-close, read and drop
  // what the client still sends for a short while, then close.
  void linger_close() {
    lingering_ = true;
    error_code ignored;
    socket_.shutdown(Socket::shutdown_send, ignored);
    read_deadline_.arm(2.0, [self = this->shared_from_this()] { self->close(); });
    if (watching_) socket_.cancel(ignored);  // on_watch continues with drain()
    else drain();
  }

  void drain() {
    socket_.async_read_some(net::buffer(discard_), [self = this->shared_from_this()](error_code ec, size_t) {
      if (ec || self->closed_) return self->close();
      self->drain();
    });
  }

  void finish_response() {
    if (status_ == 0) return;
    state_.count_response(status_);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started_).count();
    spdlog::debug("{} {} → {} ({:.1f} ms)", method_, target_, status_, ms);
    status_ = 0;
    state_.response_closed();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    read_deadline_.cancel();
    write_deadline_.cancel();
    request_deadline_.cancel();
    error_code ignored;
    socket_.shutdown(Socket::shutdown_both, ignored);
    socket_.close(ignored);
    if (in_request_) {
      in_request_ = false;
      if (status_ == 0) status_ = 499;  // nginx's "client closed request", for the counters
      finish_response();
      if (auto fn = std::move(on_close_)) fn();
    }
    on_close_ = nullptr;
  }

  Socket socket_;
  ServerState& state_;
  Deadline read_deadline_, write_deadline_, request_deadline_;
  boost::beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string pending_, inflight_;  // bytes queued / being written
  std::function<void()> on_close_;
  std::string method_, target_;
  std::chrono::steady_clock::time_point started_;
  unsigned version_ = 11;
  int status_ = 0;  // of the response under way; 0 when none has been started
  bool in_request_ = false, response_complete_ = false, keep_alive_ = false, chunked_ = false;
  bool writing_ = false, watching_ = false, lingering_ = false, closed_ = false;
  const char* read_timed_out_ = nullptr;  // "headers" / "body" once that read took too long
  std::array<char, 4096> discard_{};
};

// A connection over --max-connections: a 503 with Retry-After, without reading the request,
// then closed (after reading and dropping what the client still sends for a moment, so the
// kernel does not reset the connection before the client has read the answer). At most
// kMaxRefusing are under way at once; beyond that a connection is closed unanswered, so a
// flood of connections costs a bounded number of sockets.
constexpr int kMaxRefusing = 64;
std::atomic<int> g_refusing{0};

class Refusal : public std::enable_shared_from_this<Refusal> {
 public:
  explicit Refusal(tcp::socket socket) : socket_(std::move(socket)), deadline_(socket_.get_executor()) { ++g_refusing; }
  ~Refusal() { --g_refusing; }
  net::any_io_executor executor() { return socket_.get_executor(); }

  void start(const ApiError& e) {
    const HttpResponse r = error_response(e);
    const auto reason = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(r.status)));
    bytes_ = "HTTP/1.1 " + std::to_string(r.status) + " " + std::string(reason) + "\r\nServer: tandem\r\n";
    bytes_ += "Content-Type: " + r.content_type + "\r\nContent-Length: " + std::to_string(r.body.size()) + "\r\n";
    for (const auto& [k, v] : r.headers) bytes_ += k + ": " + v + "\r\n";
    bytes_ += "Connection: close\r\n\r\n" + r.body;
    deadline_.arm(2.0, [self = shared_from_this()] { self->close(); });
    net::async_write(socket_, net::buffer(bytes_), [self = shared_from_this()](error_code ec, size_t) {
      if (ec) return self->close();
      error_code ignored;
      self->socket_.shutdown(tcp::socket::shutdown_send, ignored);
      self->drain();
    });
  }

 private:
  void drain() {
    socket_.async_read_some(net::buffer(discard_), [self = shared_from_this()](error_code ec, size_t) {
      if (ec) return self->close();
      self->drain();
    });
  }
  void close() {
    deadline_.cancel();
    error_code ignored;
    socket_.close(ignored);
  }

  tcp::socket socket_;
  Deadline deadline_;
  std::string bytes_;
  std::array<char, 1024> discard_{};
};

}  // namespace

void start_session(tcp::socket socket, ServerState& state) {
  if (state.open_connections() >= state.opts.max_connections) {
    state.count_rejected_connection();
    if (g_refusing.load() >= kMaxRefusing) {
      error_code ignored;
      socket.close(ignored);
      return;
    }
    ApiError e(503, "Too many open connections (the server's limit is " + std::to_string(state.opts.max_connections) +
                        "); retry shortly",
               "server_error", "too_many_connections");
    e.retry_after_s = 1;
    auto r = std::make_shared<Refusal>(std::move(socket));
    net::dispatch(r->executor(), [r, e] { r->start(e); });
    return;
  }
  std::make_shared<HttpSession<tcp::socket>>(std::move(socket), state)->start();
}

void start_session(net::local::stream_protocol::socket socket, ServerState& state) {
  std::make_shared<HttpSession<net::local::stream_protocol::socket>>(std::move(socket), state)->start();
}

}  // namespace tandem::server
