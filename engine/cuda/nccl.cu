// Sums of tensor-parallel partial outputs over GPUs with NCCL's all-reduce. NCCL is loaded at run time
// (libnccl.so.2), so the daemon needs it only where a model is split over several GPUs; without it the
// caller falls back to summing through device copies.
#include <dlfcn.h>
#include <nccl.h>

#include <map>
#include <mutex>
#include <vector>

#include "device_state.h"
#include "nccl.h"

namespace ftllm::cuda {

namespace {

struct Nccl {
  decltype(&ncclCommInitAll) init_all = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  std::string missing;  // why NCCL cannot be used, when it cannot
};

const Nccl& nccl() {
  static const Nccl n = [] {
    Nccl n;
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      n.missing = "libnccl.so.2 is not installed";
      return n;
    }
    n.init_all = reinterpret_cast<decltype(n.init_all)>(dlsym(lib, "ncclCommInitAll"));
    n.all_reduce = reinterpret_cast<decltype(n.all_reduce)>(dlsym(lib, "ncclAllReduce"));
    n.group_start = reinterpret_cast<decltype(n.group_start)>(dlsym(lib, "ncclGroupStart"));
    n.group_end = reinterpret_cast<decltype(n.group_end)>(dlsym(lib, "ncclGroupEnd"));
    n.error_string = reinterpret_cast<decltype(n.error_string)>(dlsym(lib, "ncclGetErrorString"));
    if (!n.init_all || !n.all_reduce || !n.group_start || !n.group_end || !n.error_string)
      n.missing = "libnccl.so.2 lacks the functions ftllm calls";
    return n;
  }();
  return n;
}

void check_nccl(const Nccl& n, ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw EngineError(std::string("nccl: ") + what + ": " + n.error_string(r));
}

// One communicator per set of GPUs, made the first time a split over them sums (it takes a while) and
// kept for the process.
std::mutex comms_mu;
std::map<std::vector<int>, std::vector<ncclComm_t>> comms;

}  // namespace

bool all_reduce_sum(const std::vector<Tensor*>& parts, std::string* why_not) {
  std::vector<int> devices;
  for (const Tensor* t : parts) {
    if (!t->device.is_cuda()) return why_not && (*why_not = "a shard is on the host", false);
    for (int d : devices)
      if (d == t->device.index) return why_not && (*why_not = "two shards share a GPU", false);
    devices.push_back(t->device.index);
  }
  const Nccl& n = nccl();
  if (!n.missing.empty()) return why_not && (*why_not = n.missing, false);
  std::vector<ncclComm_t>* group;
  {
    std::lock_guard lock(comms_mu);
    auto it = comms.find(devices);
    if (it == comms.end()) {
      std::vector<ncclComm_t> c(devices.size());
      check_nccl(n, n.init_all(c.data(), int(devices.size()), devices.data()), "ncclCommInitAll");
      it = comms.emplace(devices, std::move(c)).first;
    }
    group = &it->second;
  }
  check_nccl(n, n.group_start(), "ncclGroupStart");
  for (size_t i = 0; i < parts.size(); ++i) {
    DeviceState& s = state(parts[i]->device);
    check_nccl(n, n.all_reduce(parts[i]->data, parts[i]->data, size_t(parts[i]->numel()), ncclFloat, ncclSum, (*group)[i], s.stream),
               "ncclAllReduce");
  }
  check_nccl(n, n.group_end(), "ncclGroupEnd");
  return true;
}

}  // namespace ftllm::cuda
