// Per-head small matrix products and block copies: multi-head latent attention absorbs each head's query
// into the compressed cache through its rows of kv_b_proj and expands its output through others.
#include "cuda_ops.h"
#include "device_state.h"
#include "reduce.cuh"

namespace ftllm::cuda {

namespace {

// One block per (token, head), x_h staged in shared memory. Rows: a warp per output, lanes across `in`.
__global__ void head_rows_kernel(const float* __restrict__ x, int64_t xrow, Blocks xb, const float* __restrict__ w,
                                 int64_t wrow, HeadMatmul m, float* __restrict__ y, int64_t yrow, Blocks yb) {
  extern __shared__ float xs[];
  const int64_t t = blockIdx.x / xb.heads, h = blockIdx.x % xb.heads;
  const float* xh = x + t * xrow + xb.offset + h * xb.stride;
  for (int64_t i = threadIdx.x; i < m.in; i += blockDim.x) xs[i] = xh[i];
  __syncthreads();
  const float* wh = w + (h * m.w_head_rows + m.w_first_row) * wrow;
  float* yh = y + t * yrow + yb.offset + h * yb.stride;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (!m.transposed) {
    for (int64_t j = warp; j < m.out; j += warps) {
      float s = 0;
      for (int64_t i = lane; i < m.in; i += 32) s += xs[i] * wh[j * wrow + i];
      s = warp_sum(s);
      if (lane == 0) yh[j] = s;
    }
  } else {  // y_h = sum_i x_h[i] * row i: threads across the outputs, rows in order
    for (int64_t j = threadIdx.x; j < m.out; j += blockDim.x) {
      float s = 0;
      for (int64_t i = 0; i < m.in; ++i) s += xs[i] * wh[i * wrow + j];
      yh[j] = s;
    }
  }
}

__global__ void copy_blocks_kernel(const float* __restrict__ src, int64_t srow, Blocks sb, float* __restrict__ dst,
                                   int64_t drow, Blocks db, int64_t T, int64_t n) {
  const size_t total = size_t(T * sb.heads * n);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const int64_t j = int64_t(i % size_t(n)), h = int64_t(i / size_t(n)) % sb.heads, t = int64_t(i / size_t(n * sb.heads));
    dst[t * drow + db.offset + h * db.stride + j] = src[t * srow + sb.offset + h * sb.stride + j];
  }
}

}  // namespace

void head_matmul(const Tensor& x, Blocks xb, const Tensor& w, const HeadMatmul& m, Tensor& y, Blocks yb) {
  DeviceState& s = state(x.device);
  const int64_t T = x.dim(0);
  if (T == 0) return;
  head_rows_kernel<<<unsigned(T * xb.heads), 256, size_t(m.in) * 4, s.stream>>>(x.as<float>(), x.dim(1), xb, w.as<float>(),
                                                                               w.dim(1), m, y.as<float>(), y.dim(1), yb);
  check_launch("head_matmul", s.index);
}

void copy_blocks(const Tensor& src, Blocks sb, Tensor& dst, Blocks db, int64_t n) {
  DeviceState& s = state(src.device);
  const int64_t T = src.dim(0);
  if (T == 0) return;
  copy_blocks_kernel<<<blocks_for(size_t(T * sb.heads * n), 256), 256, 0, s.stream>>>(src.as<float>(), src.dim(1), sb,
                                                                                      dst.as<float>(), dst.dim(1), db, T, n);
  check_launch("copy_blocks", s.index);
}

}  // namespace ftllm::cuda
