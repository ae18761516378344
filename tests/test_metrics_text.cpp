// /metrics for the Kubernetes Gateway API Inference Extension: the Model Server Protocol's
// gauges (queue, running, KV-cache utilization 0..1 with idle prefix-cache blocks counted
// as free) and the vLLM-compatible aliases of `serve --metrics-compat vllm`, with their
// types, labels (escaped) and values. tests/python/test_server.py checks them live.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "apps/server/metrics_text.hpp"

namespace {

using tandem::SchedulerStats;
using tandem::server::HttpCounters;
using tandem::server::MetricsOptions;
using tandem::server::metrics_text;

SchedulerStats loaded() {
  SchedulerStats s;
  s.queue_length = 3;
  s.running = 4;
  s.preemptions = 2;
  s.kv_blocks_total = 100;
  s.kv_block_size = 16;
  s.kv_bytes_total = 4000;
  s.kv_bytes_used = 3000;
  s.kv_prefix_idle_blocks = 5;
  s.kv_prefix_idle_bytes = 1000;  // evictable: free for the gateway
  s.prompt_tokens_total = 70;
  s.generated_tokens_total = 80;
  return s;
}

bool has(const std::string& text, const std::string& line) { return text.find("\n" + line + "\n") != std::string::npos; }

TEST(MetricsText, ProtocolGaugesHaveTheirTypesAndSemantics) {
  const std::string t = metrics_text(loaded(), HttpCounters{});
  EXPECT_TRUE(has(t, "# TYPE tandem_queue_length gauge")) << t;
  EXPECT_TRUE(has(t, "tandem_queue_length 3"));
  EXPECT_TRUE(has(t, "# TYPE tandem_running_sequences gauge"));
  EXPECT_TRUE(has(t, "tandem_running_sequences 4"));
  EXPECT_TRUE(has(t, "# TYPE tandem_kv_cache_utilization gauge"));
  EXPECT_TRUE(has(t, "tandem_kv_cache_utilization 0.5"));  // (3000 - 1000) / 4000
  EXPECT_TRUE(has(t, "tandem_kv_usage_ratio 0.75"));       // the raw fill, idle prefix blocks included
  EXPECT_TRUE(has(t, "tandem_kv_prefix_idle_blocks 5"));
  EXPECT_TRUE(has(t, "tandem_cache_config_info{block_size=\"16\",num_blocks=\"100\"} 1"));
  EXPECT_EQ(t.find("vllm:"), std::string::npos) << "aliases only with --metrics-compat vllm";
}

TEST(MetricsText, UtilizationStaysWithinZeroAndOne) {
  SchedulerStats s;
  EXPECT_EQ(tandem::server::kv_cache_utilization(s), 0.0);  // no budget
  s.kv_bytes_total = 100;
  s.kv_bytes_used = 100;
  EXPECT_EQ(tandem::server::kv_cache_utilization(s), 1.0);
  s.kv_prefix_idle_bytes = 100;
  EXPECT_EQ(tandem::server::kv_cache_utilization(s), 0.0);
  s.kv_prefix_idle_bytes = 150;  // never below 0, whatever the counts say
  EXPECT_EQ(tandem::server::kv_cache_utilization(s), 0.0);
}

TEST(MetricsText, VllmAliasesCarryTheSameValues) {
  MetricsOptions o;
  o.vllm = true;
  o.model_name = "my \"model\"\\x";
  SchedulerStats s = loaded();
  s.ttft.counts.assign(s.ttft.bounds.size() + 1, 0);
  s.ttft.counts[0] = 2;
  s.ttft.count = 2;
  s.ttft.sum = 0.01;
  const std::string t = metrics_text(s, HttpCounters{}, o);
  const std::string l = "model_name=\"my \\\"model\\\"\\\\x\"";
  EXPECT_TRUE(has(t, "# TYPE vllm:num_requests_waiting gauge")) << t;
  EXPECT_TRUE(has(t, "vllm:num_requests_waiting{" + l + "} 3"));
  EXPECT_TRUE(has(t, "# TYPE vllm:num_requests_running gauge"));
  EXPECT_TRUE(has(t, "vllm:num_requests_running{" + l + "} 4"));
  EXPECT_TRUE(has(t, "# TYPE vllm:kv_cache_usage_perc gauge"));
  EXPECT_TRUE(has(t, "vllm:kv_cache_usage_perc{" + l + "} 0.5"));
  EXPECT_TRUE(has(t, "vllm:gpu_cache_usage_perc{" + l + "} 0.5"));
  EXPECT_TRUE(has(t, "# TYPE vllm:num_preemptions_total counter"));
  EXPECT_TRUE(has(t, "vllm:num_preemptions_total{" + l + "} 2"));
  EXPECT_TRUE(has(t, "vllm:prompt_tokens_total{" + l + "} 70"));
  EXPECT_TRUE(has(t, "vllm:generation_tokens_total{" + l + "} 80"));
  EXPECT_TRUE(has(t, "# TYPE vllm:time_to_first_token_seconds histogram"));
  EXPECT_TRUE(has(t, "vllm:time_to_first_token_seconds_bucket{" + l + ",le=\"0.01\"} 2"));
  EXPECT_TRUE(has(t, "vllm:time_to_first_token_seconds_bucket{" + l + ",le=\"+Inf\"} 2"));
  EXPECT_TRUE(has(t, "vllm:time_to_first_token_seconds_count{" + l + "} 2"));
  EXPECT_TRUE(has(t, "# TYPE vllm:inter_token_latency_seconds histogram"));
  EXPECT_TRUE(has(t, "# TYPE vllm:time_per_output_token_seconds histogram"));
  EXPECT_TRUE(has(t, "vllm:cache_config_info{" + l + ",block_size=\"16\",num_gpu_blocks=\"100\"} 1"));

  // Well formed throughout: each sample follows its family's HELP and TYPE.
  std::istringstream in(t);
  std::string line, family;
  while (std::getline(in, line)) {
    ASSERT_FALSE(line.empty());
    if (line.rfind("# HELP ", 0) == 0) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      family = line.substr(7, line.find(' ', 7) - 7);
      continue;
    }
    EXPECT_EQ(line.rfind(family, 0), 0u) << line;
  }
}

TEST(MetricsText, LabelValuesAreEscaped) {
  EXPECT_EQ(tandem::server::prom_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(tandem::server::prom_label_value("plain"), "plain");
}

}  // namespace
