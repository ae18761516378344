// The listening side of `tandem serve`: one io_context served by a few threads, an
// acceptor, and graceful shutdown on SIGINT/SIGTERM:
//   1. stop accepting; new requests on open connections get 503, /health says "draining";
//   2. wait up to ServerOptions::drain_timeout_s for running requests to finish (a second
//      signal skips the wait);
//   3. cancel what is left (its streams end normally, finish_reason "length"), stop the
//      scheduler, give open responses a moment to flush, and return.
#pragma once

namespace tandem::server {

class ServerState;

// Binds state.opts.host:port (throws std::runtime_error when it cannot), logs
// "listening on http://HOST:PORT" (the real port when 0 was asked for), serves until a
// signal, shuts down as above, and returns.
void run_http_server(ServerState& state);

}  // namespace tandem::server
