#pragma once

#include "../engine.h"

namespace ftllm::cpu {

// Adds one device per NUMA node with its memory (libnuma); a machine without NUMA support is one node
// whose size comes from sysinfo.
void append_numa_nodes(DeviceReport& report);

}  // namespace ftllm::cpu
