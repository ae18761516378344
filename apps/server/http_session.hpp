// One client connection: reads HTTP/1.1 requests with Boost.Beast's parser, hands them to
// the router, and writes responses (whole, or chunked for server-sent events). All of a
// connection's work runs on its own strand, so the session needs no locks.
//
// While a generation is in flight the session keeps a read pending on the socket: if the
// client closes the connection, that read fails at once, and the request is cancelled
// even when nothing is being written (queued, or a slow prefill). Bytes of a pipelined
// next request that arrive meanwhile are kept for the parser.
#pragma once
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <memory>

namespace tandem::server {

class ServerState;

// Starts serving an accepted socket (whose executor must be a strand). With
// state.opts.max_connections already open, the socket is answered 503 (Retry-After: 1)
// and closed instead.
void start_session(boost::asio::ip::tcp::socket socket, ServerState& state);
// The same session over a local stream socket: what the HTTP fuzz harness drives.
void start_session(boost::asio::local::stream_protocol::socket socket, ServerState& state);

}  // namespace tandem::server
