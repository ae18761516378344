// The seam between request handling (router, generation) and the connection that carries
// the answer (http_session). Handlers never see sockets: they hand a whole response, or
// open a chunked stream and feed it. Every method must be called on the connection's
// strand (post() gets there from other threads, e.g. the scheduler's).
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::server {

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
};

class Responder {
 public:
  virtual ~Responder() = default;
  virtual void respond(HttpResponse r) = 0;
  // 200 with Transfer-Encoding: chunked; then stream() any number of times, then end_stream().
  virtual void begin_stream(std::string_view content_type) = 0;
  virtual void stream(std::string data) = 0;
  virtual void end_stream() = 0;
  // True once the client is gone; later output is dropped.
  virtual bool closed() const = 0;
  // Runs fn on this connection's strand.
  virtual void post(std::function<void()> fn) = 0;
  // Called (on the strand) if the connection closes before the response is complete.
  virtual void on_close(std::function<void()> fn) = 0;
  // One request deadline per connection: fn runs on the strand after `seconds` unless
  // cleared first.
  virtual void set_deadline(double seconds, std::function<void()> fn) = 0;
  virtual void clear_deadline() = 0;
};

}  // namespace tandem::server
