#include "placement.h"

#include <numa.h>

#include <cmath>

#include "core/error.h"
#include "cpu/numa_topology.h"
#if defined(FTLLM_WITH_CUDA)
#include "cuda/cuda_devices.h"
#endif

namespace ftllm {

namespace {

std::string trim(std::string s) {
  const char* ws = " \t'\"";
  s.erase(0, s.find_first_not_of(ws));
  s.erase(s.find_last_not_of(ws) + 1);
  return s;
}

int parse_index(const std::string& s) {
  try {
    size_t used = 0;
    int i = std::stoi(s, &used);
    if (used == s.size() && i >= 0) return i;
  } catch (...) {
  }
  return -1;
}

std::string cuda_device(int index, int cuda_devices, const std::string& spec) {
  if (cuda_devices == 0) {
#if defined(FTLLM_WITH_CUDA)
    throw EngineError("device " + spec + " is not available: no usable CUDA device on this machine (ftllmctl status "
                      "says why); use --device cpu");
#else
    throw EngineError("device " + spec + " is not available: this build has no CUDA backend (build it where the CUDA "
                      "toolkit is installed, meson -Dcuda=enabled); use --device cpu");
#endif
  }
  if (index < 0 || index >= cuda_devices)
    throw EngineError("device " + spec + " names no CUDA device of this machine (it has " + std::to_string(cuda_devices) +
                      ": cuda:0..cuda:" + std::to_string(cuda_devices - 1) + ")");
  return "cuda:" + std::to_string(index);
}

std::string canonical_device(const std::string& d, int cuda_devices, std::string* note) {
  if (d == "cpu" || d == "numa") return d;
  int nodes = numa_available() < 0 ? 1 : numa_max_node() + 1;
  if (d.starts_with("numa:")) {
    int node = parse_index(d.substr(5));
    if (node >= 0 && node < nodes) return d;
    throw EngineError("device " + d + " names no NUMA node of this machine (it has " + std::to_string(nodes) + ": numa:0.." +
                      "numa:" + std::to_string(nodes - 1) + ")");
  }
  if (d == "cuda") return cuda_device(0, cuda_devices, d);
  if (d.starts_with("cuda:")) {
    const int i = parse_index(d.substr(5));
    if (i < 0) throw EngineError("device " + d + " needs a GPU number: cuda:0, cuda:1, ...");
    return cuda_device(i, cuda_devices, d);
  }
  if (d.starts_with("multicuda")) {
    // multicuda:0,1 (or multicuda alone: every GPU): tensor parallel. Over one GPU that is plain cuda:N.
    std::vector<int> gpus;
    if (d == "multicuda") {
      for (int i = 0; i < std::max(cuda_devices, 1); ++i) gpus.push_back(i);
    } else {
      std::string list = d.substr(d.find(':') + 1);
      size_t start = 0;
      while (start <= list.size()) {
        size_t comma = list.find(',', start);
        std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        start = comma == std::string::npos ? list.size() + 1 : comma + 1;
        const int i = parse_index(item.substr(0, item.find(':')));
        if (i < 0)
          throw EngineError("device " + d + ": " + item + " is not a GPU number (tensor parallelism over GPUs only: "
                            "multicuda:0,1)");
        gpus.push_back(i);
      }
    }
    if (gpus.size() == 1) {
      const std::string one = cuda_device(gpus[0], cuda_devices, d);
      if (note) *note = "--device " + d + ": tensor parallelism over one GPU is " + one;
      return one;
    }
    for (int i : gpus) cuda_device(i, cuda_devices, d);  // each must exist
    throw EngineError("device " + d + ": tensor parallelism over " + std::to_string(gpus.size()) +
                      " GPUs is not implemented yet; split the layers instead, as {'cuda:0':1,'cuda:1':1}");
  }
  throw EngineError("device \"" + d + "\" is unknown; use cpu, cuda, cuda:N, numa (rows split over all nodes), numa:N, "
                    "or {'cuda:0':3,'cpu':1}");
}

// Splits on commas that are not inside quotes ('multicuda:0,1' is one key).
std::vector<std::string> split_items(const std::string& body) {
  std::vector<std::string> items(1);
  char quote = 0;
  for (char ch : body) {
    if (quote) {
      if (ch == quote) quote = 0;
    } else if (ch == '\'' || ch == '"') {
      quote = ch;
    } else if (ch == ',') {
      items.emplace_back();
      continue;
    }
    items.back() += ch;
  }
  return items;
}

// fastllm's cudapp=N (N GPUs, even) and cudapp=1:2:3 (weighted) as a device map.
std::string expand_cudapp(const std::string& s) {
  const std::string arg = s.substr(7);
  std::string map = "{";
  if (arg.find(':') == std::string::npos) {
    const int n = parse_index(arg);
    if (n <= 0) throw EngineError("--device " + s + ": cudapp=N needs a number of GPUs");
    for (int i = 0; i < n; ++i) map += (i ? "," : "") + std::string("'cuda:") + std::to_string(i) + "':1";
  } else {
    int i = 0;
    size_t start = 0;
    while (start <= arg.size()) {
      size_t colon = arg.find(':', start);
      std::string w = arg.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
      start = colon == std::string::npos ? arg.size() + 1 : colon + 1;
      map += (i ? "," : "") + std::string("'cuda:") + std::to_string(i) + "':" + w;
      ++i;
    }
  }
  return map + "}";
}

}  // namespace

int cuda_index(const std::string& device) { return device.starts_with("cuda:") ? parse_index(device.substr(5)) : -1; }

std::vector<LayerRange> resolve_placement(const std::string& spec, int64_t layers, std::string* note, int cuda_devices) {
  if (cuda_devices < 0) {
#if defined(FTLLM_WITH_CUDA)
    cuda_devices = cuda::device_count();
#else
    cuda_devices = 0;
#endif
  }
  std::string s = trim(spec);
  if (s.empty()) s = "cpu";
  if (s.starts_with("cudapp=")) s = expand_cudapp(s);
  if (s == "numa") {
    if (cpu::numa_nodes_with_cpus().size() > 1) return {{"numa", 0, layers}};
    if (note) *note = "--device numa: this machine has one NUMA node, so the model runs as --device cpu";
    return {{"cpu", 0, layers}};
  }
  std::vector<std::pair<std::string, double>> parts;
  if (s.front() == '{') {
    if (s.back() != '}') throw EngineError("device map " + spec + " is missing its closing }");
    for (const std::string& item : split_items(s.substr(1, s.size() - 2))) {
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
      parts.emplace_back(canonical_device(trim(item.substr(0, colon)), cuda_devices, note), weight);
      if (parts.back().first == "numa")
        throw EngineError("device map " + spec + ": numa spreads every layer over all nodes and cannot share the "
                          "model; place layers on one node with numa:N");
    }
    if (parts.empty()) throw EngineError("device map " + spec + " is empty");
  } else {
    parts.emplace_back(canonical_device(s, cuda_devices, note), 1.0);
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
