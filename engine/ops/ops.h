// The ops a transformer forward pass is made of, each with its shape contract. On host tensors they run
// the kernel table of the context (scalar reference or AVX2) spread over its thread pool; on tensors in
// a CUDA device's memory, the CUDA backend's kernels (engine/cuda), queued on that device's stream.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "../core/tensor.h"
#include "../kvcache/kv_format.h"

namespace ftllm::cpu {
class ThreadPool;
struct Kernels;
struct Q8Block;
}  // namespace ftllm::cpu

namespace ftllm::cuda {
struct AttentionIndex;
}

namespace ftllm::ops {

struct Context {
  cpu::ThreadPool& pool;
  const cpu::Kernels& kernels;
  Device device = {};  // where this context's layers run; temporaries are made there
};

// A float32 tensor of zeros on a device (where the context runs).
Tensor zeros(Device device, std::vector<int64_t> shape);
inline Tensor zeros(const Context& ctx, std::vector<int64_t> shape) { return zeros(ctx.device, std::move(shape)); }
// An output the op writing it fills completely (linear, attention): on the host not zeroed first.
Tensor scratch(const Context& ctx, std::vector<int64_t> shape);
// t on `to` (a copy, or t itself when it is there already): how activations cross between devices.
Tensor to_device(const Tensor& t, Device to);
// Whether this build has the CUDA backend (else placing anything on cuda is refused).
bool cuda_built();
// Tensor parallelism's sum of partial outputs, in place on every part, with NCCL where the parts are
// on distinct GPUs and NCCL is installed; false (nothing done) otherwise, for the caller to sum itself.
bool all_reduce_sum(const std::vector<Tensor*>& parts);
// Bytes a CUDA device could still give: its free memory plus what its allocator keeps cached.
uint64_t device_available_bytes(Device device);

// Rows [0, rows) of x (K floats each) as the int8 blocks the kernels want for weights of type wt, or
// empty when wt's kernel computes on the floats.
std::vector<cpu::Q8Block> quantized_rows(Context& ctx, DType wt, const float* x, int64_t rows, int64_t K);

// y[T, N] = x[T, K] · w[N, K]ᵀ (+ bias[N], float32). y must be float32 [T, N].
void linear(Context& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y);

// Several linear layers of one input (q, k and v; gate and up), each as linear() computes it, bit for
// bit, in one job over all their rows on the CPU: x quantized once per activation format, and one wait
// for the threads instead of one per layer (a decode step's small k and v layers were mostly waiting).
struct LinearOut {
  const Tensor* w;
  const Tensor* bias;  // or null
  Tensor* y;
};
void linear_many(Context& ctx, const Tensor& x, std::span<const LinearOut> outs);

// Low-rank adapters' updates of linear layers' outputs: y[row] += scale · (x[row] · Aᵀ) · Bᵀ for every row of
// every segment, each segment with its own output (the layers sharing the input x: q, k and v; gate and up),
// a row of an output in one segment at most. a [r, K] and bt = Bᵀ [r, N] are float32, bfloat16 or float16
// alike, on x's device. A row's bits depend only on the row and its segment, not on what shares the call.
struct LoraSegment {
  const Tensor* a;
  const Tensor* bt;
  float scale;
  std::span<const int64_t> rows;
  Tensor* y;  // [T, N] float32
};
void lora(Context& ctx, const Tensor& x, std::span<const LoraSegment> segments);

// out[r] = rmsnorm(x[r]) * (w_offset + w) for each row r of length w.numel() (x may be [T, heads * d] with
// w of d). Gemma's norms scale by 1 + w: its checkpoints store w.
void rmsnorm(Context& ctx, const Tensor& x, const Tensor& w, float eps, Tensor& out, float w_offset = 0);

// out[t] = table[ids[t]] as float32. Throws EngineError for an id outside the table.
void embedding(Context& ctx, const Tensor& table, std::span<const int32_t> ids, Tensor& out);

// out = silu(gate) * up, all [T, N].
void silu_mul(Context& ctx, const Tensor& gate, const Tensor& up, Tensor& out);
// gpt-oss's clamped SwiGLU: out = (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g), g = min(gate, limit).
void clamped_swiglu(Context& ctx, const Tensor& gate, const Tensor& up, Tensor& out, float alpha, float limit);
void clamped_swiglu_rows(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit);  // host floats
// x = cap * tanh(x / cap), in place (Gemma 2's final logit soft-capping).
void softcap(Context& ctx, Tensor& x, float cap);
// out = gelu_tanh(gate) * up (GeGLU with the tanh approximation of GELU), all [T, N].
void gelu_tanh_mul(Context& ctx, const Tensor& gate, const Tensor& up, Tensor& out);

// out[i] = x[rows[i]]; out[rows[i]] += weights[i] * y[i] (rows distinct within one call).
void gather_rows(Context& ctx, const Tensor& x, std::span<const int64_t> rows, Tensor& out);
void scatter_add_rows(Context& ctx, const Tensor& y, std::span<const int64_t> rows, std::span<const float> weights, Tensor& out);

// Row t of x[T, N] times scale[t] (scale [T, 1]), or times sigmoid(scale[t]).
void scale_rows(Context& ctx, Tensor& x, const Tensor& scale, bool sigmoid);

// Each row's argmax (the first of equals) of logits [R, V], on the logits' device: a GPU's step hands
// back R token ids instead of R rows of logits.
std::vector<int32_t> argmax_rows(Context& ctx, const Tensor& logits);

// x *= sigmoid(gate), same shapes (Qwen3-Next's gated attention output).
void sigmoid_mul(Context& ctx, Tensor& x, const Tensor& gate);

// x += y, same shapes.
void add(Context& ctx, Tensor& x, const Tensor& y);

// Rotary embedding in Hugging Face's rotate-half layout, applied in place to x[T, heads * d] with
// cos/sin[T, d/2] (row t holds the angles of token t's position).
void rope(Context& ctx, Tensor& x, int64_t heads, const Tensor& cos, const Tensor& sin);

// Blocks of a row: block h of row t starts at t * row + offset + h * stride (row: the tensor's width).
struct HeadBlocks {
  int64_t heads, stride, offset;
};
// RoPE on blocks of d = 2 * cos.dim(1) values of each row: rotate-half pairs (i, i + d/2), or DeepSeek's
// interleaved pairs (2i, 2i + 1) with their results laid out rotate-half style (evens' results first).
void rope_blocks(Context& ctx, Tensor& x, HeadBlocks blocks, const Tensor& cos, const Tensor& sin, bool interleaved);
// rmsnorm of the first w.numel() values of each row of x, in place (MLA's compressed row).
void rmsnorm_prefix(Context& ctx, Tensor& x, const Tensor& w, float eps);
// Per head h: y_h = W_h x_h, x_h the `in` values of x's block h and y_h the `out` values of y's block h.
// W_h is `out` rows of `in` floats starting at row h * w_head_rows + w_first_row of w (float32); with
// `transposed`, W_h is instead `in` rows of `out` floats (y_h = sum_i x_h[i] * row i). MLA absorbs each
// head's query into the compressed cache and expands its output with these, over views of kv_b_proj.
struct HeadMatmul {
  int64_t in, out, w_head_rows, w_first_row;
  bool transposed;
};
void head_matmul(Context& ctx, const Tensor& x, HeadBlocks xb, const Tensor& w, const HeadMatmul& m, Tensor& y,
                 HeadBlocks yb);
// n values of each block of src into the same-numbered block of dst.
void copy_blocks(Context& ctx, const Tensor& src, HeadBlocks sb, Tensor& dst, HeadBlocks db, int64_t n);

// The step's tokens as attention sees them, shared by every layer: token t is at position pos[t] of
// sequence seq[t], whose cache blocks are block_table[table_start[s]], ... in position order.
struct AttentionBatch {
  std::span<const int64_t> pos;
  std::span<const int32_t> seq;
  std::vector<int32_t> block_table, table_start;
  std::vector<int32_t> state_slot;  // per sequence: its recurrent state's slot (linear-attention layers)
  // The same uploaded to each CUDA device, made by the first layer there that needs it.
  mutable std::vector<std::pair<Device, std::shared_ptr<cuda::AttentionIndex>>> device_index;
};
// One layer's cache: block b's rows (of row_bytes each: kv_heads heads of head_dim values stored as
// `dtype`, head h at h * kv_head_bytes(dtype, head_dim)) start at keys + b * block_bytes (values
// likewise); on `device`.
struct KvLayer {
  uint8_t* keys;
  uint8_t* values;
  int64_t block_bytes, row_bytes;
  kvcache::KvDtype dtype;
  Device device;
};
struct AttentionShape {
  int64_t heads, kv_heads, head_dim, block_tokens;
  int64_t window = 0;  // > 0: a token sees only the last `window` positions (itself included)
  float scale;
  // Values narrower than keys (MLA: the value is the first value_dim floats of the compressed key row);
  // 0: head_dim. out is [T, heads * value_dim] then.
  int64_t value_dim = 0;
  float softcap = 0;  // > 0: scores become softcap * tanh(score / softcap) before the softmax (Gemma 2)
  // gpt-oss: a learned logit per head (float32 [heads], where q is) joins each softmax's denominator
  // and weighs no value.
  const Tensor* sinks = nullptr;
};
// Writes row t of k (and of v, unless null) into token t's slot of the layer's cache, as heads of
// head_dim values in the cache's dtype.
void store_kv(Context& ctx, const AttentionBatch& b, const Tensor& k, const Tensor* v, const KvLayer& kv,
              int64_t block_tokens, int64_t head_dim);
// Causal attention of each token over its own sequence's cached keys and values (itself included):
// q[T, heads * d], out[T, heads * value_dim].
void paged_attention(Context& ctx, const Tensor& q, const AttentionBatch& b, const KvLayer& kv, const AttentionShape& shape,
                     Tensor& out);

// Gated DeltaNet (Qwen3-Next's linear attention), from its input projections to the gated, normalised
// output heads, over each sequence's recurrent state. With r = v_heads / k_heads:
// - qkv [T, channels]: all q heads, all k heads, all v heads (k_dim, k_dim, v_dim values each); z [T,
//   v_heads * v_dim] the output gates; ba [T, k_heads * 2r] grouped by key head as in_proj_ba gives it
//   ([r b, r a] per key head; value head h is key head h / r's (h % r)-th);
// - the qkv channels pass a causal convolution of `kernel` taps (conv [channels, kernel]) and silu;
// - per value head, with q and k L2-normalised (q also by 1/sqrt(k_dim)), beta = sigmoid(b) and
//   decay = exp(-exp(a_log) * softplus(a + dt_bias)), the state S [k_dim, v_dim] becomes decay * S, then
//   S + k ⊗ beta (v - Sᵀk); the output o = Sᵀq goes through RMSNorm (norm [v_dim], eps) times silu(z).
// out is [T, v_heads * v_dim]. Each sequence's state (the convolution's last kernel - 1 inputs, then its
// matrices) is row b.state_slot[seq] of `state` [slots, LinearAttentionConfig::state_floats()]; a
// sequence whose first token in the batch is at position 0 starts from zeros. Tokens run one after another
// (the recurrent form), so any split of a prompt into steps computes the same bits.
struct DeltaNet {
  const Tensor &conv, &a_log, &dt_bias, &norm;
  int64_t k_heads, v_heads, k_dim, v_dim, kernel;
  float eps;
};
void gated_delta_net(Context& ctx, const Tensor& qkv, const Tensor& z, const Tensor& ba, const DeltaNet& net,
                     const AttentionBatch& b, Tensor& state, Tensor& out);

}  // namespace ftllm::ops
