// What every connection of `tandem serve` shares: the engine and scheduler, the chat
// template, the protocol settings, the options, and the HTTP layer's counters and list of
// requests in flight (graceful shutdown waits on and cancels those).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "apps/server/chat_prompt.hpp"
#include "apps/server/metrics_text.hpp"
#include "apps/server/openai_protocol.hpp"
#include "engine/runtime/scheduler.hpp"

namespace tandem::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;        // 0: any free port (the log line says which)
  int io_threads = 2;          // HTTP threads; generation runs on the scheduler's thread
  std::string api_key;         // non-empty: /v1/* need "Authorization: Bearer <key>"
  double request_timeout_s = 600;  // > 0: cancel a generation after this long (finish "length")
  size_t max_body = 1 << 20;   // request bodies above this → 413
  double idle_timeout_s = 60;  // connection waiting for a request's first byte this long → closed
  double header_timeout_s = 10;  // first byte to the end of the headers longer than this → 408, closed
  double body_timeout_s = 30;    // end of the headers to the end of the body longer than this → 408, closed
  int max_connections = 512;     // open connections; beyond: 503 with Retry-After, closed at once
  size_t max_template_output = 4 << 20;  // bytes a chat template may render (larger → 400)
  double write_timeout_s = 60;  // a client that does not read for this long → closed
  double drain_timeout_s = 30;  // on SIGTERM/SIGINT: wait this long for running requests
  bool metrics_vllm = false;    // --metrics-compat vllm: /metrics also has vLLM's names
};

class ServerState {
 public:
  ServerState(Engine& engine, Scheduler& scheduler, ChatPrompt chat, ProtocolConfig protocol, ServerOptions opts);

  Engine& engine;
  Scheduler& scheduler;
  const ChatPrompt chat;
  const ProtocolConfig protocol;
  const ServerOptions opts;
  const int32_t context;       // tokens per sequence
  const std::time_t created;   // reported as the model's creation time

  // Set once shutdown starts: new requests get 503, keep-alive connections close.
  bool draining() const;
  void start_draining();

  // ---- counters (thread-safe) ----
  void count_response(int status);
  void count_timeout();
  void count_disconnect();
  void connection_opened();
  void connection_closed();
  int64_t open_connections() const;
  void count_rejected_connection();  // refused with 503: --max-connections reached
  void count_read_timeout();          // headers or body too slow (408)
  HttpCounters counters() const;

  // ---- generation requests in flight, by scheduler id (thread-safe) ----
  void request_started(uint64_t id);
  void request_finished(uint64_t id);
  std::vector<uint64_t> active_requests() const;
  // True when no request is in flight, waiting until `deadline` at most.
  bool wait_no_requests(std::chrono::steady_clock::time_point deadline) const;
  // Responses whose last byte has not been written yet (streams still flushing).
  void response_opened();
  void response_closed();
  bool wait_no_responses(std::chrono::steady_clock::time_point deadline) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool draining_ = false;
  HttpCounters counters_;
  std::set<uint64_t> active_;
  int64_t open_responses_ = 0;
};

}  // namespace tandem::server
