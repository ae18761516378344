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

// Extra series for other tools' expectations (`serve --metrics-compat`).
struct MetricsOptions {
  // vLLM's names for the same quantities (vllm:num_requests_waiting, vllm:kv_cache_usage_perc,
  // ...; docs/deploy.md lists them), so dashboards, autoscalers and the inference gateway's
  // endpoint picker configured for vLLM work unchanged. Labelled model_name as vLLM does.
  bool vllm = false;
  std::string model_name;
};

// The Model Server Protocol of the Kubernetes Gateway API Inference Extension (what its
// endpoint picker scrapes) is met by three gauges, with these semantics:
//   tandem_queue_length          TotalQueuedRequests: requests waiting to be scheduled
//                                (preempted ones included, as they wait again)
//   tandem_running_sequences     TotalRunningRequests: sequences in the batch (prefilling
//                                or decoding)
//   tandem_kv_cache_utilization  KVCacheUtilization, 0..1: the KV budget held by sequences;
//                                prefix-cache blocks no sequence holds are evictable, so free
std::string metrics_text(const SchedulerStats& s, const HttpCounters& h, const MetricsOptions& o = {});

// The KVCacheUtilization above, from the scheduler's statistics (0 with no budget).
double kv_cache_utilization(const SchedulerStats& s);

// A Prometheus label value with \, " and newlines escaped.
std::string prom_label_value(const std::string& v);

// Shortest text that reads back as the same double; "+Inf"/"-Inf"/"NaN" as Prometheus spells them.
std::string prom_number(double v);

}  // namespace tandem::server
