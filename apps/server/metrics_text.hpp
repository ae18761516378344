// GET /metrics: the scheduler's statistics and the HTTP layer's own counters in the
// Prometheus text exposition format (version 0.0.4). Metric names start with "tandem_";
// counters end in "_total", histograms are in seconds with cumulative buckets.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "engine/runtime/scheduler.hpp"

namespace tandem::server {

// Counted by the HTTP layer (the scheduler does not see rejected requests or sockets).
struct HttpCounters {
  std::map<int, uint64_t> responses_by_status;  // every response sent, by HTTP status
  uint64_t timeouts = 0;            // requests cancelled by --request-timeout
  uint64_t client_disconnects = 0;  // requests cancelled because the client went away
  int64_t open_connections = 0;
  uint64_t rejected_connections = 0;  // refused with 503 at --max-connections
  uint64_t read_timeouts = 0;         // requests whose headers or body came too slowly (408)
  int64_t active_requests = 0;  // submitted and not yet answered
};

inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

std::string metrics_text(const SchedulerStats& s, const HttpCounters& h);

// Shortest text that reads back as the same double; "+Inf"/"-Inf"/"NaN" as Prometheus spells them.
std::string prom_number(double v);

}  // namespace tandem::server
