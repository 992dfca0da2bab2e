// cuBLAS, loaded at run time (libcublas.so.13) so that ftllmd starts on a machine with only the NVIDIA
// driver; without it the prefill GEMMs run on the GEMV kernels instead, and status says so.
#pragma once

#include <cublas_v2.h>

#include <string>

namespace ftllm::cuda {

struct Blas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  // The exported cublasGemmEx (the header adds a C++ overload taking a cudaDataType compute type).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
                            cudaDataType, int, const void*, cudaDataType, int, const void*, void*, cudaDataType, int,
                            cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// The loaded library, or nullptr with `why` saying what is missing.
const Blas* blas(std::string* why = nullptr);

}  // namespace ftllm::cuda
