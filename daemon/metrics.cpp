#include "metrics.h"

#include <chrono>
#include <cstdio>
#include <set>

namespace ftllm::daemon {

void Metrics::Histogram::add(double seconds) {
  for (size_t i = 0; i < kBounds.size(); ++i)
    if (seconds <= kBounds[i]) ++buckets[i];
  ++count;
  sum += seconds;
}

void Metrics::request(std::string_view path, int status) {
  // Known routes by name; anything else in one bucket, so scanners cannot blow up the label set.
  static const char* const known[] = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health",
                                      "/metrics", "/tokenize", "/detokenize", "/apply-template"};
  std::string endpoint = "other";
  for (const char* k : known)
    if (path == k) endpoint = k;
  if (path.starts_with("/v1/models/")) endpoint = "/v1/models/{id}";
  ++requests_[{endpoint, status}];
}

void Metrics::tokens(const std::string& model, size_t prompt, size_t generated) {
  prompt_tokens_[model] += prompt;
  generated_tokens_[model] += generated;
}

void Metrics::first_token(const std::string& model, double seconds) { ttft_[model].add(seconds); }
void Metrics::inter_token(const std::string& model, double seconds) { itl_[model].add(seconds); }

std::string Metrics::render(const Engine& engine) const {
  std::string out;
  char buf[1024];
  out += "# HELP ftllm_requests_total HTTP requests answered, by endpoint and status.\n# TYPE ftllm_requests_total counter\n";
  for (auto& [key, n] : requests_) {
    std::snprintf(buf, sizeof buf, "ftllm_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", key.first.c_str(), key.second,
                  (unsigned long long)n);
    out += buf;
  }
  auto counter = [&](const char* name, const char* help, const std::map<std::string, uint64_t>& values) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n";
    for (auto& [model, n] : values) out += std::string(name) + "{model=\"" + model + "\"} " + std::to_string(n) + "\n";
  };
  counter("ftllm_prompt_tokens_total", "Prompt tokens processed.", prompt_tokens_);
  counter("ftllm_generation_tokens_total", "Tokens generated.", generated_tokens_);
  auto histogram = [&](const char* name, const char* help, const std::map<std::string, Histogram>& values) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " histogram\n";
    for (auto& [model, h] : values) {
      for (size_t i = 0; i < Histogram::kBounds.size(); ++i) {
        std::snprintf(buf, sizeof buf, "%s_bucket{model=\"%s\",le=\"%g\"} %llu\n", name, model.c_str(), Histogram::kBounds[i],
                      (unsigned long long)h.buckets[i]);
        out += buf;
      }
      std::snprintf(buf, sizeof buf, "%s_bucket{model=\"%s\",le=\"+Inf\"} %llu\n%s_sum{model=\"%s\"} %.6f\n%s_count{model=\"%s\"} %llu\n",
                    name, model.c_str(), (unsigned long long)h.count, name, model.c_str(), h.sum, name, model.c_str(),
                    (unsigned long long)h.count);
      out += buf;
    }
  };
  histogram("ftllm_time_to_first_token_seconds", "Time from request to first generated token.", ttft_);
  histogram("ftllm_inter_token_latency_seconds", "Time between consecutive generated tokens.", itl_);
  out += "# HELP ftllm_requests_running Sequences decoding now.\n# TYPE ftllm_requests_running gauge\n";
  std::string waiting = "# HELP ftllm_requests_waiting Requests queued for a model.\n# TYPE ftllm_requests_waiting gauge\n";
  std::string kv = "# HELP ftllm_kv_cache_usage_ratio Share of KV-cache blocks in use.\n# TYPE ftllm_kv_cache_usage_ratio gauge\n";
  // vLLM's names' meaning: prompt tokens looked up in the prefix cache, and those found there.
  std::string queries = "# HELP ftllm_prefix_cache_queries_total Prompt tokens looked up in the prefix cache.\n"
                        "# TYPE ftllm_prefix_cache_queries_total counter\n";
  std::string hits = "# HELP ftllm_prefix_cache_hits_total Prompt tokens found in the prefix cache.\n"
                     "# TYPE ftllm_prefix_cache_hits_total counter\n";
  std::string cached = "# HELP ftllm_kv_cache_cached_blocks KV-cache blocks kept for reuse (prefix cache).\n"
                       "# TYPE ftllm_kv_cache_cached_blocks gauge\n";
  std::string preempted = "# HELP ftllm_preemptions_total Running sequences sent back to the queue for want of KV blocks.\n"
                          "# TYPE ftllm_preemptions_total counter\n";
  uint64_t all_running = 0, all_waiting = 0, blocks_used = 0, blocks_total = 0;
  int64_t max_loras = 0;
  std::set<std::string> running_adapters, waiting_adapters;
  for (const ModelInfo& m : engine.models()) {
    auto h = engine.model(m.name);
    if (!h || !m.parent.empty()) continue;  // an adapter's requests are its base model's

    ModelHandle::Load l = h->load();
    all_running += l.running, all_waiting += l.waiting, blocks_used += l.kv_blocks_used, blocks_total += l.kv_blocks_total;
    out += "ftllm_requests_running{model=\"" + m.name + "\"} " + std::to_string(l.running) + "\n";
    waiting += "ftllm_requests_waiting{model=\"" + m.name + "\"} " + std::to_string(l.waiting) + "\n";
    std::snprintf(buf, sizeof buf, "ftllm_kv_cache_usage_ratio{model=\"%s\"} %.6f\n", m.name.c_str(),
                  l.kv_blocks_total ? double(l.kv_blocks_used) / double(l.kv_blocks_total) : 0.0);
    kv += buf;
    const std::string label = "{model=\"" + m.name + "\"} ";
    queries += "ftllm_prefix_cache_queries_total" + label + std::to_string(l.prefix_cache_queries) + "\n";
    hits += "ftllm_prefix_cache_hits_total" + label + std::to_string(l.prefix_cache_hits) + "\n";
    cached += "ftllm_kv_cache_cached_blocks" + label + std::to_string(l.kv_blocks_cached) + "\n";
    preempted += "ftllm_preemptions_total" + label + std::to_string(l.preemptions) + "\n";
    max_loras += l.max_loras;
    running_adapters.insert(l.running_adapters.begin(), l.running_adapters.end());
    waiting_adapters.insert(l.waiting_adapters.begin(), l.waiting_adapters.end());
  }
  // The model-server protocol's LoRA gauge (vLLM's lora_requests_info): its labels carry the adapters
  // with running and with waiting requests, and how many may run at once; its value is when it was
  // sampled, as vLLM's is (an endpoint picker takes the newest series).
  auto joined = [](const std::set<std::string>& names) {
    std::string s;
    for (const std::string& n : names) s += (s.empty() ? "" : ",") + n;
    return s;
  };
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::snprintf(buf, sizeof buf, "%.3f\n", now);
  const std::string lora = "# HELP ftllm_lora_requests_info LoRA adapters with running and waiting requests; the value is the "
                           "sampling time (Unix seconds).\n# TYPE ftllm_lora_requests_info gauge\n"
                           "ftllm_lora_requests_info{max_lora=\"" + std::to_string(max_loras) + "\",running_lora_adapters=\"" +
                           joined(running_adapters) + "\",waiting_lora_adapters=\"" + joined(waiting_adapters) + "\"} " + buf;
  // The whole server's, one series each: what a load-aware router (Kubernetes' Gateway API Inference
  // Extension endpoint picker, README) reads per pod as its queue length and KV-cache utilisation.
  std::snprintf(buf, sizeof buf,
                "# HELP ftllm_server_requests_waiting Requests queued, all models.\n# TYPE ftllm_server_requests_waiting gauge\n"
                "ftllm_server_requests_waiting %llu\n"
                "# HELP ftllm_server_requests_running Sequences decoding now, all models.\n# TYPE ftllm_server_requests_running gauge\n"
                "ftllm_server_requests_running %llu\n"
                "# HELP ftllm_server_kv_cache_usage_ratio Share of the KV-cache blocks of all models in use.\n"
                "# TYPE ftllm_server_kv_cache_usage_ratio gauge\nftllm_server_kv_cache_usage_ratio %.6f\n",
                (unsigned long long)all_waiting, (unsigned long long)all_running,
                blocks_total ? double(blocks_used) / double(blocks_total) : 0.0);
  return out + waiting + kv + queries + hits + cached + preempted + buf + lora;
}

}  // namespace ftllm::daemon
