#include "placement.h"

#include <numa.h>

#include <cmath>
#include <cstdio>

#include "../core/error.h"
#include "../cpu/numa_topology.h"
#if defined(FTLLM_WITH_CUDA)
#include "../cuda/cuda_devices.h"
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

PlacedDevice cuda_device(int index, int cuda_devices, const std::string& spec) {
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
  return {PlacedDevice::Kind::Cuda, index, {}};
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

PlacedDevice parse_device(const std::string& d, int cuda_devices, std::string* note) {
  using K = PlacedDevice::Kind;
  if (d == "cpu") return {K::Cpu, 0, {}};
  if (d == "numa") return {K::Numa, 0, {}};
  int nodes = numa_available() < 0 ? 1 : numa_max_node() + 1;
  if (d.starts_with("numa:")) {
    int node = parse_index(d.substr(5));
    if (node >= 0 && node < nodes) return {K::NumaNode, node, {}};
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
    // fastllm's tensor parallelism: multicuda:0,1 (equal shares), multicuda:0:4,1:5,cpu:1 (shares), or
    // multicuda alone (every GPU). Over one device that is that device.
    PlacedDevice group{K::TensorParallel, 0, {}};
    if (d == "multicuda") {
      for (int i = 0; i < std::max(cuda_devices, 1); ++i)
        group.shards.push_back({cuda_device(i, cuda_devices, d).compute_device(), 1.0});
    } else {
      for (const std::string& item : split_items(d.substr(d.find(':') + 1))) {
        const size_t colon = item.find(':');
        const std::string who = item.substr(0, colon);
        double share = 1;
        if (colon != std::string::npos) {
          try {
            share = std::stod(item.substr(colon + 1));
          } catch (...) {
            share = 0;
          }
          if (!(share > 0)) throw EngineError("device " + d + ": " + item + " needs a positive share after the colon");
        }
        if (who == "cpu") {
          group.shards.push_back({Device::cpu(), share});
          continue;
        }
        const int i = parse_index(who);
        if (i < 0) throw EngineError("device " + d + ": " + item + " is not a GPU number or cpu (as multicuda:0,1 or multicuda:0:4,cpu:1)");
        group.shards.push_back({cuda_device(i, cuda_devices, d).compute_device(), share});
      }
    }
    if (group.shards.size() == 1) {
      const Device only = group.shards[0].device;
      if (note) *note = "--device " + d + ": tensor parallelism over one device is " + only.name();
      return only.is_cuda() ? PlacedDevice{K::Cuda, only.index, {}} : PlacedDevice{K::Cpu, 0, {}};
    }
    return group;
  }
  throw EngineError("device \"" + d + "\" is unknown; use cpu, cuda, cuda:N, numa (rows split over all nodes), numa:N, "
                    "or {'cuda:0':3,'cpu':1}");
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

Device PlacedDevice::compute_device() const {
  if (kind == Kind::Cuda) return Device::cuda(index);
  if (kind == Kind::TensorParallel && !shards.empty()) return shards[0].device;
  return Device::cpu();
}

std::string PlacedDevice::name() const {
  switch (kind) {
    case Kind::Cpu: return "cpu";
    case Kind::Numa: return "numa";
    case Kind::NumaNode: return "numa:" + std::to_string(index);
    case Kind::Cuda: return "cuda:" + std::to_string(index);
    case Kind::TensorParallel: {
      std::string group = "multi:";
      for (size_t i = 0; i < shards.size(); ++i) {
        char share[32];
        std::snprintf(share, sizeof share, "%g", shards[i].share);
        group += (i ? "," : "") + shards[i].device.name() + "=" + share;
      }
      return group;
    }
  }
  return "cpu";
}

Placement Placement::parse(const std::string& spec, int64_t layers, std::string* note, int cuda_devices) {
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
  Placement placement;
  if (s == "numa") {
    const bool nodes = cpu::numa_nodes_with_cpus().size() > 1;
    if (!nodes && note) *note = "--device numa: this machine has one NUMA node, so the model runs as --device cpu";
    placement.ranges_ = {{{nodes ? PlacedDevice::Kind::Numa : PlacedDevice::Kind::Cpu, 0, {}}, 0, layers}};
    return placement;
  }
  std::vector<std::pair<PlacedDevice, double>> parts;
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
      parts.emplace_back(parse_device(trim(item.substr(0, colon)), cuda_devices, note), weight);
      if (parts.back().first.kind == PlacedDevice::Kind::Numa)
        throw EngineError("device map " + spec + ": numa spreads every layer over all nodes and cannot share the "
                          "model; place layers on one node with numa:N");
    }
    if (parts.empty()) throw EngineError("device map " + spec + " is empty");
  } else {
    parts.emplace_back(parse_device(s, cuda_devices, note), 1.0);
  }
  double total = 0;
  for (auto& [d, w] : parts) total += w;
  std::vector<LayerRange>& out = placement.ranges_;
  int64_t first = 0;
  double acc = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    acc += parts[i].second;
    int64_t end = i + 1 == parts.size() ? layers : int64_t(std::llround(double(layers) * acc / total));
    if (end > first) out.push_back({parts[i].first, first, end - first});
    first = std::max(first, end);
  }
  return placement;
}

std::vector<PlacedDevice> Placement::per_layer() const {
  std::vector<PlacedDevice> layers;
  for (const LayerRange& r : ranges_) layers.insert(layers.end(), size_t(r.count), r.device);
  return layers;
}

bool Placement::all_on_host() const {
  for (const LayerRange& r : ranges_)
    if (!r.device.on_host()) return false;
  return true;
}

std::string Placement::to_string() const {
  std::string s;
  for (const LayerRange& r : ranges_)
    s += (s.empty() ? "" : " ") + r.device.name() + ":" + std::to_string(r.first) + "-" + std::to_string(r.first + r.count - 1);
  return s;
}

}  // namespace ftllm
