// The decoder-only transformer shared by every architecture in architecture.h: embeddings, N blocks of
// (RMSNorm, attention with RoPE and GQA, RMSNorm, SwiGLU MLP or mixture of SwiGLU experts), final norm,
// LM head.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "../kvcache/kv_cache.h"
#include "../ops/moe.h"
#include "../ops/ops.h"
#include "architecture.h"
#include "model_config.h"
#include "weights.h"

namespace ftllm::model {

struct LayerWeights {
  Tensor attn_norm, q, k, v, o;  // q only without q compression and k, v none under MLA
  // Multi-head latent attention: q_a (-> q_a_norm -> q_b) when q is compressed; kv_a gives the compressed
  // row (kv_a_norm over its first kv_lora_rank values); kv_b as float32 [heads * (nope + v), kv_lora_rank],
  // read by rows: a head's nope rows absorb its query, its v rows expand its output.
  Tensor q_a, q_a_norm, q_b, kv_a, kv_a_norm, kv_b;
  std::optional<Tensor> q_bias, k_bias, v_bias, o_bias;
  std::optional<Tensor> q_norm, k_norm;
  Tensor mlp_norm, gate, up, down;  // a dense layer's MLP (empty in a mixture-of-experts layer)
  std::optional<Tensor> gate_bias, up_bias, down_bias;
  // A mixture-of-experts layer: the router [E, H], the routed experts, and Qwen2-MoE's shared expert
  // with its gate [1, H].
  Tensor router;
  std::optional<Tensor> router_bias;  // DeepSeek's e_score_correction_bias
  std::vector<ops::Expert> experts;
  std::optional<ops::Expert> shared;
  std::optional<Tensor> shared_gate;
};

// One forward step: any mix of sequences, each token at its position. Tokens of one sequence must
// come in position order, and every sequence's cache must already hold room for its positions.
struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int64_t> positions;
  std::vector<int32_t> seq;          // index into the sequences passed to forward()
  std::vector<int64_t> logit_rows;   // which tokens' next-token logits are wanted
};

class DecoderModel {
 public:
  // Binds every weight with its expected shape; throws EngineError naming a missing or mis-shaped one.
  DecoderModel(ModelConfig config, DecoderSpec spec, const WeightStore& weights);

  const ModelConfig& config() const { return config_; }
  // Parameters and the bytes their tensors take, and the dtypes they are stored in ("bf16", "f32").
  uint64_t parameter_count() const { return parameters_; }
  uint64_t weight_bytes() const { return weight_bytes_; }
  const std::string& dtypes() const { return dtypes_; }
  // Every bound tensor under its Hugging Face name (the tied LM head once, as the embedding).
  std::vector<std::pair<std::string, const Tensor*>> named_tensors() const;
  // Lets `move` replace the storage of every matrix the linear op reads (the LM head included, the
  // input embedding along with it when tied), or of the routed experts' only; --device numa and
  // --moe_device numa move them into node-bound memory.
  void move_matrices(const std::function<void(Tensor&)>& move, bool experts_only = false);
  // Moves the chosen parts of layer l with `move` (or only looks at them: `move` may leave them be).
  // --device and rebalance put layers on a GPU this way, --moe_device and --cuda_se the experts.
  enum LayerParts : unsigned {
    kAttentionAndDense = 1,  // norms, attention, a dense MLP, their biases
    kRoutedExperts = 2,      // the routed experts with their router
    kSharedExperts = 4,      // shared experts with their gate
  };
  void move_layer(int64_t l, const std::function<void(Tensor&)>& move, unsigned parts);
  // Moves the final norm and the LM head (the input embedding along with it when tied).
  void move_head(const std::function<void(Tensor&)>& move);
  Device head_device() const { return lm_head_.device; }

  // Tensor parallelism (fastllm's multicuda): layer l's attention split by KV heads, and its dense MLP
  // by intermediate rows, over devices in proportion to their shares; o_proj and down_proj take the
  // matching columns, and the shards' partial outputs are summed on the layer's device (the first
  // shard's). The layer's own weights, on the host, keep its norms and any MoE block, and make it whole
  // again. Throws EngineError when the shapes cannot be split so (a shard with no KV head, columns off
  // the dtype's blocks, latent attention).
  struct ShardSpan {
    Device device;
    int64_t kv_head0, kv_heads;  // this shard's KV heads (and their query heads)
    int64_t ffn0, ffn;           // its rows of a dense MLP's intermediate
  };
  std::vector<ShardSpan> split_layer(int64_t l, const std::vector<std::pair<Device, double>>& shares);
  void join_layer(int64_t l);
  bool is_split(int64_t l) const { return !shards_[size_t(l)].empty(); }
  // The shards' own tensors (their slices of o_proj and down_proj are copies), by device, for status.
  std::vector<const Tensor*> shard_tensors() const;

  // Writes the batch's keys and values into the cache and returns float32 logits [logit_rows, vocab].
  // `layer_ctx`, when given, holds one context per layer (layers placed on different thread pools);
  // `ctx` runs everything else.
  // With logits_on_host false they stay where the LM head ran (a GPU's memory, for sampling there).
  Tensor forward(ops::Context& ctx, const Batch& batch, kvcache::KvPool& pool,
                 const std::vector<kvcache::SequenceKv*>& sequences,
                 const std::vector<ops::Context*>* layer_ctx = nullptr, bool logits_on_host = true) const;

 private:
  void bind_experts(const WeightStore& w, const std::string& prefix, LayerWeights& L);
  void moe_mlp(ops::Context& ctx, const LayerWeights& L, const Tensor& h, Tensor& out) const;
  void bind_mla(const WeightStore& w, const std::string& prefix, LayerWeights& L);
  // Grouped-query attention for layer l (q, k, v projections, RoPE, the paged cache), after o_proj.
  void gqa_attention(ops::Context& ctx, const LayerWeights& L, int64_t heads, int64_t kv_heads, const Tensor& h,
                     const Tensor& cos, const Tensor& sin, const ops::KvLayer& kv, int64_t block_tokens,
                     const ops::AttentionBatch& ab, Tensor& out) const;
  // A split layer's attention (or dense MLP, `mlp`): each shard on its device, summed into out.
  void split_sublayer(ops::Context& ctx, int64_t l, bool mlp, const Tensor& h, kvcache::KvPool& pool,
                      const ops::AttentionBatch& ab, const std::function<std::pair<Tensor, Tensor>(Device)>& rope_on,
                      Tensor& out) const;
  void dense_mlp(ops::Context& ctx, const LayerWeights& L, const Tensor& h, Tensor& out) const;
  struct Shard {
    LayerWeights w;
    ShardSpan span;
  };
  std::vector<std::vector<Shard>> shards_;  // per layer; empty unless split over devices
  // MLA for layer l: writes the batch's compressed rows into the cache and the attention output
  // (after o_proj) into out.
  void mla_attention(ops::Context& ctx, int64_t l, const LayerWeights& L, const Tensor& h, const Tensor& cos,
                     const Tensor& sin, kvcache::KvPool& pool, const ops::AttentionBatch& ab, Tensor& out) const;
  ModelConfig config_;
  DecoderSpec spec_;
  Tensor embed_, final_norm_, lm_head_;
  std::vector<LayerWeights> layers_;
  std::vector<float> inv_freq_;
  uint64_t parameters_ = 0, weight_bytes_ = 0;
  std::string dtypes_;
};

}  // namespace ftllm::model
