// DeepSeek V2 and V3: multi-head latent attention (a compressed KV row per token, absorbed into the
// query and the output per head), the first first_k_dense_replace layers dense, then mixture-of-experts
// layers with shared experts. V3 routes by sigmoid scores plus e_score_correction_bias over expert groups;
// V2 by softmax scores, greedy or group_limited_greedy; both scale the chosen weights by
// routed_scaling_factor.
#include <algorithm>
#include <cmath>

#include "../core/json_writer.h"
#include "../ops/ops.h"
#include "../quant/quant.h"
#include "architecture.h"
#include "decoder.h"
#include "gguf.h"
#include "rope.h"

namespace ftllm::model {

namespace {

// Newer deepseek2 GGUFs split kv_b_proj per head: k_b [heads, kv_lora_rank, nope] (transposed) and v_b
// [heads, v, kv_lora_rank].
const char* const kKB = "self_attn.k_b_proj";
const char* const kVB = "self_attn.v_b_proj";

class DeepSeek final : public Architecture {
 public:
  DeepSeek(const char* name, bool v3) : Architecture(name), v3_(v3) {}

  void read_config(const ConfigReader& r, ModelConfig& c) const override {
    read_experts(r, c, hf_name());
    read_expert_groups(r, c, v3_ ? "sigmoid" : "softmax");

    MlaConfig& a = c.mla;
    a.kv_lora_rank = r.required_int("kv_lora_rank");
    a.q_lora_rank = r.int_or("q_lora_rank", 0);  // null (no q compression) reads as absent
    a.nope_dim = r.required_int("qk_nope_head_dim");
    a.rope_dim = r.required_int("qk_rope_head_dim");
    a.v_dim = r.required_int("v_head_dim");
    a.rope_interleave = r.bool_or("rope_interleave", true);
    if (a.rope_dim % 2 != 0) throw r.error("qk_rope_head_dim", "must be even");
    c.head_dim = a.rope_dim;  // what RoPE rotates
  }

  void write_config(const ModelConfig& c, const ConfigField& field) const override {
    const MlaConfig& a = c.mla;
    field("kv_lora_rank", std::to_string(a.kv_lora_rank));
    field("q_lora_rank", a.q_lora_rank ? std::to_string(a.q_lora_rank) : "null");
    field("qk_nope_head_dim", std::to_string(a.nope_dim));
    field("qk_rope_head_dim", std::to_string(a.rope_dim));
    field("v_head_dim", std::to_string(a.v_dim));
    field("rope_interleave", a.rope_interleave ? "true" : "false");
  }

  // llama.cpp's deepseek2 (DeepSeek V2, V3, R1, Kimi-K2): the latent dimensions under attention.* (its
  // key/value lengths are the MQA view, the _mla ones the heads'; older files have only the heads'), the
  // routing from the MoE keys (V2 softmax, V3 sigmoid), YaRN's mscale as its log multiplier (times 0.1).
  void read_gguf(const GgufFile& g, const std::string& arch, ModelConfig& c) const override {
    const std::string p = arch + ".";
    MlaConfig& a = c.mla;
    a.kv_lora_rank = g.get_int(p + "attention.kv_lora_rank").value_or(0);
    a.q_lora_rank = g.get_int(p + "attention.q_lora_rank").value_or(0);
    a.rope_dim = g.get_int(p + "rope.dimension_count").value_or(0);
    const int64_t k_head = g.get_int(p + "attention.key_length_mla").value_or(g.get_int(p + "attention.key_length").value_or(0));
    a.v_dim = g.get_int(p + "attention.value_length_mla").value_or(g.get_int(p + "attention.value_length").value_or(0));
    a.nope_dim = k_head - a.rope_dim;
    if (a.kv_lora_rank <= 0 || a.rope_dim <= 0 || a.rope_dim % 2 || a.nope_dim <= 0 || a.v_dim <= 0)
      throw EngineError(g.path() + ": " + p + "attention.kv_lora_rank, rope.dimension_count and the key/value lengths do not "
                        "describe latent attention");
    a.rope_interleave = true;  // llama.cpp rotates DeepSeek's pairs (x0, x1), (x2, x3) as the weights lay them out
    c.head_dim = a.rope_dim;
    c.num_kv_heads = c.num_heads;  // the converter's MQA view; the heads are the query's
    c.architecture = c.moe.sigmoid_grouped ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM";
    if (c.rope.type == RopeType::Yarn)  // the common keys are read; the converter stores 0.1 * mscale_all_dim
      c.rope.mscale = c.rope.mscale_all_dim = g.get_float(p + "rope.scaling.yarn_log_multiplier").value_or(0.0) / 0.1;
  }
  std::vector<std::pair<std::string, std::string>> gguf_layer_names() const override {
    return {{"attn_q_a.weight", "self_attn.q_a_proj.weight"},          {"attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight"},
            {"attn_q_b.weight", "self_attn.q_b_proj.weight"},          {"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight"},
            {"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight"}, {"attn_kv_b.weight", "self_attn.kv_b_proj.weight"},
            {"attn_k_b.weight", kKB},                                   {"attn_v_b.weight", kVB}};
  }

  void check(const ModelConfig& c) const override {
    const std::string name = hf_name();
    if (c.mla.kv_lora_rank == 0) throw EngineError(name + " needs kv_lora_rank in config.json");
    if (c.moe.num_experts == 0) throw EngineError(name + " needs n_routed_experts in config.json");
    if (c.rope.type != RopeType::Default && c.rope.type != RopeType::Yarn)
      throw EngineError(name + " with rope scaling other than yarn is not supported");
    if (c.attention_bias) throw EngineError(name + " with attention_bias=true is not supported");
  }

  void bind_layer(const LayerBinder& b, LayerWeights& L) const override {
    bind_norms(b, L);
    bind_latent_attention(b, L);
    if (!b.config.moe.is_moe_layer(b.layer)) return bind_dense_mlp(b, L);
    bind_experts(b, L, "mlp.shared_experts.");
  }

  void attention(LayerStep& s, const Tensor& h, Tensor& out) const override;
  bool standard_attention(const ModelConfig&, int64_t) const override { return false; }  // latent attention

 private:
  static void bind_latent_attention(const LayerBinder& b, LayerWeights& L);
  bool v3_;
};

// q_a (-> q_a_norm -> q_b) when q is compressed, else q_proj; kv_a gives the compressed row (kv_a_norm
// over its first kv_lora_rank values); kv_b as float32 [heads * (nope + v), kv_lora_rank], read by rows:
// a head's nope rows absorb its query, its v rows expand its output.
void DeepSeek::bind_latent_attention(const LayerBinder& b, LayerWeights& L) {
  const ModelConfig& c = b.config;
  const MlaConfig& a = c.mla;
  const int64_t H = c.hidden_size, heads = c.num_heads, qk = a.nope_dim + a.rope_dim;
  auto own = [&](const char* name, Tensor t, bool matrix) { L.own.push_back({name, std::move(t), kAttentionAndDense, matrix}); };
  if (a.q_lora_rank) {
    own("self_attn.q_a_proj.weight", b.matrix("self_attn.q_a_proj.weight", {a.q_lora_rank, H}), true);
    own("self_attn.q_a_layernorm.weight", b.vector("self_attn.q_a_layernorm.weight", a.q_lora_rank), false);
    own("self_attn.q_b_proj.weight", b.matrix("self_attn.q_b_proj.weight", {heads * qk, a.q_lora_rank}), true);
  } else {
    L.q = b.matrix("self_attn.q_proj.weight", {heads * qk, H});
  }
  own("self_attn.kv_a_proj_with_mqa.weight", b.matrix("self_attn.kv_a_proj_with_mqa.weight", {a.kv_lora_rank + a.rope_dim, H}), true);
  own("self_attn.kv_a_layernorm.weight", b.vector("self_attn.kv_a_layernorm.weight", a.kv_lora_rank), false);
  // Read a row at a time by the absorbed attention, so kept as float32 whatever it is stored in.
  const int64_t per_head = a.nope_dim + a.v_dim, lora = a.kv_lora_rank;
  Tensor kv_b = Tensor::zeros_f32({heads * per_head, lora});
  auto widen = [](const Tensor& t, int64_t cols) {  // a stored matrix of `cols`-value rows as float32
    Tensor out = Tensor::zeros_f32({t.numel() / cols, cols});
    const size_t row = row_bytes(t.dtype, cols);
    for (int64_t r = 0; r < out.dim(0); ++r)
      quant::dequantize_row(t.dtype, static_cast<const char*>(t.data) + size_t(r) * row, out.as<float>() + r * cols, cols);
    return out;
  };
  if (b.store.has(b.prefix + kKB)) {  // a GGUF's split halves: head h's rows are k_b[h] transposed, then v_b[h]
    const Tensor k = widen(b.store.matrix_rows(b.prefix + kKB, {heads, lora, a.nope_dim}, 0, heads * lora, b.prefix + kKB), a.nope_dim);
    const Tensor v = widen(b.store.matrix_rows(b.prefix + kVB, {heads, a.v_dim, lora}, 0, heads * a.v_dim, b.prefix + kVB), lora);
    float* out = kv_b.as<float>();
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < a.nope_dim; ++i)
        for (int64_t j = 0; j < lora; ++j) out[(h * per_head + i) * lora + j] = k.as<float>()[(h * lora + j) * a.nope_dim + i];
      std::copy_n(v.as<float>() + h * a.v_dim * lora, a.v_dim * lora, out + (h * per_head + a.nope_dim) * lora);
    }
  } else {
    kv_b = widen(b.matrix("self_attn.kv_b_proj.weight", {heads * per_head, lora}), lora);
  }
  own("self_attn.kv_b_proj.weight", std::move(kv_b), false);
  L.o = b.matrix("self_attn.o_proj.weight", {H, heads * a.v_dim});
}

// Absorbed MLA: head h's score against a cached row [c (kv_lora_rank), k_rot] is
// (W_uk[h]^T q_nope) . c + q_rot . k_rot, and its output W_uv[h] (sum of p * c), where W_uk[h] and W_uv[h]
// are head h's nope and v rows of kv_b_proj. The cache holds c and k_rot only; nothing is expanded per
// cached token, for prefill or decode.
void DeepSeek::attention(LayerStep& s, const Tensor& h, Tensor& out) const {
  ops::Context& ctx = s.ctx;
  const LayerWeights& L = s.w;
  const ModelConfig& c = s.config;
  const MlaConfig& a = c.mla;
  const int64_t T = h.dim(0), heads = c.num_heads, nope = a.nope_dim, rope = a.rope_dim, lora = a.kv_lora_rank;
  const int64_t qk = nope + rope, row = lora + rope, B = s.pool.block_tokens(), kvb_rows = nope + a.v_dim;
  const float eps = float(c.rms_norm_eps);
  const Tensor& kv_b = L.own_tensor("self_attn.kv_b_proj.weight");

  Tensor q = ops::zeros(ctx, {T, heads * qk});
  if (a.q_lora_rank) {
    Tensor qa = ops::zeros(ctx, {T, a.q_lora_rank});
    ops::linear(ctx, h, L.own_tensor("self_attn.q_a_proj.weight"), nullptr, qa);
    ops::rmsnorm(ctx, qa, L.own_tensor("self_attn.q_a_layernorm.weight"), eps, qa);
    ops::linear(ctx, qa, L.own_tensor("self_attn.q_b_proj.weight"), nullptr, q);
  } else {
    ops::linear(ctx, h, L.q, nullptr, q);
  }
  // The cached row: [c (kv_lora_rank, normalised), k_rot (rotated)].
  Tensor latent = ops::zeros(ctx, {T, row});
  ops::linear(ctx, h, L.own_tensor("self_attn.kv_a_proj_with_mqa.weight"), nullptr, latent);
  ops::rmsnorm_prefix(ctx, latent, L.own_tensor("self_attn.kv_a_layernorm.weight"), eps);
  ops::rope_blocks(ctx, latent, {1, row, lora}, s.cos, s.sin, a.rope_interleave);
  const Device on = s.pool.layer_storage(s.layer).device;
  // The value is the first kv_lora_rank floats of the same row.
  const ops::KvLayer kv{s.pool.key(s.layer, 0, 0), s.pool.key(s.layer, 0, 0), s.pool.block_bytes(), s.pool.row_bytes(),
                        s.pool.dtype(), on};
  ops::store_kv(ctx, s.ab, latent, nullptr, kv, B, row);

  // Each head's query as a row against the cache: [W_uk[h]^T q_nope, q_rot].
  ops::rope_blocks(ctx, q, {heads, qk, nope}, s.cos, s.sin, a.rope_interleave);
  Tensor query = ops::zeros(ctx, {T, heads * row});
  ops::head_matmul(ctx, q, {heads, qk, 0}, kv_b, {nope, lora, kvb_rows, 0, true}, query, {heads, row, 0});
  ops::copy_blocks(ctx, q, {heads, qk, nope}, query, {heads, row, lora}, rope);

  ops::AttentionShape shape{heads, 1, row, B, 0, 1.0f / std::sqrt(float(qk)) * yarn_softmax_scale(c.rope), lora};
  Tensor mixed = ops::zeros(ctx, {T, heads * lora});
  ops::paged_attention(ctx, query, s.ab, kv, shape, mixed);

  // Each head's output through its v rows of kv_b_proj, then o_proj.
  Tensor attn = ops::zeros(ctx, {T, heads * a.v_dim});
  ops::head_matmul(ctx, mixed, {heads, lora, 0}, kv_b, {lora, a.v_dim, kvb_rows, nope, false}, attn, {heads, a.v_dim, 0});
  ops::linear(ctx, attn, L.o, nullptr, out);
}

}  // namespace

const Architecture& deepseek_v2() {
  static const DeepSeek a("DeepseekV2ForCausalLM", false);
  return a;
}

const Architecture& deepseek_v3() {
  static const DeepSeek a("DeepseekV3ForCausalLM", true);
  return a;
}

}  // namespace ftllm::model
