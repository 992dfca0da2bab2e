#include "engine.h"

#include "core/error.h"
#include "cpu/numa_topology.h"
#include "ftllm_version.h"
#include "model_instance.h"
#ifdef FTLLM_WITH_CUDA
#include "cuda/cuda_devices.h"
#endif

namespace ftllm {

Engine::Engine() = default;
Engine::~Engine() = default;

Status Engine::load(const ModelLoadOptions& o) {
  std::shared_ptr<ModelInstance> instance;
  try {
    instance = ModelInstance::load(o);
  } catch (const std::exception& e) {
    return Status::error("cannot load " + o.path + ": " + e.what());
  }
  std::lock_guard lock(mu_);
  const std::string& name = instance->options().name;
  if (models_.count(name)) return Status::error("a model named " + name + " is already loaded; unload it or pick another name");
  models_[name] = std::move(instance);
  return Status::success();
}

Status Engine::unload(const std::string& name) {
  std::shared_ptr<ModelInstance> gone;  // freed outside the lock
  std::lock_guard lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end()) return Status::error("no model named " + name + " is loaded");
  gone = std::move(it->second);
  models_.erase(it);
  return Status::success();
}

std::vector<ModelInfo> Engine::models() const {
  std::lock_guard lock(mu_);
  std::vector<ModelInfo> out;
  for (auto& [name, m] : models_) out.push_back({name, m->options().path, m->config().architecture});
  return out;
}

Status Engine::generate(const std::string& model, std::vector<GenerationRequest> requests,
                        std::vector<GenerationResult>& results) {
  std::shared_ptr<ModelInstance> instance;
  {
    std::lock_guard lock(mu_);
    auto it = models_.find(model);
    if (it == models_.end()) return Status::error("no model named " + model + " is loaded");
    instance = it->second;
  }
  try {
    results = instance->generate(std::move(requests));
  } catch (const std::exception& e) {
    return Status::error(e.what());
  }
  return Status::success();
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
