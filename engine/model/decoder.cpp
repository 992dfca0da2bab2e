#include "decoder.h"

#include <cmath>
#include <cstring>
#include <map>

#include "../core/error.h"
#include "../quant/quant.h"
#include "../cpu/thread_pool.h"
#include "rope.h"

namespace ftllm::model {

namespace {

std::optional<Tensor> maybe_vector(const WeightStore& w, bool wanted, const std::string& name, int64_t n) {
  if (!wanted) return std::nullopt;
  return w.vector_f32(name, n);
}

}  // namespace

// Hugging Face checkpoints hold one tensor per expert matrix (mlp.experts.N.gate_proj.weight, ...);
// transformers 5 saves them fused (mlp.experts.gate_up_proj [E, 2I, H], gate rows first, and
// mlp.experts.down_proj [E, H, I]). Both bind as views; --moe_dtype sees the per-expert names.
void DecoderModel::bind_experts(const WeightStore& w, const std::string& p, LayerWeights& L) {
  const MoeConfig& m = config_.moe;
  const int64_t H = config_.hidden_size, E = m.num_experts, I = m.expert_intermediate;
  L.router = w.matrix(p + "gate.weight", {E, H});
  if (m.sigmoid_grouped) L.router_bias = w.vector_f32(p + "gate.e_score_correction_bias", E);
  const bool fused = w.has(p + "experts.gate_up_proj");
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = p + "experts." + std::to_string(e) + ".";
    ops::Expert ex;
    if (fused) {
      ex.gate = w.matrix_rows(p + "experts.gate_up_proj", {E, 2 * I, H}, e * 2 * I, I, x + "gate_proj.weight");
      ex.up = w.matrix_rows(p + "experts.gate_up_proj", {E, 2 * I, H}, e * 2 * I + I, I, x + "up_proj.weight");
      ex.down = w.matrix_rows(p + "experts.down_proj", {E, H, I}, e * H, H, x + "down_proj.weight");
    } else {
      ex.gate = w.matrix(x + "gate_proj.weight", {I, H});
      ex.up = w.matrix(x + "up_proj.weight", {I, H});
      ex.down = w.matrix(x + "down_proj.weight", {H, I});
    }
    L.experts.push_back(std::move(ex));
  }
  if (spec_.shared_expert) {
    const int64_t S = m.shared_intermediate;
    L.shared = ops::Expert{w.matrix(p + "shared_expert.gate_proj.weight", {S, H}), w.matrix(p + "shared_expert.up_proj.weight", {S, H}),
                           w.matrix(p + "shared_expert.down_proj.weight", {H, S})};
    L.shared_gate = w.matrix(p + "shared_expert_gate.weight", {1, H});
  }
  if (spec_.shared_experts) {
    const int64_t S = m.shared_intermediate;
    L.shared = ops::Expert{w.matrix(p + "shared_experts.gate_proj.weight", {S, H}), w.matrix(p + "shared_experts.up_proj.weight", {S, H}),
                           w.matrix(p + "shared_experts.down_proj.weight", {H, S})};
  }
}

void DecoderModel::bind_mla(const WeightStore& w, const std::string& p, LayerWeights& L) {
  const MlaConfig& a = config_.mla;
  const int64_t H = config_.hidden_size, heads = config_.num_heads, qk = a.nope_dim + a.rope_dim;
  if (a.q_lora_rank) {
    L.q_a = w.matrix(p + "q_a_proj.weight", {a.q_lora_rank, H});
    L.q_a_norm = w.vector_f32(p + "q_a_layernorm.weight", a.q_lora_rank);
    L.q_b = w.matrix(p + "q_b_proj.weight", {heads * qk, a.q_lora_rank});
  } else {
    L.q = w.matrix(p + "q_proj.weight", {heads * qk, H});
  }
  L.kv_a = w.matrix(p + "kv_a_proj_with_mqa.weight", {a.kv_lora_rank + a.rope_dim, H});
  L.kv_a_norm = w.vector_f32(p + "kv_a_layernorm.weight", a.kv_lora_rank);
  // Read a row at a time by the absorbed attention, so kept as float32 whatever it is stored in.
  const Tensor kv_b = w.matrix(p + "kv_b_proj.weight", {heads * (a.nope_dim + a.v_dim), a.kv_lora_rank});
  L.kv_b = Tensor::zeros_f32(kv_b.shape);
  const size_t row = row_bytes(kv_b.dtype, a.kv_lora_rank);
  for (int64_t r = 0; r < kv_b.dim(0); ++r)
    quant::dequantize_row(kv_b.dtype, static_cast<const char*>(kv_b.data) + size_t(r) * row,
                          L.kv_b.as<float>() + r * a.kv_lora_rank, a.kv_lora_rank);
  L.o = w.matrix(p + "o_proj.weight", {H, heads * a.v_dim});
}

DecoderModel::DecoderModel(ModelConfig config, DecoderSpec spec, const WeightStore& w)
    : config_(std::move(config)), spec_(spec) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size, I = c.intermediate_size, d = c.head_dim;
  const int64_t q_dim = c.num_heads * d, kv_dim = c.num_kv_heads * d;

  // A tied table is also the LM head, the largest matmul of a step: --dtype converts it as such.
  embed_ = w.matrix("model.embed_tokens.weight", {c.vocab_size, H}, c.tie_word_embeddings ? "lm_head.weight" : "");
  final_norm_ = w.vector_f32("model.norm.weight", H);
  lm_head_ = c.tie_word_embeddings ? embed_ : w.matrix("lm_head.weight", {c.vocab_size, H});

  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights L;
    L.attn_norm = w.vector_f32(p + "input_layernorm.weight", H);
    if (spec.mla) {
      bind_mla(w, p + "self_attn.", L);
    } else {
      L.q = w.matrix(p + "self_attn.q_proj.weight", {q_dim, H});
      L.k = w.matrix(p + "self_attn.k_proj.weight", {kv_dim, H});
      L.v = w.matrix(p + "self_attn.v_proj.weight", {kv_dim, H});
      L.o = w.matrix(p + "self_attn.o_proj.weight", {H, q_dim});
    }
    L.q_bias = maybe_vector(w, spec.qkv_bias, p + "self_attn.q_proj.bias", q_dim);
    L.k_bias = maybe_vector(w, spec.qkv_bias, p + "self_attn.k_proj.bias", kv_dim);
    L.v_bias = maybe_vector(w, spec.qkv_bias, p + "self_attn.v_proj.bias", kv_dim);
    L.o_bias = maybe_vector(w, spec.o_bias, p + "self_attn.o_proj.bias", H);
    L.q_norm = maybe_vector(w, spec.qk_norm, p + "self_attn.q_norm.weight", d);
    L.k_norm = maybe_vector(w, spec.qk_norm, p + "self_attn.k_norm.weight", d);
    L.mlp_norm = w.vector_f32(p + "post_attention_layernorm.weight", H);
    if (spec.moe && c.moe.is_moe_layer(i)) {
      bind_experts(w, p + "mlp.", L);
    } else {
      L.gate = w.matrix(p + "mlp.gate_proj.weight", {I, H});
      L.up = w.matrix(p + "mlp.up_proj.weight", {I, H});
      L.down = w.matrix(p + "mlp.down_proj.weight", {H, I});
      L.gate_bias = maybe_vector(w, spec.mlp_bias, p + "mlp.gate_proj.bias", I);
      L.up_bias = maybe_vector(w, spec.mlp_bias, p + "mlp.up_proj.bias", I);
      L.down_bias = maybe_vector(w, spec.mlp_bias, p + "mlp.down_proj.bias", H);
    }
    layers_.push_back(std::move(L));
  }
  inv_freq_ = rope_inv_freq(c.rope, d);
  shards_.resize(layers_.size());

  // What the bound weights amount to (the tied LM head counted once).
  std::map<std::string, uint64_t> by_dtype;
  auto count = [&](const Tensor& t) {
    parameters_ += uint64_t(t.numel());
    weight_bytes_ += t.bytes();
    by_dtype[std::string(dtype_name(t.dtype))] += uint64_t(t.numel());
  };
  auto count_opt = [&](const std::optional<Tensor>& t) {
    if (t) count(*t);
  };
  count(embed_);
  count(final_norm_);
  if (!c.tie_word_embeddings) count(lm_head_);
  for (const LayerWeights& L : layers_) {
    for (const Tensor* t : {&L.attn_norm, &L.q, &L.k, &L.v, &L.o, &L.mlp_norm, &L.q_a, &L.q_a_norm, &L.q_b, &L.kv_a,
                            &L.kv_a_norm, &L.kv_b, &L.gate, &L.up, &L.down, &L.router})
      if (!t->empty()) count(*t);
    if (L.router_bias) count(*L.router_bias);
    for (const ops::Expert& e : L.experts)
      for (const Tensor* t : {&e.gate, &e.up, &e.down}) count(*t);
    if (L.shared)
      for (const Tensor* t : {&L.shared->gate, &L.shared->up, &L.shared->down}) count(*t);
    if (L.shared_gate) count(*L.shared_gate);
    for (const std::optional<Tensor>* t : {&L.q_bias, &L.k_bias, &L.v_bias, &L.o_bias, &L.q_norm, &L.k_norm, &L.gate_bias,
                                           &L.up_bias, &L.down_bias})
      count_opt(*t);
  }
  for (auto& [name, n] : by_dtype) dtypes_ += (dtypes_.empty() ? "" : ", ") + name;
}

std::vector<std::pair<std::string, const Tensor*>> DecoderModel::named_tensors() const {
  std::vector<std::pair<std::string, const Tensor*>> out{{"model.embed_tokens.weight", &embed_},
                                                         {"model.norm.weight", &final_norm_}};
  if (!config_.tie_word_embeddings) out.emplace_back("lm_head.weight", &lm_head_);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerWeights& L = layers_[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (auto [name, t] : std::initializer_list<std::pair<const char*, const Tensor*>>{
             {"input_layernorm.weight", &L.attn_norm}, {"self_attn.q_proj.weight", &L.q}, {"self_attn.k_proj.weight", &L.k},
             {"self_attn.v_proj.weight", &L.v}, {"self_attn.o_proj.weight", &L.o},
             {"post_attention_layernorm.weight", &L.mlp_norm}, {"mlp.gate_proj.weight", &L.gate},
             {"mlp.up_proj.weight", &L.up}, {"mlp.down_proj.weight", &L.down},
             {"self_attn.q_a_proj.weight", &L.q_a}, {"self_attn.q_a_layernorm.weight", &L.q_a_norm},
             {"self_attn.q_b_proj.weight", &L.q_b}, {"self_attn.kv_a_proj_with_mqa.weight", &L.kv_a},
             {"self_attn.kv_a_layernorm.weight", &L.kv_a_norm}, {"self_attn.kv_b_proj.weight", &L.kv_b}})
      if (!t->empty()) out.emplace_back(p + name, t);
    for (auto [name, t] : std::initializer_list<std::pair<const char*, const std::optional<Tensor>*>>{
             {"self_attn.q_proj.bias", &L.q_bias}, {"self_attn.k_proj.bias", &L.k_bias}, {"self_attn.v_proj.bias", &L.v_bias},
             {"self_attn.o_proj.bias", &L.o_bias}, {"self_attn.q_norm.weight", &L.q_norm},
             {"self_attn.k_norm.weight", &L.k_norm}, {"mlp.gate_proj.bias", &L.gate_bias}, {"mlp.up_proj.bias", &L.up_bias},
             {"mlp.down_proj.bias", &L.down_bias}})
      if (*t) out.emplace_back(p + name, &**t);
    if (L.experts.empty()) continue;
    out.emplace_back(p + "mlp.gate.weight", &L.router);
    if (L.router_bias) out.emplace_back(p + "mlp.gate.e_score_correction_bias", &*L.router_bias);
    for (size_t e = 0; e < L.experts.size(); ++e) {
      const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
      out.emplace_back(x + "gate_proj.weight", &L.experts[e].gate);
      out.emplace_back(x + "up_proj.weight", &L.experts[e].up);
      out.emplace_back(x + "down_proj.weight", &L.experts[e].down);
    }
    if (L.shared) {
      const std::string s = p + (spec_.shared_experts ? "mlp.shared_experts." : "mlp.shared_expert.");
      out.emplace_back(s + "gate_proj.weight", &L.shared->gate);
      out.emplace_back(s + "up_proj.weight", &L.shared->up);
      out.emplace_back(s + "down_proj.weight", &L.shared->down);
    }
    if (L.shared_gate) out.emplace_back(p + "mlp.shared_expert_gate.weight", &*L.shared_gate);
  }
  return out;
}

void DecoderModel::move_matrices(const std::function<void(Tensor&)>& move, bool experts_only) {
  if (!experts_only) {
    move(lm_head_);
    if (config_.tie_word_embeddings) embed_ = lm_head_;  // one copy serves both
  }
  for (LayerWeights& L : layers_) {
    for (ops::Expert& e : L.experts)
      for (Tensor* t : {&e.gate, &e.up, &e.down}) move(*t);
    if (experts_only) continue;
    for (Tensor* t : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down, &L.router, &L.q_a, &L.q_b, &L.kv_a})
      if (!t->empty()) move(*t);
    if (L.shared)
      for (Tensor* t : {&L.shared->gate, &L.shared->up, &L.shared->down}) move(*t);
  }
}

void DecoderModel::move_layer(int64_t l, const std::function<void(Tensor&)>& move, unsigned parts) {
  LayerWeights& L = layers_[size_t(l)];
  if (parts & kAttentionAndDense) {
    for (Tensor* t : {&L.attn_norm, &L.q, &L.k, &L.v, &L.o, &L.mlp_norm, &L.gate, &L.up, &L.down, &L.q_a, &L.q_a_norm,
                      &L.q_b, &L.kv_a, &L.kv_a_norm, &L.kv_b})
      if (!t->empty()) move(*t);
    for (std::optional<Tensor>* t : {&L.q_bias, &L.k_bias, &L.v_bias, &L.o_bias, &L.q_norm, &L.k_norm, &L.gate_bias,
                                     &L.up_bias, &L.down_bias})
      if (*t) move(**t);
  }
  if ((parts & kRoutedExperts) && !L.experts.empty()) {
    move(L.router);  // routing reads its logits on the host; the router runs beside the experts
    for (ops::Expert& e : L.experts)
      for (Tensor* t : {&e.gate, &e.up, &e.down}) move(*t);
  }
  if ((parts & kSharedExperts) && L.shared) {
    for (Tensor* t : {&L.shared->gate, &L.shared->up, &L.shared->down}) move(*t);
    if (L.shared_gate) move(*L.shared_gate);
  }
}

void DecoderModel::move_head(const std::function<void(Tensor&)>& move) {
  move(final_norm_);
  move(lm_head_);
  if (config_.tie_word_embeddings) embed_ = lm_head_;  // one copy serves both
}

void DecoderModel::moe_mlp(ops::Context& ctx, const LayerWeights& L, const Tensor& h_in, Tensor& out) const {
  // The experts run where their weights are (--moe_device): a layer on a GPU with its experts in host
  // memory sends the normalised rows to the host and takes the sum back, once per layer.
  const Device experts_on = L.experts.front().gate.device;
  ops::Context host{ctx.pool, ctx.kernels, experts_on};
  const Tensor h = ops::to_device(h_in, experts_on);
  const int64_t T = h.dim(0), H = h.dim(1);
  Tensor logits = ops::zeros(host, {T, int64_t(L.experts.size())});
  ops::linear(host, h, L.router, nullptr, logits);
  logits = ops::to_device(logits, Device::cpu());  // routing is host code over [T, E]
  const MoeConfig& m = config_.moe;
  const ops::Routes routes =
      m.sigmoid_grouped ? ops::route_sigmoid_grouped(logits, *L.router_bias, m.experts_per_token, m.n_group, m.topk_group,
                                                     m.norm_topk_prob, float(m.routed_scaling_factor))
                        : ops::route_softmax_topk(logits, m.experts_per_token, m.norm_topk_prob, m.n_group, m.topk_group,
                                                  float(m.routed_scaling_factor));
  Tensor routed = ops::zeros(host, {T, H});
  ops::moe_experts(host, h, routes, L.experts, routed);
  if (L.shared) {
    // Shared experts run where their weights are too (--cuda_se keeps them on the layer's GPU).
    const Device shared_on = L.shared->gate.device;
    ops::Context sc{ctx.pool, ctx.kernels, shared_on};
    const Tensor hs = ops::to_device(h_in, shared_on);
    Tensor shared = ops::zeros(sc, {T, H});
    ops::expert_mlp(sc, hs, *L.shared, shared);
    if (L.shared_gate) {
      // Qwen2-MoE: every token also goes through the shared expert, scaled by sigmoid(shared_expert_gate · h).
      Tensor gate = ops::zeros(sc, {T, 1});
      ops::linear(sc, hs, *L.shared_gate, nullptr, gate);
      ops::scale_rows(sc, shared, gate, true);
    }
    shared = ops::to_device(shared, experts_on);
    ops::add(host, routed, shared);
  }
  out = ops::to_device(routed, ctx.device);
}

// Absorbed MLA: head h's score against a cached row [c (kv_lora_rank), k_rot] is
// (W_uk[h]^T q_nope) . c + q_rot . k_rot, and its output W_uv[h] (sum of p * c), where W_uk[h] and W_uv[h]
// are head h's nope and v rows of kv_b_proj. The cache holds c and k_rot only; nothing is expanded per
// cached token, for prefill or decode.
void DecoderModel::mla_attention(ops::Context& ctx, int64_t l, const LayerWeights& L, const Tensor& h, const Tensor& cos,
                                 const Tensor& sin, kvcache::KvPool& pool, const ops::AttentionBatch& ab, Tensor& out) const {
  const ModelConfig& c = config_;
  const MlaConfig& a = c.mla;
  const int64_t T = h.dim(0), heads = c.num_heads, nope = a.nope_dim, rope = a.rope_dim, lora = a.kv_lora_rank;
  const int64_t qk = nope + rope, row = lora + rope, B = pool.block_tokens(), kvb_rows = nope + a.v_dim;
  const float eps = float(c.rms_norm_eps);

  Tensor q = ops::zeros(ctx, {T, heads * qk});
  if (a.q_lora_rank) {
    Tensor qa = ops::zeros(ctx, {T, a.q_lora_rank});
    ops::linear(ctx, h, L.q_a, nullptr, qa);
    ops::rmsnorm(ctx, qa, L.q_a_norm, eps, qa);
    ops::linear(ctx, qa, L.q_b, nullptr, q);
  } else {
    ops::linear(ctx, h, L.q, nullptr, q);
  }
  // The cached row: [c (kv_lora_rank, normalised), k_rot (rotated)].
  Tensor latent = ops::zeros(ctx, {T, row});
  ops::linear(ctx, h, L.kv_a, nullptr, latent);
  ops::rmsnorm_prefix(ctx, latent, L.kv_a_norm, eps);
  ops::rope_blocks(ctx, latent, {1, row, lora}, cos, sin, a.rope_interleave);
  const Device on = pool.layer_storage(l).device;
  // The value is the first kv_lora_rank floats of the same row.
  const ops::KvLayer kv{pool.key(l, 0, 0), pool.key(l, 0, 0), pool.block_bytes(), pool.row_bytes(), pool.dtype(), on};
  ops::store_kv(ctx, ab, latent, nullptr, kv, B, row);

  // Each head's query as a row against the cache: [W_uk[h]^T q_nope, q_rot].
  ops::rope_blocks(ctx, q, {heads, qk, nope}, cos, sin, a.rope_interleave);
  Tensor query = ops::zeros(ctx, {T, heads * row});
  ops::head_matmul(ctx, q, {heads, qk, 0}, L.kv_b, {nope, lora, kvb_rows, 0, true}, query, {heads, row, 0});
  ops::copy_blocks(ctx, q, {heads, qk, nope}, query, {heads, row, lora}, rope);

  ops::AttentionShape shape{heads, 1, row, B, 0, 1.0f / std::sqrt(float(qk)) * yarn_softmax_scale(c.rope), lora};
  Tensor mixed = ops::zeros(ctx, {T, heads * lora});
  ops::paged_attention(ctx, query, ab, kv, shape, mixed);

  // Each head's output through its v rows of kv_b_proj, then o_proj.
  Tensor attn = ops::zeros(ctx, {T, heads * a.v_dim});
  ops::head_matmul(ctx, mixed, {heads, lora, 0}, L.kv_b, {lora, a.v_dim, kvb_rows, nope, false}, attn, {heads, a.v_dim, 0});
  ops::linear(ctx, attn, L.o, nullptr, out);
}

void DecoderModel::gqa_attention(ops::Context& ctx, const LayerWeights& L, int64_t heads, int64_t kv_heads, const Tensor& h,
                                 const Tensor& cos, const Tensor& sin, const ops::KvLayer& kv, int64_t B,
                                 const ops::AttentionBatch& ab, Tensor& out) const {
  const ModelConfig& c = config_;
  const int64_t T = h.dim(0), d = c.head_dim, q_dim = heads * d, kv_dim = kv_heads * d;
  const float eps = float(c.rms_norm_eps);
  auto opt = [](const std::optional<Tensor>& t) { return t ? &*t : nullptr; };
  Tensor q = ops::scratch(ctx, {T, q_dim}), k = ops::scratch(ctx, {T, kv_dim}), v = ops::scratch(ctx, {T, kv_dim});
  Tensor attn = ops::scratch(ctx, {T, q_dim});
  ops::AttentionShape shape{heads, kv_heads, d, B, 0, 1.0f / std::sqrt(float(d))};
  if (spec_.sliding_window && c.sliding_window) shape.window = *c.sliding_window;
  ops::linear(ctx, h, L.q, opt(L.q_bias), q);
  ops::linear(ctx, h, L.k, opt(L.k_bias), k);
  ops::linear(ctx, h, L.v, opt(L.v_bias), v);
  if (L.q_norm) {
    ops::rmsnorm(ctx, q, *L.q_norm, eps, q);
    ops::rmsnorm(ctx, k, *L.k_norm, eps, k);
  }
  ops::rope(ctx, q, heads, cos, sin);
  ops::rope(ctx, k, kv_heads, cos, sin);
  ops::store_kv(ctx, ab, k, &v, kv, B, d);
  ops::paged_attention(ctx, q, ab, kv, shape, attn);
  ops::linear(ctx, attn, L.o, opt(L.o_bias), out);
}

void DecoderModel::dense_mlp(ops::Context& ctx, const LayerWeights& L, const Tensor& h, Tensor& out) const {
  auto opt = [](const std::optional<Tensor>& t) { return t ? &*t : nullptr; };
  const int64_t T = h.dim(0), I = L.gate.dim(0);
  Tensor gate = ops::scratch(ctx, {T, I}), up = ops::scratch(ctx, {T, I});
  ops::linear(ctx, h, L.gate, opt(L.gate_bias), gate);
  ops::linear(ctx, h, L.up, opt(L.up_bias), up);
  ops::silu_mul(ctx, gate, up, gate);
  ops::linear(ctx, gate, L.down, opt(L.down_bias), out);
}

Tensor DecoderModel::forward(ops::Context& main_ctx, const Batch& b, kvcache::KvPool& pool,
                             const std::vector<kvcache::SequenceKv*>& sequences,
                             const std::vector<ops::Context*>* layer_ctx, bool logits_on_host) const {
  const ModelConfig& c = config_;
  const int64_t T = int64_t(b.tokens.size()), H = c.hidden_size, d = c.head_dim;
  const float eps = float(c.rms_norm_eps);

  // The embedding is looked up where its table is; activations then follow the layers from device to
  // device, crossing once per boundary.
  ops::Context embed_ctx{main_ctx.pool, main_ctx.kernels, embed_.device};
  Tensor x = ops::zeros(embed_ctx, {T, H});
  ops::embedding(embed_ctx, embed_, b.tokens, x);

  Tensor cos_host = Tensor::zeros_f32({T, d / 2}), sin_host = Tensor::zeros_f32({T, d / 2});
  rope_tables(inv_freq_, b.positions, cos_host, sin_host, rope_attention_factor(c.rope));
  // The angles on each device that asks for them, copied once per step.
  std::vector<std::pair<Device, std::pair<Tensor, Tensor>>> rope_copies;
  auto rope_on = [&](Device dev) -> std::pair<Tensor, Tensor> {
    for (auto& [where, tables] : rope_copies)
      if (where == dev) return tables;
    rope_copies.push_back({dev, {ops::to_device(cos_host, dev), ops::to_device(sin_host, dev)}});
    return rope_copies.back().second;
  };

  ops::AttentionBatch ab{b.positions, b.seq, {}, {}, {}};
  for (const kvcache::SequenceKv* s : sequences) {
    ab.table_start.push_back(int32_t(ab.block_table.size()));
    ab.block_table.insert(ab.block_table.end(), s->blocks.begin(), s->blocks.end());
  }

  const int64_t B = pool.block_tokens();
  Tensor h, proj;
  for (int64_t l = 0; l < int64_t(layers_.size()); ++l) {
    const LayerWeights& L = layers_[size_t(l)];
    ops::Context& ctx = layer_ctx ? *(*layer_ctx)[size_t(l)] : main_ctx;
    if (!(x.device == ctx.device) || h.empty()) {
      x = ops::to_device(x, ctx.device);
      h = ops::zeros(ctx, {T, H});
      proj = ops::zeros(ctx, {T, H});
    }
    const auto [cos, sin] = rope_on(ctx.device);
    // A split layer's own weights stay on the host; its first shard holds its norms on the layer's device.
    const bool split = is_split(l);
    ops::rmsnorm(ctx, x, split ? shards_[size_t(l)][0].w.attn_norm : L.attn_norm, eps, h);
    if (split) {
      split_sublayer(ctx, l, false, h, pool, ab, rope_on, proj);
    } else if (spec_.mla) {
      mla_attention(ctx, l, L, h, cos, sin, pool, ab, proj);
    } else {
      const ops::KvLayer kv{pool.key(l, 0, 0),    pool.value(l, 0, 0), pool.block_bytes(),
                            pool.row_bytes(),     pool.dtype(),        pool.layer_storage(l).device};
      gqa_attention(ctx, L, c.num_heads, c.num_kv_heads, h, cos, sin, kv, B, ab, proj);
    }
    ops::add(ctx, x, proj);

    ops::rmsnorm(ctx, x, split ? shards_[size_t(l)][0].w.mlp_norm : L.mlp_norm, eps, h);
    if (!L.experts.empty()) moe_mlp(ctx, L, h, proj);
    else if (split) split_sublayer(ctx, l, true, h, pool, ab, rope_on, proj);
    else dense_mlp(ctx, L, h, proj);
    ops::add(ctx, x, proj);
  }

  // Only the rows whose next token is wanted go through the final norm and the (large) LM head, on the
  // LM head's device; the logits come back to the host for the sampler unless asked not to.
  ops::Context head_ctx{main_ctx.pool, main_ctx.kernels, lm_head_.device};
  x = ops::to_device(x, head_ctx.device);
  const int64_t R = int64_t(b.logit_rows.size());
  Tensor last = ops::zeros(head_ctx, {R, H}), normed = ops::zeros(head_ctx, {R, H});
  ops::gather_rows(head_ctx, x, b.logit_rows, last);
  ops::rmsnorm(head_ctx, last, final_norm_, eps, normed);
  Tensor logits = ops::scratch(head_ctx, {R, c.vocab_size});
  ops::linear(head_ctx, normed, lm_head_, nullptr, logits);
  return logits_on_host ? ops::to_device(logits, Device::cpu()) : logits;
}

}  // namespace ftllm::model
