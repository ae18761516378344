#include "apps/server/server_state.hpp"

namespace tandem::server {

ServerState::ServerState(Engine& engine, Scheduler& scheduler, ChatPrompt chat, ProtocolConfig protocol,
                         ServerOptions opts)
    : engine(engine),
      scheduler(scheduler),
      chat(std::move(chat)),
      protocol(std::move(protocol)),
      opts(std::move(opts)),
      context(engine.info().context),
      created(std::time(nullptr)) {}

bool ServerState::draining() const {
  std::lock_guard lk(mu_);
  return draining_;
}

void ServerState::start_draining() {
  std::lock_guard lk(mu_);
  draining_ = true;
}

void ServerState::count_response(int status) {
  std::lock_guard lk(mu_);
  ++counters_.responses_by_status[status];
}

void ServerState::count_timeout() {
  std::lock_guard lk(mu_);
  ++counters_.timeouts;
}

void ServerState::count_disconnect() {
  std::lock_guard lk(mu_);
  ++counters_.client_disconnects;
}

void ServerState::connection_opened() {
  std::lock_guard lk(mu_);
  ++counters_.open_connections;
}

void ServerState::connection_closed() {
  std::lock_guard lk(mu_);
  --counters_.open_connections;
}

int64_t ServerState::open_connections() const {
  std::lock_guard lk(mu_);
  return counters_.open_connections;
}

void ServerState::count_rejected_connection() {
  std::lock_guard lk(mu_);
  ++counters_.rejected_connections;
}

void ServerState::count_read_timeout() {
  std::lock_guard lk(mu_);
  ++counters_.read_timeouts;
}

HttpCounters ServerState::counters() const {
  std::lock_guard lk(mu_);
  HttpCounters c = counters_;
  c.active_requests = static_cast<int64_t>(active_.size());
  return c;
}

void ServerState::request_started(uint64_t id) {
  std::lock_guard lk(mu_);
  active_.insert(id);
}

void ServerState::request_finished(uint64_t id) {
  {
    std::lock_guard lk(mu_);
    active_.erase(id);
  }
  cv_.notify_all();
}

std::vector<uint64_t> ServerState::active_requests() const {
  std::lock_guard lk(mu_);
  return {active_.begin(), active_.end()};
}

bool ServerState::wait_no_requests(std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock lk(mu_);
  return cv_.wait_until(lk, deadline, [&] { return active_.empty(); });
}

void ServerState::response_opened() {
  std::lock_guard lk(mu_);
  ++open_responses_;
}

void ServerState::response_closed() {
  {
    std::lock_guard lk(mu_);
    --open_responses_;
  }
  cv_.notify_all();
}

bool ServerState::wait_no_responses(std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock lk(mu_);
  return cv_.wait_until(lk, deadline, [&] { return open_responses_ <= 0; });
}

}  // namespace tandem::server
