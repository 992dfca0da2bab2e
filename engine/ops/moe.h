// Mixture-of-experts: routing each token to its top experts, and running the experts on the CPU with
// tokens grouped per expert.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "../core/tensor.h"
#include "ops.h"

namespace ftllm::ops {

// One SwiGLU expert: down(silu(gate · x) * (up · x)). gpt-oss's have biases (float32, empty when none)
// and clamp their SwiGLU: with g = min(gate, limit), u = clamp(up, -limit, limit), (u + 1) g sigmoid(alpha g).
struct Expert {
  Tensor gate, up, down;  // [I, H], [I, H], [H, I]
  Tensor gate_bias, up_bias, down_bias;
  float swiglu_alpha = 0, swiglu_limit = 0;  // limit > 0: the clamped SwiGLU
};

// Each token's chosen experts, ascending by expert index, with their weights: token t's j-th choice is
// expert[t * k + j] with weight[t * k + j].
struct Routes {
  int64_t k = 0;
  std::vector<int32_t> expert;
  std::vector<float> weight;
};

// Qwen-MoE routing: softmax over each row of logits [T, E], the k largest probabilities, divided by
// their sum when `renormalize` (norm_topk_prob), times `scale`. With n_group > 1 (DeepSeek V2's
// group_limited_greedy) only the topk_group groups with the highest single probability compete.
Routes route_softmax_topk(const Tensor& logits, int64_t k, bool renormalize, int64_t n_group = 1, int64_t topk_group = 1,
                          float scale = 1.0f);

// DeepSeek V3 routing: scores = sigmoid(logits); experts are chosen by score + bias
// (e_score_correction_bias) among the topk_group groups (of n_group) whose two best biased scores sum
// highest; the chosen experts' unbiased scores, divided by their sum when `renormalize`, times `scale`.
Routes route_sigmoid_grouped(const Tensor& logits, const Tensor& bias, int64_t k, int64_t n_group, int64_t topk_group,
                             bool renormalize, float scale);

// out[t] = sum over token t's routes of weight * expert(x[t]), added in ascending expert order (as
// transformers adds them). Tokens are grouped per expert so each expert's weights are read once per
// step; the work, (expert, slice of output rows) pieces, is handed out to the threads as they free up,
// since some experts get many tokens and others few. x and out are float32 [T, H].
void moe_experts(Context& ctx, const Tensor& x, const Routes& routes, std::span<const Expert> experts, Tensor& out);

// out[t] = swiglu expert e(x[t]) for every token (a dense MLP or a shared expert); out float32 [T, H].
void expert_mlp(Context& ctx, const Tensor& x, const Expert& e, Tensor& out);

}  // namespace ftllm::ops
