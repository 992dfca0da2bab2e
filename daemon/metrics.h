// Prometheus metrics of the public API, kept on the loop thread: requests by endpoint and status,
// prompt and generated tokens, time-to-first-token and inter-token latency histograms, and (read from
// the engine when scraped) requests running and waiting and KV-cache use per model.
#pragma once

#include <array>
#include <map>
#include <string>

#include "../engine/engine.h"

namespace ftllm::daemon {

class Metrics {
 public:
  void request(std::string_view path, int status);
  void tokens(const std::string& model, size_t prompt, size_t generated);
  void first_token(const std::string& model, double seconds);
  void inter_token(const std::string& model, double seconds);
  std::string render(const Engine& engine) const;

 private:
  struct Histogram {
    static constexpr std::array<double, 12> kBounds = {0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30};
    std::array<uint64_t, 12> buckets{};
    uint64_t count = 0;
    double sum = 0;
    void add(double seconds);
  };
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, uint64_t> prompt_tokens_, generated_tokens_;
  std::map<std::string, Histogram> ttft_, itl_;
};

}  // namespace ftllm::daemon
