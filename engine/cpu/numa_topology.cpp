#include "numa_topology.h"

#include <numa.h>

#include <fstream>
#include <string>

namespace ftllm::cpu {

namespace {

// MemTotal and MemAvailable of /proc/meminfo, in bytes. Available (not free) memory is what a model load
// can count on: page cache is given back on demand.
bool read_meminfo(uint64_t& total, uint64_t& available) {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  total = available = 0;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemTotal:") total = kib * 1024;
    if (key == "MemAvailable:") available = kib * 1024;
  }
  return total != 0;
}

}  // namespace

void append_numa_nodes(DeviceReport& report) {
  int nodes = numa_available() < 0 ? 1 : numa_num_configured_nodes();
  if (nodes <= 1) {
    // One node holds all memory; /proc/meminfo is exact where per-node sysfs may be virtualised.
    uint64_t total = 0, available = 0;
    if (read_meminfo(total, available))
      report.devices.push_back({"numa:0", "host memory", total, available});
    else
      report.notes.push_back("numa:0: /proc/meminfo is unreadable, host memory unknown");
    return;
  }
  for (int node = 0; node <= numa_max_node(); ++node) {
    if (!numa_bitmask_isbitset(numa_all_nodes_ptr, unsigned(node))) continue;
    long long free_bytes = 0;
    long long total = numa_node_size64(node, &free_bytes);
    if (total < 0) continue;
    report.devices.push_back({"numa:" + std::to_string(node), "NUMA node " + std::to_string(node),
                              uint64_t(total), uint64_t(free_bytes)});
  }
}

}  // namespace ftllm::cpu
