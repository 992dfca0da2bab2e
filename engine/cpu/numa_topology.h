#pragma once

#include <vector>

#include "../core/tensor.h"
#include "../core/device.h"

namespace ftllm::cpu {

// Adds one device per NUMA node with its memory (libnuma); a machine without NUMA support is one node
// whose size comes from sysinfo.
void append_numa_nodes(DeviceReport& report);

// The NUMA nodes that have CPUs, in order; {0} where libnuma finds no NUMA support.
std::vector<int> numa_nodes_with_cpus();

// --device numa: moves a weight matrix into fresh memory whose row share g (split_rows over
// nodes.size()) is bound to nodes[g], so each node's threads read only local memory and the weight
// exists once. The bytes are unchanged.
void place_rows_on_nodes(Tensor& weight, const std::vector<int>& nodes);

// The node holding the page at `p` (-1 when the kernel cannot say); for tests and status.
int node_of_address(const void* p);

}  // namespace ftllm::cpu
