#include "apps/server/metrics_text.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace tandem::server {

std::string prom_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string prom_label_value(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

double kv_cache_utilization(const SchedulerStats& s) {
  if (s.kv_bytes_total <= 0) return 0.0;
  const int64_t held = std::max<int64_t>(0, s.kv_bytes_used - s.kv_prefix_idle_bytes);
  return std::min(1.0, double(held) / double(s.kv_bytes_total));
}

namespace {

std::string label(const char* key, const std::string& value) {
  std::string l(key);
  l.append("=\"").append(prom_label_value(value)).append("\"");
  return l;
}

// Appends piece by piece (GCC 12 misreports `"literal" + std::string(...)` under -Wrestrict).
class Writer {
 public:
  void header(const std::string& name, const char* type, const char* help) {
    out_.append("# HELP ").append(name).append(" ").append(help).append("\n");
    out_.append("# TYPE ").append(name).append(" ").append(type).append("\n");
  }
  void sample(const std::string& name, double v, const std::string& labels = {}) {
    out_ += name;
    if (!labels.empty()) out_.append("{").append(labels).append("}");
    out_.append(" ").append(prom_number(v)).append("\n");
  }
  void metric(const std::string& name, const char* type, const char* help, double v, const std::string& labels = {}) {
    header(name, type, help);
    sample(name, v, labels);
  }
  void histogram(const std::string& name, const char* help, const Histogram& h, const std::string& labels = {}) {
    header(name, "histogram", help);
    const std::string prefix = labels.empty() ? std::string() : labels + ",";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cumulative += i < h.counts.size() ? h.counts[i] : 0;
      sample(name + "_bucket", static_cast<double>(cumulative), prefix + label("le", prom_number(h.bounds[i])));
    }
    // The +Inf bucket is the total count by definition, whatever the per-bucket counts say.
    sample(name + "_bucket", static_cast<double>(h.count), prefix + "le=\"+Inf\"");
    sample(name + "_sum", h.sum, labels);
    sample(name + "_count", static_cast<double>(h.count), labels);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

void per_position(Writer& w, const std::string& name, const char* help, const std::vector<int64_t>& v) {
  w.header(name, "counter", help);
  for (size_t i = 0; i < v.size(); ++i)
    w.sample(name, static_cast<double>(v[i]), label("position", std::to_string(i)));
}

// vLLM's series for the quantities tandem has (names and types as vLLM's V1 engine exports
// them, with the older gpu_cache_usage_perc and time_per_output_token_seconds too, which
// the endpoint picker's defaults and many dashboards still use).
void vllm_aliases(Writer& w, const SchedulerStats& s, const std::string& model_name) {
  auto d = [](int64_t v) { return static_cast<double>(v); };
  const std::string l = label("model_name", model_name);
  const double kv = kv_cache_utilization(s);
  w.metric("vllm:num_requests_running", "gauge", "Requests in the batch (tandem_running_sequences)", d(s.running), l);
  w.metric("vllm:num_requests_waiting", "gauge", "Requests waiting to be scheduled (tandem_queue_length)",
           d(s.queue_length), l);
  w.metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage, 1 = 100% (tandem_kv_cache_utilization)", kv, l);
  w.metric("vllm:gpu_cache_usage_perc", "gauge", "KV-cache usage, 1 = 100% (tandem_kv_cache_utilization)", kv, l);
  w.metric("vllm:num_preemptions_total", "counter", "Preemptions (tandem_preemptions_total)", d(s.preemptions), l);
  w.metric("vllm:prompt_tokens_total", "counter", "Prompt tokens processed (tandem_prompt_tokens_total)",
           d(s.prompt_tokens_total), l);
  w.metric("vllm:generation_tokens_total", "counter", "Tokens generated (tandem_generation_tokens_total)",
           d(s.generated_tokens_total), l);
  w.histogram("vllm:time_to_first_token_seconds", "Time to first token (tandem_time_to_first_token_seconds)", s.ttft,
              l);
  w.histogram("vllm:inter_token_latency_seconds", "Inter-token latency (tandem_inter_token_latency_seconds)", s.itl,
              l);
  w.histogram("vllm:time_per_output_token_seconds", "Inter-token latency (tandem_inter_token_latency_seconds)", s.itl,
              l);
  const SpeculativeMetrics& m = s.speculative;
  w.metric("vllm:spec_decode_num_drafts_total", "counter", "Verification steps with drafts (tandem_spec_drafts_total)",
           d(m.drafts), l);
  w.metric("vllm:spec_decode_num_draft_tokens_total", "counter", "Tokens drafted (tandem_spec_draft_tokens_total)",
           d(m.drafted_tokens), l);
  w.metric("vllm:spec_decode_num_accepted_tokens_total", "counter",
           "Draft tokens accepted (tandem_spec_accepted_tokens_total)", d(m.accepted_tokens), l);
  w.header("vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
           "Draft tokens accepted at each position (tandem_spec_accepted_per_position_total)");
  for (size_t i = 0; i < m.accepted_per_position.size(); ++i)
    w.sample("vllm:spec_decode_num_accepted_tokens_per_pos_total", d(m.accepted_per_position[i]),
             l + "," + label("position", std::to_string(i)));
  w.metric("vllm:cache_config_info", "gauge", "KV cache configuration (labels); the value is 1", 1.0,
           l + "," + label("block_size", std::to_string(s.kv_block_size)) + "," +
               label("num_gpu_blocks", std::to_string(s.kv_blocks_total)));
}

}  // namespace

std::string metrics_text(const SchedulerStats& s, const HttpCounters& h, const MetricsOptions& o) {
  Writer w;
  auto d = [](int64_t v) { return static_cast<double>(v); };
  w.metric("tandem_requests_total", "counter", "Requests accepted by the scheduler", d(s.requests_total));
  w.metric("tandem_requests_finished_total", "counter", "Requests that finished (stop or length)", d(s.requests_finished));
  w.metric("tandem_requests_cancelled_total", "counter", "Requests cancelled (client gone, timeout, shutdown)",
           d(s.requests_cancelled));
  w.metric("tandem_requests_failed_total", "counter", "Requests that failed with an error", d(s.requests_failed));
  w.metric("tandem_queue_length", "gauge", "Requests waiting to be scheduled", d(s.queue_length));
  w.metric("tandem_running_sequences", "gauge", "Sequences being decoded", d(s.running));
  w.metric("tandem_preemptions_total", "counter", "Sequences preempted because KV blocks ran out", d(s.preemptions));
  w.metric("tandem_device_verified_steps_total", "counter",
           "Sequence-steps decided on the device (only token ids and counts came back to the host)",
           d(s.device_verified));
  w.metric("tandem_scratch_growths_total", "counter",
           "Passes larger than the scratch reserved at start (each allocated memory in the step path)",
           d(s.scratch_growths));
  w.metric("tandem_kv_blocks_used", "gauge", "Target KV cache blocks in use", d(s.kv_blocks_used));
  w.metric("tandem_kv_blocks_total", "gauge", "KV cache blocks in the pool target and draft share", d(s.kv_blocks_total));
  w.metric("tandem_draft_kv_blocks_used", "gauge", "Draft model KV cache blocks in use", d(s.draft_kv_blocks_used));
  w.metric("tandem_kv_bytes_used", "gauge", "KV cache bytes in use, target and draft together", d(s.kv_bytes_used));
  w.metric("tandem_kv_bytes_total", "gauge", "KV cache budget in bytes, shared by target and draft (--kv-mem)",
           d(s.kv_bytes_total));
  w.metric("tandem_kv_usage_ratio", "gauge", "Fraction of the KV cache budget in use (both models)",
           s.kv_bytes_total > 0 ? double(s.kv_bytes_used) / double(s.kv_bytes_total) : 0.0);
  w.metric("tandem_kv_cache_utilization", "gauge",
           "Fraction (0-1) of the KV cache budget held by sequences: in use minus prefix-cache blocks no sequence "
           "holds, which are evicted on demand (the inference gateway's KVCacheUtilization)",
           kv_cache_utilization(s));
  w.metric("tandem_kv_prefix_idle_blocks", "gauge", "Target KV blocks only the prefix cache holds (evictable)",
           d(s.kv_prefix_idle_blocks));
  w.metric("tandem_cache_config_info", "gauge", "KV cache configuration (labels: tokens per block, blocks); the value is 1",
           1.0, label("block_size", std::to_string(s.kv_block_size)) + "," +
                    label("num_blocks", std::to_string(s.kv_blocks_total)));
  w.metric("tandem_draft_kv_full_total", "counter",
           "Sequence steps that could not draft for lack of KV memory (decoded plainly)", d(s.draft_kv_full));
  w.metric("tandem_draft_failures_total", "counter",
           "Draft passes that failed; their sequences decoded plainly that step", d(s.draft_failures));
  w.metric("tandem_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from shared prefix blocks",
           d(s.prefix_cache_hits_tokens));
  w.metric("tandem_prompt_tokens_total", "counter", "Prompt tokens processed", d(s.prompt_tokens_total));
  w.metric("tandem_generation_tokens_total", "counter", "Tokens generated", d(s.generated_tokens_total));
  w.metric("tandem_scheduler_steps_total", "counter", "Scheduler steps (batched target passes)", d(s.steps));
  w.metric("tandem_scheduler_steps_prefill_time_limited_total", "counter",
           "Steps whose prompt chunks were cut to keep decoding streams within --max-step-ms",
           d(s.steps_prefill_time_limited));
  w.metric("tandem_draft_prefill_tokens_total", "counter", "Context tokens the draft model read as its prefill",
           d(s.draft_prefill_tokens_total));
  w.metric("tandem_scheduler_steps_draft_prefill_time_limited_total", "counter",
           "Steps whose draft prefill chunks were cut to keep decoding streams within --max-step-ms",
           d(s.steps_draft_prefill_time_limited));
  w.histogram("tandem_time_to_first_token_seconds", "Time from arrival to the first generated token", s.ttft);
  w.histogram("tandem_inter_token_latency_seconds", "Time between consecutive generated tokens of a sequence", s.itl);

  const SpeculativeMetrics& m = s.speculative;
  w.metric("tandem_spec_drafts_total", "counter", "Verification steps that carried draft tokens", d(m.drafts));
  w.metric("tandem_spec_draft_tokens_total", "counter", "Tokens drafted", d(m.drafted_tokens));
  w.metric("tandem_spec_accepted_tokens_total", "counter", "Draft tokens the target accepted", d(m.accepted_tokens));
  w.metric("tandem_spec_acceptance_ratio", "gauge", "Accepted over drafted tokens since start", m.acceptance_rate());
  w.metric("tandem_spec_lookup_steps_total", "counter",
           "Verification steps that carried prompt lookup's draft instead of the draft model's", d(m.lookup_steps));
  w.metric("tandem_spec_lookup_draft_tokens_total", "counter", "Tokens prompt lookup drafted (in the totals above)",
           d(m.lookup_drafted_tokens));
  w.metric("tandem_spec_lookup_accepted_tokens_total", "counter",
           "Prompt lookup's draft tokens the target accepted (in the totals above)", d(m.lookup_accepted_tokens));
  w.metric("tandem_spec_tree_steps_total", "counter",
           "Verification steps that carried a token tree (its nodes in the draft token total)", d(m.tree_steps));
  w.metric("tandem_spec_budget_steps_total", "counter",
           "Steps whose drafts the step-level speculation budget planned", d(s.budget_steps));
  w.metric("tandem_spec_budget_wished_tokens_total", "counter",
           "Draft tokens the sequences' policies asked the step budget for", d(s.budget_wished_tokens));
  w.metric("tandem_spec_budget_granted_tokens_total", "counter", "Draft tokens the step budget granted",
           d(s.budget_granted_tokens));
  w.histogram("tandem_spec_budget_granted_tokens_per_step", "Draft tokens the step budget granted in a step",
              s.budget_granted_per_step);
  w.metric("tandem_spec_budget_predicted_gain", "gauge",
           "The last budgeted step's predicted tokens per second over plain decoding's", s.budget_last_gain);
  per_position(w, "tandem_spec_drafted_per_position_total", "Steps that drafted a token at this position",
               m.drafted_per_position);
  per_position(w, "tandem_spec_accepted_per_position_total", "Steps whose draft token at this position was accepted",
               m.accepted_per_position);

  w.header("tandem_http_responses_total", "counter", "HTTP responses sent, by status code");
  for (const auto& [status, n] : h.responses_by_status)
    w.sample("tandem_http_responses_total", static_cast<double>(n), label("code", std::to_string(status)));
  w.metric("tandem_http_request_timeouts_total", "counter", "Requests cancelled by the request timeout",
           static_cast<double>(h.timeouts));
  w.metric("tandem_http_client_disconnects_total", "counter", "Requests cancelled because the client disconnected",
           static_cast<double>(h.client_disconnects));
  w.metric("tandem_http_open_connections", "gauge", "Open client connections", d(h.open_connections));
  w.metric("tandem_http_rejected_connections_total", "counter",
           "Connections refused with 503 because --max-connections were open", static_cast<double>(h.rejected_connections));
  w.metric("tandem_http_read_timeouts_total", "counter", "Requests whose headers or body arrived too slowly (408)",
           static_cast<double>(h.read_timeouts));
  w.metric("tandem_http_active_requests", "gauge", "Generation requests in flight", d(h.active_requests));
  if (o.vllm) vllm_aliases(w, s, o.model_name);
  return w.take();
}

}  // namespace tandem::server
