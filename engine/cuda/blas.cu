#include "blas.h"

#include <dlfcn.h>

namespace ftllm::cuda {

const Blas* blas(std::string* why) {
  static std::string missing;
  static const Blas* loaded = [] () -> const Blas* {
    static Blas b;
    void* lib = nullptr;
    for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"})
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!lib) {
      missing = "cuBLAS (libcublas.so.13) is not installed: prefill runs on the GEMV kernels";
      return nullptr;
    }
    b.create = reinterpret_cast<decltype(b.create)>(dlsym(lib, "cublasCreate_v2"));
    b.set_stream = reinterpret_cast<decltype(b.set_stream)>(dlsym(lib, "cublasSetStream_v2"));
    b.gemm_ex = reinterpret_cast<decltype(b.gemm_ex)>(dlsym(lib, "cublasGemmEx"));
    b.status_string = reinterpret_cast<decltype(b.status_string)>(dlsym(lib, "cublasGetStatusString"));
    if (!b.create || !b.set_stream || !b.gemm_ex || !b.status_string) {
      missing = "the cuBLAS found lacks the functions ftllm calls: prefill runs on the GEMV kernels";
      return nullptr;
    }
    return &b;
  }();
  if (!loaded && why) *why = missing;
  return loaded;
}

}  // namespace ftllm::cuda
