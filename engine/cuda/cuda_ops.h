// The CUDA twins of ops/ops.h, for tensors in one device's memory (runtime.h), queued on that device's
// stream. ops/ dispatches here when an op's tensors are on a CUDA device; shape checks happen there.
// Activations are float32 as on the CPU; weights stay in their stored dtype and are decoded in
// registers (quant/block_decode.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "../core/tensor.h"
#include "../kvcache/kv_format.h"

namespace ftllm::cuda {

// y[T, N] = x[T, K] · w[N, K]ᵀ (+ bias[N]). Up to kGemvRows rows: a GEMV reading each weight once for all
// rows; more: the weight decoded to a 16-bit (or float32 before sm_80) scratch matrix and a cuBLAS GEMM.
constexpr int64_t kGemvRows = 8;
void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y);
// The GEMV path alone, whatever T (the benchmark and tests compare it with the GEMM path).
void linear_gemv(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y);
void linear_gemm(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y);
// Rows of w decoded to float32 (out [N, K], float32): the reference dequantization on the device.
void dequantize(const Tensor& w, Tensor& out);

void rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& out, float w_offset);  // rows of w.numel()
void embedding(const Tensor& table, std::span<const int32_t> ids, Tensor& out);
void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out);
void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out);
void softcap(Tensor& x, float cap);  // x = cap * tanh(x / cap)
void clamped_swiglu(const Tensor& gate, const Tensor& up, Tensor& out, float alpha, float limit);
void add(Tensor& x, const Tensor& y);
// Rotate-half RoPE (interleaved: DeepSeek's pairs) on x[T, heads * d] (rows of `stride` floats, the head
// block starting at `offset`) with cos/sin[T, d/2] on the same device.
void rope(Tensor& x, int64_t heads, const Tensor& cos, const Tensor& sin, bool interleaved = false, int64_t stride = 0,
          int64_t offset = 0, int64_t head_stride = 0);
// ops::rmsnorm_prefix, ops::head_matmul and ops::copy_blocks (multi-head latent attention's pieces).
struct Blocks {
  int64_t heads, stride, offset;
};
struct HeadMatmul {
  int64_t in, out, w_head_rows, w_first_row;
  bool transposed;
};
void rmsnorm_prefix(Tensor& x, const Tensor& w, float eps);
void head_matmul(const Tensor& x, Blocks xb, const Tensor& w, const HeadMatmul& m, Tensor& y, Blocks yb);
void copy_blocks(const Tensor& src, Blocks sb, Tensor& dst, Blocks db, int64_t n);
// out[i] = x[rows[i]]; and x_out[rows[i]] += weight[i] * y[i] (rows may repeat: added in order).
void gather_rows(const Tensor& x, std::span<const int64_t> rows, Tensor& out);
void scatter_add_rows(const Tensor& y, std::span<const int64_t> rows, std::span<const float> weights, Tensor& out);
// ops::lora: for each row, y[row] += scale · (x[row] · Aᵀ) · Bᵀ with A [rank, K] and bt = Bᵀ [rank, n] in
// device memory (float32, or bfloat16 / float16: `dtype` 0, 1, 2), y [T, n] each row's own output; max_rank
// and max_n are the largest of the rows'.
struct LoraRow {
  const void* a;
  const void* bt;
  float* y;
  float scale;
  int rank;
  int dtype;
  int64_t n;
  int64_t row;
};
void lora(const Tensor& x, std::span<const LoraRow> rows, int max_rank, int64_t max_n);
void scale_rows(Tensor& x, const Tensor& scale, bool sigmoid);  // row t *= (sigmoid of) scale[t]
void sigmoid_mul(Tensor& x, const Tensor& gate);  // x *= sigmoid(gate)
// ops::gated_delta_net (its contract there): token t belongs to sequence seq[t] at position pos[t], whose
// state is row slots[seq] of `state`.
struct DeltaNetParams {
  const Tensor *conv, *a_log, *dt_bias, *norm;
  int64_t k_heads, v_heads, k_dim, v_dim, kernel;
  float eps;
};
void gated_delta_net(const Tensor& qkv, const Tensor& z, const Tensor& ba, const DeltaNetParams& p, std::span<const int64_t> pos,
                     std::span<const int32_t> seq, std::span<const int32_t> slots, Tensor& state, Tensor& out);

// The step's tokens as attention sees them, on one device: each token's position and sequence, and the
// sequences' block tables one after another. Made once per step and device, shared by every layer.
struct AttentionIndex;
std::shared_ptr<AttentionIndex> make_attention_index(Device device, std::span<const int64_t> pos,
                                                     std::span<const int32_t> seq,
                                                     std::span<const int32_t> block_table,
                                                     std::span<const int32_t> table_start);
// One layer's paged cache on the device: block b's rows of row_floats start at keys + b * block_floats.
struct KvLayer {
  uint8_t* keys;
  uint8_t* values;
  int64_t block_bytes, row_bytes;
  kvcache::KvDtype dtype;  // heads of head_dim values each (kv_format.h)
};
struct AttentionParams {
  int64_t heads, kv_heads, head_dim, block_tokens, window, value_dim;
  float scale;
  float softcap = 0;  // > 0: scores become softcap * tanh(score / softcap)
  const float* sinks = nullptr;  // float32 [heads] on the device: logits that join each softmax's sum
};
// Writes token t's k (and v, unless null) row into its slot of the cache.
void store_kv(const AttentionIndex& index, const Tensor& k, const Tensor* v, const KvLayer& kv, int64_t block_tokens,
              int64_t head_dim);
// Causal attention of q[T, heads * head_dim] over each token's own sequence (out [T, heads * value_dim]);
// long sequences split their keys over several blocks (flash-decoding) and merge the partial softmaxes.
void paged_attention(const AttentionIndex& index, const Tensor& q, const KvLayer& kv, const AttentionParams& p,
                     Tensor& out);

// Sampling on the device over logits [R, V] (float32): row r's token. argmax takes the lowest index of
// the maximum; sample keeps the top_k (0: all) most likely tokens, then the smallest prefix of them whose
// probability reaches top_p, and picks with uniform[r] in [0, 1) from softmax(logits / temperature).
std::vector<int32_t> argmax_rows(const Tensor& logits);
std::vector<int32_t> sample_rows(const Tensor& logits, std::span<const float> temperature, std::span<const int32_t> top_k,
                                 std::span<const float> top_p, std::span<const float> uniform);

}  // namespace ftllm::cuda
