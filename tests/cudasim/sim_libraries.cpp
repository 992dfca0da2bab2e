// The libraries the backend loads at run time, as the simulator provides them: dlopen and dlsym in the
// backend's sources are renamed to these (meson.build), which hand out the simulated cuBLAS and NCCL
// below for their sonames and pass every other name to the real loader. FTLLM_CUDASIM_NO_CUBLAS=1 or
// FTLLM_CUDASIM_NO_NCCL=1 makes the library missing, to test the paths without it.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nccl.h>

#include "sim_runtime.h"

namespace {

int cublas_library, nccl_library;  // their addresses are the handles

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

}  // namespace

extern "C" void* ftllm_sim_dlopen(const char* name, int flags) {
  if (name && std::strstr(name, "libcublas.so")) return env_set("FTLLM_CUDASIM_NO_CUBLAS") ? nullptr : &cublas_library;
  if (name && std::strstr(name, "libnccl.so")) return env_set("FTLLM_CUDASIM_NO_NCCL") ? nullptr : &nccl_library;
  return dlopen(name, flags);
}

extern "C" void* ftllm_sim_dlsym(void* handle, const char* symbol) {
  static const std::map<std::string, void*> cublas = {
      {"cublasCreate_v2", reinterpret_cast<void*>(&cublasCreate_v2)},
      {"cublasSetStream_v2", reinterpret_cast<void*>(&cublasSetStream_v2)},
      {"cublasGemmEx", reinterpret_cast<void*>(&cublasGemmEx)},
      {"cublasGetStatusString", reinterpret_cast<void*>(&cublasGetStatusString)},
  };
  static const std::map<std::string, void*> nccl = {
      {"ncclCommInitAll", reinterpret_cast<void*>(&ncclCommInitAll)},
      {"ncclAllReduce", reinterpret_cast<void*>(&ncclAllReduce)},
      {"ncclGroupStart", reinterpret_cast<void*>(&ncclGroupStart)},
      {"ncclGroupEnd", reinterpret_cast<void*>(&ncclGroupEnd)},
      {"ncclGetErrorString", reinterpret_cast<void*>(&ncclGetErrorString)},
  };
  if (handle == &cublas_library || handle == &nccl_library) {
    const auto& table = handle == &cublas_library ? cublas : nccl;
    auto it = table.find(symbol);
    return it == table.end() ? nullptr : it->second;
  }
  return dlsym(handle, symbol);
}

// ---- cuBLAS: GemmEx by its definition, column-major, summed in float over K in parts whose number
// the shape decides (more for fewer columns), as cuBLAS picks split-K kernels by shape: a row's bits
// depend on the batch it is in, as on a GPU, so no test can lean on their being the same.

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

double element(const void* base, cudaDataType t, size_t i) {
  switch (t) {
    case CUDA_R_32F: return static_cast<const float*>(base)[i];
    case CUDA_R_16F: return __half2float(static_cast<const __half*>(base)[i]);
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default: return 0;
  }
}

size_t element_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

// The bytes a column-major rows x cols matrix with leading dimension ld spans.
size_t span_bytes(int rows, int cols, int ld, size_t elem) {
  return rows == 0 || cols == 0 ? 0 : (size_t(cols - 1) * size_t(ld) + size_t(rows)) * elem;
}

}  // namespace

extern "C" cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                       int n, int k, const void* alpha, const void* A, cudaDataType Atype, int lda,
                                       const void* B, cudaDataType Btype, int ldb, const void* beta, void* C,
                                       cudaDataType Ctype, int ldc, cublasComputeType_t computeType, cublasGemmAlgo_t) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool types_ok = Atype == Btype && (Atype == CUDA_R_32F || Atype == CUDA_R_16F || Atype == CUDA_R_16BF) &&
                        Ctype == CUDA_R_32F && computeType == CUBLAS_COMPUTE_32F;
  if (!types_ok) return CUBLAS_STATUS_NOT_SUPPORTED;
  // The operands must be memory of the handle's device (alpha and beta are host scalars).
  const int device = ftllm_sim::stream_device(handle->stream);
  const size_t ea = element_bytes(Atype);
  if (ftllm_sim::device_of(A, span_bytes(ta ? k : m, ta ? m : k, lda, ea)) != device ||
      ftllm_sim::device_of(B, span_bytes(tb ? n : k, tb ? k : n, ldb, ea)) != device ||
      ftllm_sim::device_of(C, span_bytes(m, n, ldc, 4)) != device) {
    std::fprintf(stderr, "cudasim: cublasGemmEx: an operand is not (wholly) memory of the stream's device\n");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  float* c = static_cast<float*>(C);
  const int parts = n <= 16 ? 4 : n <= 64 ? 2 : 1, part = (k + parts - 1) / parts;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      float s = 0;
      for (int l0 = 0; l0 < k; l0 += part) {
        float partial = 0;
        for (int l = l0; l < std::min(k, l0 + part); ++l) {
          const size_t ai = ta ? size_t(l) + size_t(i) * lda : size_t(i) + size_t(l) * lda;
          const size_t bi = tb ? size_t(j) + size_t(l) * ldb : size_t(l) + size_t(j) * ldb;
          partial += float(element(A, Atype, ai) * element(B, Btype, bi));
        }
        s += partial;
      }
      float& out = c[size_t(i) + size_t(j) * ldc];
      out = a * s + (b == 0.0f ? 0.0f : b * out);  // beta 0: C is not read, as cuBLAS does
    }
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

// ---- NCCL: communicators made together form a clique; an all-reduce runs once every member of its
// clique has called it (in a group, at the group's end), summing in rank order.

struct ncclComm {
  int clique, rank, size, device;
};

namespace {

struct Call {
  const float* send;
  float* recv;
  size_t count;
};

struct Pending {
  int size = 0;                // the clique's ranks
  std::map<int, Call> calls;   // by rank, so far
};

std::mutex nccl_mu;
int cliques = 0;
int group_depth = 0;
std::map<int, Pending> pending;  // by clique

}  // namespace

extern "C" ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  std::lock_guard lock(nccl_mu);
  if (ndev < 1) return ncclInvalidArgument;
  const int clique = cliques++;
  for (int r = 0; r < ndev; ++r) {
    const int device = devlist ? devlist[r] : r;
    if (device < 0 || device >= ftllm_sim::device_count()) return ncclInvalidArgument;
    comms[r] = new ncclComm{clique, r, ndev, device};
  }
  return ncclSuccess;
}

namespace {

// Sums the calls of every clique whose members have all called.
ncclResult_t reduce_ready() {
  for (auto it = pending.begin(); it != pending.end();) {
    auto& calls = it->second.calls;
    if (int(calls.size()) < it->second.size) {
      ++it;
      continue;
    }
    const size_t count = calls.begin()->second.count;
    for (auto& [rank, call] : calls)
      if (call.count != count) return ncclInvalidUsage;
    std::vector<float> sum(count, 0.0f);
    for (auto& [rank, call] : calls)
      for (size_t i = 0; i < count; ++i) sum[i] += call.send[i];
    for (auto& [rank, call] : calls) std::copy(sum.begin(), sum.end(), call.recv);
    it = pending.erase(it);
  }
  return ncclSuccess;
}

}  // namespace

extern "C" ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                      ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  std::lock_guard lock(nccl_mu);
  if (!comm || datatype != ncclFloat || op != ncclSum) return ncclInvalidArgument;
  if (ftllm_sim::device_of(sendbuff, count * 4) != comm->device || ftllm_sim::device_of(recvbuff, count * 4) != comm->device ||
      ftllm_sim::stream_device(stream) != comm->device) {
    std::fprintf(stderr, "cudasim: ncclAllReduce: a buffer or the stream is not on the communicator's device\n");
    return ncclInvalidArgument;
  }
  Pending& p = pending[comm->clique];
  p.size = comm->size;
  if (p.calls.count(comm->rank)) return ncclInvalidUsage;  // a rank called twice before the others once
  p.calls[comm->rank] = {static_cast<const float*>(sendbuff), static_cast<float*>(recvbuff), count};
  return group_depth > 0 ? ncclSuccess : reduce_ready();
}

extern "C" ncclResult_t ncclGroupStart() {
  std::lock_guard lock(nccl_mu);
  ++group_depth;
  return ncclSuccess;
}

extern "C" ncclResult_t ncclGroupEnd() {
  std::lock_guard lock(nccl_mu);
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth > 0) return ncclSuccess;
  const ncclResult_t r = reduce_ready();
  if (r != ncclSuccess) return r;
  // From one host thread, a group that leaves a clique incomplete would hang NCCL: say so instead.
  if (!pending.empty()) {
    std::fprintf(stderr, "cudasim: ncclGroupEnd with an all-reduce that not every rank of its communicators joined\n");
    pending.clear();
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

extern "C" const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
  }
  return "unknown result";
}
