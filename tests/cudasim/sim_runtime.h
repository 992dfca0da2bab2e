// The simulator's runtime as its other parts see it (sim_runtime.cpp).
#pragma once

#include <cstddef>

struct CUstream_st;

namespace ftllm_sim {

int device_count();
int current_device();
// The device whose allocation holds [p, p + bytes), or -1 (host memory, or past an allocation's end).
int device_of(const void* p, size_t bytes);
// The device of a stream (null: the current device), or -2 for a stream that was never made.
int stream_device(CUstream_st* s);
void set_launch_error(int error);

}  // namespace ftllm_sim
