// The decoder-only transformer every architecture in architecture.h shares: embeddings, N layers
// (each as its architecture builds it from the shared blocks: RMSNorm, attention with RoPE and GQA over
// the paged cache, a SwiGLU MLP or mixture of SwiGLU experts), final norm, LM head; placement of layers
// and experts on devices, and tensor-parallel splits.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "../kvcache/kv_cache.h"
#include "../ops/moe.h"
#include "../ops/ops.h"
#include "architecture.h"
#include "layer.h"
#include "lora.h"
#include "model_config.h"
#include "weights.h"

namespace ftllm::model {

class DecoderModel;

// One layer of one forward step, as an architecture's run_layer and attention see it.
class LayerStep {
 public:
  // `rope_on` gives the step's cos/sin tables of one RoPE (LayerWeights::rope_table) on a device.
  using RopeTables = std::function<std::pair<Tensor, Tensor>(Device, int)>;
  LayerStep(const DecoderModel& model, ops::Context& ctx, int64_t layer, const LayerWeights& w, const LayerWeights& local,
            kvcache::KvPool& pool, const ops::AttentionBatch& ab, const RopeTables& rope_on, const Tensor& cos,
            const Tensor& sin, Tensor& h, Tensor& proj)
      : ctx(ctx), config(model_config(model)), layer(layer), w(w), local(local), pool(pool), ab(ab), cos(cos), sin(sin), h(h),
        proj(proj), model_(model), rope_on_(rope_on) {}
  ops::Context& ctx;
  const ModelConfig& config;
  const int64_t layer;
  const LayerWeights& w;      // the layer's weights (a split layer's stay on the host)
  const LayerWeights& local;  // the norms on the layer's device: w's, or a split layer's first shard's
  kvcache::KvPool& pool;
  const ops::AttentionBatch& ab;
  const Tensor &cos, &sin;  // RoPE tables for the batch's positions, on ctx's device
  Tensor &h, &proj;         // [T, hidden] scratch on ctx's device
  LayerLora lora;           // the adapters of the step's rows, for this layer

  void rmsnorm(const Tensor& x, const Tensor& weight, Tensor& out) {
    ops::rmsnorm(ctx, x, weight, float(config.rms_norm_eps), out, config.norm_weight_offset);
  }
  // The layer's attention: the architecture's, or a split layer's shards'.
  void attention(const Tensor& h, Tensor& out);
  // The layer's MLP: its experts, a split layer's shards' or the dense one.
  void mlp(const Tensor& h, Tensor& out);
  // Grouped-query attention with RoPE over the paged cache (the default attention block).
  void gqa_attention(const Tensor& h, Tensor& out);

 private:
  static const ModelConfig& model_config(const DecoderModel& m);
  const DecoderModel& model_;
  const RopeTables& rope_on_;
};

// One forward step: any mix of sequences, each token at its position. Tokens of one sequence must
// come in position order, and every sequence's cache must already hold room for its positions.
struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int64_t> positions;
  std::vector<int32_t> seq;          // index into the sequences passed to forward()
  std::vector<int64_t> logit_rows;   // which tokens' next-token logits are wanted
  std::vector<int64_t> hidden_rows;  // which tokens' final-norm rows are wanted (embeddings)
  std::vector<const LoraAdapter*> adapters;  // per sequence: the LoRA adapter its rows use, or null (the base)
};

class DecoderModel {
 public:
  // Binds every weight with its expected shape; throws EngineError naming a missing or mis-shaped one.
  DecoderModel(ModelConfig config, const Architecture& architecture, const WeightStore& weights);

  const ModelConfig& config() const { return config_; }
  const Architecture& architecture() const { return arch_; }
  const LayerWeights& layer(int64_t l) const { return layers_[size_t(l)]; }
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
  // Moves the chosen parts (LayerParts) of layer l with `move` (or only looks at them: `move` may leave
  // them be). --device and rebalance put layers on a GPU this way, --moe_device and --cuda_se the experts.
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
  // `hidden`, when given, receives batch.hidden_rows' rows after the final norm, float32 [rows, hidden] on the host.
  Tensor forward(ops::Context& ctx, const Batch& batch, kvcache::KvPool& pool,
                 const std::vector<kvcache::SequenceKv*>& sequences,
                 const std::vector<ops::Context*>* layer_ctx = nullptr, bool logits_on_host = true,
                 Tensor* hidden = nullptr) const;

 private:
  friend class LayerStep;
  void moe_mlp(ops::Context& ctx, const LayerWeights& L, const Tensor& h, Tensor& out) const;
  // Grouped-query attention with heads and kv_heads of the layer (a shard's share when split), after o_proj.
  void gqa_attention(ops::Context& ctx, const LayerWeights& L, int64_t heads, int64_t kv_heads, const Tensor& h,
                     const Tensor& cos, const Tensor& sin, const ops::KvLayer& kv, int64_t block_tokens,
                     const ops::AttentionBatch& ab, Tensor& out, const LayerLora& lora = {}) const;
  // A split layer's attention (or dense MLP, `mlp`): each shard on its device, summed into out.
  void split_sublayer(ops::Context& ctx, int64_t l, bool mlp, const Tensor& h, kvcache::KvPool& pool,
                      const ops::AttentionBatch& ab, const LayerStep::RopeTables& rope_on,
                      Tensor& out) const;
  void dense_mlp(ops::Context& ctx, const LayerWeights& L, const Tensor& h, Tensor& out, const LayerLora& lora = {}) const;
  struct Shard {
    LayerWeights w;
    ShardSpan span;
  };
  std::vector<std::vector<Shard>> shards_;  // per layer; empty unless split over devices
  ModelConfig config_;
  const Architecture& arch_;
  Tensor embed_, final_norm_, lm_head_;
  std::vector<LayerWeights> layers_;
  std::vector<std::vector<float>> inv_freq_;  // config.rope's, then config.sliding_rope's when set
  std::vector<float> long_inv_freq_;          // longrope's long factors' (config.rope)
  uint64_t parameters_ = 0, weight_bytes_ = 0;
  std::string dtypes_;
};

}  // namespace ftllm::model
