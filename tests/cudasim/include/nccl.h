// NCCL for the simulator: communicators over simulated devices and a grouped all-reduce
// (tests/cudasim/sim_libraries.cpp).
#pragma once

#include <cstddef>

#include "cuda_runtime.h"

struct ncclComm;
using ncclComm_t = ncclComm*;
enum ncclResult_t { ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclInvalidArgument = 4, ncclInvalidUsage = 5 };
enum ncclDataType_t { ncclFloat32 = 7, ncclFloat = 7 };
enum ncclRedOp_t { ncclSum = 0 };

extern "C" {
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
const char* ncclGetErrorString(ncclResult_t result);
}
