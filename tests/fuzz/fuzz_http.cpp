// The HTTP request path of `tandem serve` through its real session code
// (apps/server/http_session.cpp: Beast's parser, keep-alive, pipelining, the body limit,
// the disconnect watch, the router, generation and the scheduler) over a local socket
// pair: the input is what a client sends on one connection, after which the client
// half-closes and reads until the server closes. The server is a tiny random-weight model
// (tests/support/tiny_model.hpp) so that generation requests really run.
//
// Invariants: the session always ends (the server closes the connection: a hang is a
// finding), and every response it wrote starts with a status line.
#include <spdlog/spdlog.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>

#include "apps/server/chat_prompt.hpp"
#include "apps/server/http_session.hpp"
#include "apps/server/server_state.hpp"
#include "engine/runtime/scheduler.hpp"
#include "tandem/engine.hpp"
#include "tests/fuzz/fuzz_target.hpp"
#include "tests/support/tiny_model.hpp"

namespace net = boost::asio;
using local = net::local::stream_protocol;
using namespace tandem;

namespace {

struct Server {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<server::ServerState> state;
  net::io_context ioc;
};
Server* g = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz_quiet_logs();  // a log line per request otherwise
  const std::string dir = (std::filesystem::temp_directory_path() / ("tandem-fuzz-http-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/tiny.gguf";
  test::TinyModelSpec spec;
  spec.n_ctx = 256;
  test::write_tiny_model(path, spec);
  g = new Server;  // lives for the whole process (the scheduler thread uses it)
  LoadOptions lo;
  lo.model_path = path;
  lo.threads = 1;
  lo.context = 256;
  lo.kv_mem_bytes = 8 << 20;
  g->engine = Engine::load(lo);
  SchedulerOptions so;
  so.max_seqs = 4;
  so.max_queue = 8;
  g->scheduler = std::make_unique<Scheduler>(*g->engine, so);
  server::ProtocolConfig pc;
  pc.model_ids = {"tiny", "tiny.gguf"};
  pc.n_vocab = g->engine->info().n_vocab;
  pc.max_tokens = 8;
  server::ChatPrompt chat = server::ChatPrompt::from_model(path, *g->engine);
  chat.set_template_limits({64 << 10, kFuzzTemplateIterations, kFuzzTemplateWorkBytes});
  server::ServerOptions opts;
  opts.max_body = 64 << 10;
  opts.request_timeout_s = 5;
  g->state = std::make_unique<server::ServerState>(*g->engine, *g->scheduler, std::move(chat), std::move(pc), opts);
  std::filesystem::remove_all(dir);  // the engine has what it needs (mapped)
  // Stop the scheduler's thread before static destruction at exit (the rest stays
  // reachable from g, so leak checkers do not count it).
  std::atexit([] { g->scheduler->shutdown(/*drain=*/false); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  local::socket server_end(g->ioc), client(g->ioc);
  net::local::connect_pair(server_end, client);
  server::start_session(std::move(server_end), *g->state);

  const std::string request(reinterpret_cast<const char*>(data), size);
  std::string reply;
  bool written = false, half_closed = false, done = false;
  net::async_read(client, net::dynamic_buffer(reply), [&](boost::system::error_code, size_t) { done = true; });
  net::async_write(client, net::buffer(request), [&](boost::system::error_code, size_t) { written = true; });
  g->ioc.restart();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "fuzz_http: the session did not close the connection within 20 s\n");
      std::abort();
    }
    const size_t ran = g->ioc.poll();
    // Everything sent and answered (no generation running, no response being written, no
    // handler ready): the client half-closes, and the server must then close.
    if (!half_closed && written && ran == 0 && g->state->active_requests().empty() &&
        g->state->wait_no_responses(std::chrono::steady_clock::now())) {
      boost::system::error_code ignored;
      client.shutdown(local::socket::shutdown_send, ignored);
      half_closed = true;
    }
    if (ran == 0) g->ioc.run_one_for(std::chrono::milliseconds(1));
  }
  g->ioc.poll();  // what the closing session still had queued
  static const bool verbose = std::getenv("FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "---- reply (%zu bytes)\n%s\n", reply.size(), reply.c_str());
  fuzz_check(reply.empty() || reply.rfind("HTTP/1.", 0) == 0);
  return 0;
}
