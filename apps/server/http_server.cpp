#include "apps/server/http_server.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/strand.hpp>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "apps/server/http_session.hpp"
#include "apps/server/server_state.hpp"

namespace net = boost::asio;
using tcp = net::ip::tcp;
using boost::system::error_code;

namespace tandem::server {
namespace {

// Signals seen so far; the main thread waits for the first and the drain watches for a second.
class SignalLatch {
 public:
  void raise() {
    {
      std::lock_guard lk(mu_);
      ++count_;
    }
    cv_.notify_all();
  }
  void wait_first() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return count_ > 0; });
  }
  int count() const {
    std::lock_guard lk(mu_);
    return count_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0;
};

void accept_loop(tcp::acceptor& acceptor, net::io_context& ioc, ServerState& state) {
  acceptor.async_accept(net::make_strand(ioc), [&acceptor, &ioc, &state](error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) return;  // shutting down
    if (!ec) {
      error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);  // stream chunks are small: send them now
      start_session(std::move(socket), state);
    } else {
      spdlog::warn("accept: {}", ec.message());  // e.g. out of file descriptors; keep going
    }
    accept_loop(acceptor, ioc, state);
  });
}

tcp::acceptor bind_acceptor(net::io_context& ioc, const ServerOptions& o) {
  error_code ec;
  const net::ip::address addr = net::ip::make_address(o.host, ec);
  if (ec) throw std::runtime_error("--host " + o.host + ": not an IP address");
  const tcp::endpoint ep(addr, o.port);
  tcp::acceptor acceptor(net::make_strand(ioc));
  acceptor.open(ep.protocol());
  acceptor.set_option(net::socket_base::reuse_address(true));
  acceptor.bind(ep, ec);
  if (ec) throw std::runtime_error("cannot listen on " + o.host + ":" + std::to_string(o.port) + ": " + ec.message());
  acceptor.listen(net::socket_base::max_listen_connections);
  return acceptor;
}

void drain_and_stop(ServerState& state, const SignalLatch& signals) {
  using clock = std::chrono::steady_clock;
  const auto drain_deadline = clock::now() + std::chrono::duration_cast<clock::duration>(
                                                 std::chrono::duration<double>(state.opts.drain_timeout_s));
  // Poll in short slices so a second signal cuts the wait short.
  while (clock::now() < drain_deadline && signals.count() < 2) {
    if (state.wait_no_requests(std::min(drain_deadline, clock::now() + std::chrono::milliseconds(100)))) break;
  }
  const std::vector<uint64_t> left = state.active_requests();
  if (!left.empty()) {
    spdlog::info("cancelling {} request(s) still running", left.size());
    for (uint64_t id : left) state.scheduler.cancel(id);
    state.wait_no_requests(clock::now() + std::chrono::seconds(10));
  }
  state.scheduler.shutdown(/*drain=*/false);
  // Final chunks and [DONE] of cancelled streams are written by the io threads.
  state.wait_no_responses(clock::now() + std::chrono::seconds(2));
}

}  // namespace

void run_http_server(ServerState& state) {
  const int n_threads = std::max(1, state.opts.io_threads);
  net::io_context ioc(n_threads);
  tcp::acceptor acceptor = bind_acceptor(ioc, state.opts);
  spdlog::info("listening on http://{}:{}", state.opts.host, acceptor.local_endpoint().port());

  SignalLatch latch;
  net::signal_set signals(ioc, SIGINT, SIGTERM);
  std::function<void(error_code, int)> on_signal = [&](error_code ec, int sig) {
    if (ec) return;
    latch.raise();
    if (latch.count() == 1) {
      spdlog::info("signal {}: draining (again to cancel running requests)", sig);
      state.start_draining();
      net::post(acceptor.get_executor(), [&acceptor] {
        error_code ignored;
        acceptor.close(ignored);
      });
    }
    signals.async_wait(on_signal);
  };
  signals.async_wait(on_signal);
  accept_loop(acceptor, ioc, state);

  std::vector<std::thread> threads;
  threads.reserve(n_threads);
  for (int i = 0; i < n_threads; ++i) threads.emplace_back([&ioc] { ioc.run(); });

  latch.wait_first();
  drain_and_stop(state, latch);
  ioc.stop();
  for (std::thread& t : threads) t.join();
  spdlog::info("server stopped");
}

}  // namespace tandem::server
