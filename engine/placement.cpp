#include "placement.h"

#include <numa.h>

#include <cmath>

#include "core/error.h"
#include "cpu/numa_topology.h"

namespace ftllm {

namespace {

std::string trim(std::string s) {
  const char* ws = " \t'\"";
  s.erase(0, s.find_first_not_of(ws));
  s.erase(s.find_last_not_of(ws) + 1);
  return s;
}

std::string canonical_device(const std::string& d) {
  if (d == "cpu" || d == "numa") return d;
  int nodes = numa_available() < 0 ? 1 : numa_max_node() + 1;
  if (d.starts_with("numa:")) {
    try {
      size_t used = 0;
      int node = std::stoi(d.substr(5), &used);
      if (used == d.size() - 5 && node >= 0 && node < nodes) return d;
    } catch (...) {
    }
    throw EngineError("device " + d + " names no NUMA node of this machine (it has " + std::to_string(nodes) + ": numa:0.." +
                      "numa:" + std::to_string(nodes - 1) + ")");
  }
  if (d.starts_with("cuda") || d.starts_with("multicuda"))
    throw EngineError("device " + d + " is not available: this build places layers on cpu and numa:N");
  throw EngineError("device \"" + d + "\" is unknown; use cpu, numa (rows split over all nodes), numa:N, or {'cpu':N,'numa:0':M}");
}

}  // namespace

std::vector<LayerRange> resolve_placement(const std::string& spec, int64_t layers, std::string* note) {
  std::string s = trim(spec);
  if (s.empty()) s = "cpu";
  if (s == "numa") {
    if (cpu::numa_nodes_with_cpus().size() > 1) return {{"numa", 0, layers}};
    if (note) *note = "--device numa: this machine has one NUMA node, so the model runs as --device cpu";
    return {{"cpu", 0, layers}};
  }
  std::vector<std::pair<std::string, double>> parts;
  if (s.front() == '{') {
    if (s.back() != '}') throw EngineError("device map " + spec + " is missing its closing }");
    std::string body = s.substr(1, s.size() - 2);
    size_t start = 0;
    while (start <= body.size()) {
      size_t comma = body.find(',', start);
      std::string item = body.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      start = comma == std::string::npos ? body.size() + 1 : comma + 1;
      if (trim(item).empty()) continue;
      size_t colon = item.rfind(':');
      // "numa:0":3 has two colons: the weight follows the last one.
      if (colon == std::string::npos) throw EngineError("device map entry " + trim(item) + " needs DEVICE:WEIGHT");
      double weight = 0;
      try {
        weight = std::stod(trim(item.substr(colon + 1)));
      } catch (...) {
        throw EngineError("device map entry " + trim(item) + " has no numeric weight");
      }
      if (weight <= 0) throw EngineError("device map entry " + trim(item) + " needs a positive weight");
      parts.emplace_back(canonical_device(trim(item.substr(0, colon))), weight);
      if (parts.back().first == "numa")
        throw EngineError("device map " + spec + ": numa spreads every layer over all nodes and cannot share the "
                          "model; place layers on one node with numa:N");
    }
    if (parts.empty()) throw EngineError("device map " + spec + " is empty");
  } else {
    parts.emplace_back(canonical_device(s), 1.0);
  }
  double total = 0;
  for (auto& [d, w] : parts) total += w;
  std::vector<LayerRange> out;
  int64_t first = 0;
  double acc = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    acc += parts[i].second;
    int64_t end = i + 1 == parts.size() ? layers : int64_t(std::llround(double(layers) * acc / total));
    if (end > first) out.push_back({parts[i].first, first, end - first});
    first = std::max(first, end);
  }
  return out;
}

std::string placement_string(const std::vector<LayerRange>& ranges) {
  std::string s;
  for (const LayerRange& r : ranges)
    s += (s.empty() ? "" : " ") + r.device + ":" + std::to_string(r.first) + "-" + std::to_string(r.first + r.count - 1);
  return s;
}

}  // namespace ftllm
