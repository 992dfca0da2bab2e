// The ops a transformer forward pass is made of, each with its shape contract. They run the kernel
// table of the context (scalar reference or AVX2) spread over its thread pool.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "../core/tensor.h"

namespace ftllm::cpu {
class ThreadPool;
struct Kernels;
struct Q8Block;
}  // namespace ftllm::cpu

namespace ftllm::ops {

struct Context {
  cpu::ThreadPool& pool;
  const cpu::Kernels& kernels;
};

// Rows [0, rows) of x (K floats each) as the int8 blocks the kernels want for weights of type wt, or
// empty when wt's kernel computes on the floats.
std::vector<cpu::Q8Block> quantized_rows(Context& ctx, DType wt, const float* x, int64_t rows, int64_t K);

// y[T, N] = x[T, K] · w[N, K]ᵀ (+ bias[N], float32). y must be float32 [T, N].
void linear(Context& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y);

// out[r] = rmsnorm(x[r]) * w for each row r of length w.numel() (x may be [T, heads * d] with w of d).
void rmsnorm(Context& ctx, const Tensor& x, const Tensor& w, float eps, Tensor& out);

// out[t] = table[ids[t]] as float32. Throws EngineError for an id outside the table.
void embedding(Context& ctx, const Tensor& table, std::span<const int32_t> ids, Tensor& out);

// out = silu(gate) * up, all [T, N].
void silu_mul(Context& ctx, const Tensor& gate, const Tensor& up, Tensor& out);

// x += y, same shapes.
void add(Context& ctx, Tensor& x, const Tensor& y);

// Rotary embedding in Hugging Face's rotate-half layout, applied in place to x[T, heads * d] with
// cos/sin[T, d/2] (row t holds the angles of token t's position).
void rope(Context& ctx, Tensor& x, int64_t heads, const Tensor& cos, const Tensor& sin);

// Causal attention of each token over its own sequence's cached keys and values (itself included).
struct KvBlocks {  // one sequence's cache for one layer
  std::vector<const float*> keys, values;  // per block: block_tokens rows of kv_heads * d floats
};
struct AttentionShape {
  int64_t heads, kv_heads, head_dim, block_tokens;
  int64_t window = 0;  // > 0: a token sees only the last `window` positions (itself included)
  float scale;
  // Values narrower than keys (MLA: the value is the first value_dim floats of the compressed key row);
  // 0: head_dim. out is [T, heads * value_dim] then.
  int64_t value_dim = 0;
};
// q[T, heads * d]; token t is at position pos[t] of sequence kv[seq[t]]; out[T, heads * d].
void paged_attention(Context& ctx, const Tensor& q, std::span<const int64_t> pos, std::span<const int32_t> seq,
                     std::span<const KvBlocks> kv, const AttentionShape& shape, Tensor& out);

}  // namespace ftllm::ops
