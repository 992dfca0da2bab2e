// The parts of a Hugging Face config.json (and generation_config.json) the engine uses.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ftllm::model {

enum class RopeType { Default, Linear, Llama3, Yarn, LongRope };

struct RopeConfig {
  double theta = 10000.0;
  RopeType type = RopeType::Default;
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3, yarn
  double beta_fast = 32, beta_slow = 1;  // yarn: the rotation counts bounding the blend
  double mscale = 0, mscale_all_dim = 0;  // yarn: 0 when absent
  double attention_factor = 0;           // yarn: cos/sin scale; 0 derives it from factor and the mscales
  bool truncate = true;                  // yarn: round the blend's bounds to whole dimensions
  // longrope (Phi-3 "su"): per-dimension divisors of the frequencies, the long ones for positions past
  // original_max_position_embeddings; attention_factor scales cos/sin (0: derived from factor).
  std::vector<double> short_factor, long_factor;
  // The rotated part of each head (Phi-4-mini, GLM-4.5): the first partial_rotary_factor * head_dim values.
  double partial_rotary_factor = 1.0;
  int64_t rotary_dim(int64_t head_dim) const { return int64_t(double(head_dim) * partial_rotary_factor) / 2 * 2; }
};

// Mixture-of-experts (Qwen2-MoE, Qwen3-MoE): which layers route to experts, and how.
struct MoeConfig {
  int64_t num_experts = 0;             // routed experts per MoE layer; 0: a dense model
  int64_t experts_per_token = 0;       // num_experts_per_tok (--moe_experts overrides it)
  int64_t expert_intermediate = 0;     // moe_intermediate_size
  int64_t shared_intermediate = 0;     // shared_expert_intermediate_size; 0: no shared expert
  bool norm_topk_prob = false;         // renormalise the chosen experts' weights to sum to 1
  int64_t sparse_step = 1;             // decoder_sparse_step: every sparse_step-th layer is MoE
  std::vector<int64_t> dense_layers;   // mlp_only_layers: dense MLP whatever the step says
  // DeepSeek V3: sigmoid scores plus e_score_correction_bias choose among the topk_group best of n_group
  // groups; the chosen weights (sigmoid, renormalised when norm_topk_prob) scaled by routed_scaling_factor.
  // DeepSeek V2 (group_limited_greedy): softmax scores, groups ranked by their best score. Greedy: one group.
  bool sigmoid_grouped = false;
  int64_t n_group = 1, topk_group = 1;
  double routed_scaling_factor = 1.0;
  double swiglu_alpha = 0, swiglu_limit = 0;  // gpt-oss's clamped SwiGLU experts when limit > 0
  bool is_moe_layer(int64_t layer) const {
    if (num_experts == 0 || sparse_step <= 0 || (layer + 1) % sparse_step != 0) return false;
    for (int64_t d : dense_layers)
      if (d == layer) return false;
    return true;
  }
};

// Multi-head latent attention (DeepSeek V2/V3): keys and values come from one compressed row per token
// (kv_lora_rank values plus a shared rope_dim key part), which is all the KV cache holds.
struct MlaConfig {
  int64_t q_lora_rank = 0;   // 0: q_proj straight from the hidden state
  int64_t kv_lora_rank = 0;  // 0: not MLA
  int64_t nope_dim = 0, rope_dim = 0, v_dim = 0;  // qk_nope_head_dim, qk_rope_head_dim, v_head_dim
  bool rope_interleave = true;  // rope pairs (x0, x1), (x2, x3) ... as DeepSeek's weights lay them out
};

// Gated DeltaNet linear attention (Qwen3-Next): instead of a KV cache, each linear_layers layer keeps a
// state per sequence: the last conv_kernel - 1 inputs of its causal convolution over the q, k, v channels,
// and a [k_dim, v_dim] matrix per value head that each token decays and updates (the delta rule).
struct LinearAttentionConfig {
  int64_t k_heads = 0, v_heads = 0;  // linear_num_key_heads, linear_num_value_heads (a multiple)
  int64_t k_dim = 0, v_dim = 0;      // linear_key_head_dim, linear_value_head_dim
  int64_t conv_kernel = 0;           // linear_conv_kernel_dim
  std::vector<bool> linear_layers;   // per layer: linear attention (else full attention); empty: none
  int64_t conv_channels() const { return 2 * k_heads * k_dim + v_heads * v_dim; }
  // Floats of one sequence's state in one linear layer: the convolution's window, then the matrices.
  int64_t state_floats() const { return conv_channels() * (conv_kernel - 1) + v_heads * k_dim * v_dim; }
  bool is_linear(int64_t layer) const { return size_t(layer) < linear_layers.size() && linear_layers[size_t(layer)]; }
  int64_t count() const { return int64_t(std::count(linear_layers.begin(), linear_layers.end(), true)); }
};

// The MLP's activation on its gate: SwiGLU's silu, or GeGLU's tanh-approximated GELU (Gemma).
enum class Activation { Silu, GeluTanh };

struct ModelConfig {
  std::string architecture;  // the first entry of "architectures"
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // Llama-style: bias on q, k, v and o
  bool mlp_bias = false;
  std::optional<int64_t> sliding_window;  // attention sees at most this many positions back
  Activation activation = Activation::Silu;  // hidden_act / hidden_activation
  // What architectures vary in the shared blocks (Gemma): norms scale by (offset + w); the embedding
  // rows are multiplied by embedding_scale (0: not); attention scores by attention_scale (0: 1/sqrt(head_dim)),
  // then soft-capped; the final logits soft-capped; the sliding-window layers rotate by sliding_rope when set.
  float norm_weight_offset = 0;
  float embedding_scale = 0;
  float attention_scale = 0;
  float attention_softcap = 0, final_softcap = 0;  // > 0: scores / logits become cap * tanh(x / cap)
  std::optional<RopeConfig> sliding_rope;
  std::vector<bool> sliding_layers;  // Gemma: which layers attend within sliding_window
  bool qk_norm = false;              // GLM-4.5: use_qk_norm
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // config.json's and generation_config.json's, merged
  MoeConfig moe;
  MlaConfig mla;
  LinearAttentionConfig linear;
  // What the KV cache holds per token and layer: kv_heads * head_dim floats of keys and as many of
  // values, or MLA's one compressed row.
  int64_t kv_row_floats() const { return mla.kv_lora_rank ? mla.kv_lora_rank + mla.rope_dim : num_kv_heads * head_dim; }
  bool kv_keys_only() const { return mla.kv_lora_rank > 0; }
  // The cache's heads per token and values per head: MLA caches one compressed row per token.
  int64_t kv_cache_heads() const { return mla.kv_lora_rank ? 1 : num_kv_heads; }
  int64_t kv_cache_head_dim() const { return mla.kv_lora_rank ? mla.kv_lora_rank + mla.rope_dim : head_dim; }
  // Layers with KV pages: all but linear attention's, which keep a recurrent state per sequence instead.
  int64_t kv_layers() const { return num_layers - linear.count(); }
};

// The layers' kinds, for ftllmctl status: "3 layers: 2 sliding/16, 1 global; 1 dense, 2 MoE 2 of 8".
std::string describe_layers(const ModelConfig& config);

// Parses config.json text; `source` names it in errors. Throws EngineError naming a missing or
// malformed field.
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);

// config.json text for `config` that parse_model_config reads back to the same config (ftllmctl export).
std::string model_config_json(const ModelConfig& config);

// Adds generation_config.json's eos ids (it often lists more stop tokens than config.json).
void merge_generation_config(ModelConfig& config, const std::string& json_text, const std::string& source);

}  // namespace ftllm::model
