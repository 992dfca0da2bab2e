#include "engine.h"

#include "cpu/numa_topology.h"
#include "ftllm_version.h"
#ifdef FTLLM_WITH_CUDA
#include "cuda/cuda_devices.h"
#endif

namespace ftllm {

std::vector<ModelInfo> Engine::models() const {
  std::lock_guard lock(mu_);
  return models_;
}

DeviceReport Engine::devices() const {
  DeviceReport report;
  cpu::append_numa_nodes(report);
#ifdef FTLLM_WITH_CUDA
  cuda::append_cuda_devices(report);
#else
  report.notes.push_back("cuda: this build has no CUDA backend (rebuild with -Dcuda=enabled)");
#endif
  return report;
}

bool Engine::cuda_built() const {
#ifdef FTLLM_WITH_CUDA
  return true;
#else
  return false;
#endif
}

const char* engine_version() { return FTLLM_VERSION; }

}  // namespace ftllm
