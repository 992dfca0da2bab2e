#include "numa_topology.h"

#include <numa.h>
#include <numaif.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

#include "../core/error.h"
#include "thread_pool.h"

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

std::vector<int> numa_nodes_with_cpus() {
  if (numa_available() < 0) return {0};
  std::vector<int> nodes;
  struct bitmask* cpus = numa_allocate_cpumask();
  for (int node = 0; node <= numa_max_node(); ++node) {
    if (!numa_bitmask_isbitset(numa_all_nodes_ptr, unsigned(node))) continue;
    if (numa_node_to_cpus(node, cpus) == 0 && numa_bitmask_weight(cpus) > 0) nodes.push_back(node);
  }
  numa_free_cpumask(cpus);
  if (nodes.empty()) nodes.push_back(0);
  return nodes;
}

void place_rows_on_nodes(Tensor& weight, const std::vector<int>& nodes) {
  const int64_t rows = weight.numel() / weight.dim(-1);
  const size_t row = row_bytes(weight.dtype, weight.dim(-1)), bytes = weight.bytes();
  const size_t page = size_t(sysconf(_SC_PAGESIZE)), mapped = (bytes + page - 1) / page * page;
  void* mem = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) throw EngineError("--device numa: cannot map " + std::to_string(bytes) + " bytes for a weight");
  char* base = static_cast<char*>(mem);
  const std::vector<int64_t> bounds = split_rows(rows, int(nodes.size()));
  for (size_t g = 0; g < nodes.size(); ++g) {
    // Pages are bound before anything touches them; a page two shares straddle goes to the earlier one.
    size_t begin = (size_t(bounds[g]) * row + page - 1) / page * page;
    size_t end = g + 1 == nodes.size() ? mapped : (size_t(bounds[g + 1]) * row + page - 1) / page * page;
    if (g == 0) begin = 0;
    if (end <= begin || numa_available() < 0) continue;
    unsigned long mask = 1ul << nodes[g];
    if (mbind(base + begin, end - begin, MPOL_BIND, &mask, sizeof(mask) * 8, 0) != 0) {
      munmap(mem, mapped);
      throw EngineError("--device numa: binding memory to node " + std::to_string(nodes[g]) + " failed: " +
                        std::strerror(errno));
    }
  }
  std::memcpy(base, weight.data, bytes);
  weight.data = base;
  weight.owner = std::shared_ptr<void>(base, [mapped](void* p) { munmap(p, mapped); });
}

int node_of_address(const void* p) {
  int node = -1;
  void* page = reinterpret_cast<void*>(uintptr_t(p) & ~uintptr_t(sysconf(_SC_PAGESIZE) - 1));
  if (get_mempolicy(&node, nullptr, 0, page, MPOL_F_NODE | MPOL_F_ADDR) != 0) return -1;
  return node;
}

}  // namespace ftllm::cpu
