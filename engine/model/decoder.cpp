#include "decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "../core/error.h"
#include "../cpu/thread_pool.h"
#include "rope.h"

namespace ftllm::model {

DecoderModel::DecoderModel(ModelConfig config, const Architecture& architecture, const WeightStore& w)
    : config_(std::move(config)), arch_(architecture) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size;

  // A tied table is also the LM head, the largest matmul of a step: --dtype converts it as such.
  embed_ = w.matrix("model.embed_tokens.weight", {c.vocab_size, H}, c.tie_word_embeddings ? "lm_head.weight" : "");
  final_norm_ = w.vector_f32("model.norm.weight", H);
  lm_head_ = c.tie_word_embeddings ? embed_ : w.matrix("lm_head.weight", {c.vocab_size, H});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights L;
    arch_.bind_layer(LayerBinder{w, c, i, "model.layers." + std::to_string(i) + "."}, L);
    layers_.push_back(std::move(L));
  }
  inv_freq_.push_back(rope_inv_freq(c.rope, c.head_dim));
  if (c.sliding_rope) inv_freq_.push_back(rope_inv_freq(*c.sliding_rope, c.head_dim));
  if (c.rope.type == RopeType::LongRope) long_inv_freq_ = rope_inv_freq(c.rope, c.head_dim, true);
  shards_.resize(layers_.size());

  // What the bound weights amount to (the tied LM head counted once).
  std::map<std::string, uint64_t> by_dtype;
  auto count = [&](const Tensor& t) {
    parameters_ += uint64_t(t.numel());
    weight_bytes_ += t.bytes();
    by_dtype[std::string(dtype_name(t.dtype))] += uint64_t(t.numel());
  };
  count(embed_);
  count(final_norm_);
  if (!c.tie_word_embeddings) count(lm_head_);
  for (const LayerWeights& L : layers_) LayerWeights::visit(L, [&](const std::string&, const Tensor& t, unsigned, bool) { count(t); });
  for (auto& [name, n] : by_dtype) dtypes_ += (dtypes_.empty() ? "" : ", ") + name;
}

std::vector<std::pair<std::string, const Tensor*>> DecoderModel::named_tensors() const {
  std::vector<std::pair<std::string, const Tensor*>> out{{"model.embed_tokens.weight", &embed_},
                                                         {"model.norm.weight", &final_norm_}};
  if (!config_.tie_word_embeddings) out.emplace_back("lm_head.weight", &lm_head_);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights::visit(layers_[i], [&](const std::string& name, const Tensor& t, unsigned, bool) { out.emplace_back(p + name, &t); });
  }
  return out;
}

void DecoderModel::move_matrices(const std::function<void(Tensor&)>& move, bool experts_only) {
  if (!experts_only) {
    move(lm_head_);
    if (config_.tie_word_embeddings) embed_ = lm_head_;  // one copy serves both
  }
  for (LayerWeights& L : layers_)
    LayerWeights::visit(L, [&](const std::string&, Tensor& t, unsigned part, bool matrix) {
      const bool expert = part == kRoutedExperts && &t != &L.router;
      if (matrix && (expert || !experts_only)) move(t);
    });
}

void DecoderModel::move_layer(int64_t l, const std::function<void(Tensor&)>& move, unsigned parts) {
  LayerWeights::visit(layers_[size_t(l)], [&](const std::string&, Tensor& t, unsigned part, bool) {
    if (part & parts) move(t);  // the router moves with its experts: it runs beside them
  });
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
  ops::linear(host, h, L.router, L.router_bias ? &*L.router_bias : nullptr, logits);
  logits = ops::to_device(logits, Device::cpu());  // routing is host code over [T, E]
  const ops::Routes routes = arch_.route(config_, L, logits);
  Tensor routed = ops::zeros(host, {T, H});
  ops::moe_experts(host, h, routes, L.experts, routed);
  if (L.shared) {
    // Shared experts run where their weights are too (--cuda_se keeps them on the layer's GPU).
    const Device shared_on = L.shared->gate.device;
    ops::Context sc{ctx.pool, ctx.kernels, shared_on};
    const Tensor hs = ops::to_device(h_in, shared_on);
    Tensor shared = ops::zeros(sc, {T, H});
    ops::expert_mlp(sc, hs, *L.shared, shared);
    if (const Tensor* gate_row = L.find_own(kSharedExpertGate)) {
      Tensor gate = ops::zeros(sc, {T, 1});
      ops::linear(sc, hs, *gate_row, nullptr, gate);
      ops::scale_rows(sc, shared, gate, true);
    }
    shared = ops::to_device(shared, experts_on);
    ops::add(host, routed, shared);
  }
  out = ops::to_device(routed, ctx.device);
}

void DecoderModel::gqa_attention(ops::Context& ctx, const LayerWeights& L, int64_t heads, int64_t kv_heads, const Tensor& h,
                                 const Tensor& cos, const Tensor& sin, const ops::KvLayer& kv, int64_t B,
                                 const ops::AttentionBatch& ab, Tensor& out, const LayerLora& lora) const {
  const ModelConfig& c = config_;
  const int64_t T = h.dim(0), d = c.head_dim, q_dim = heads * d, kv_dim = kv_heads * d;
  const float eps = float(c.rms_norm_eps);
  auto opt = [](const std::optional<Tensor>& t) { return t ? &*t : nullptr; };
  Tensor q = ops::scratch(ctx, {T, q_dim}), k = ops::scratch(ctx, {T, kv_dim}), v = ops::scratch(ctx, {T, kv_dim});
  Tensor attn = ops::scratch(ctx, {T, q_dim});
  const float scale = c.attention_scale ? c.attention_scale : 1.0f / std::sqrt(float(d));
  ops::AttentionShape shape{heads, kv_heads, d, B, L.window, scale};
  shape.softcap = c.attention_softcap;
  if (L.sinks) shape.sinks = &*L.sinks;
  Tensor gate, qg;  // gated output: q_proj gives each head's query, then its gate
  if (L.gated_output) qg = ops::scratch(ctx, {T, 2 * q_dim});
  const ops::LinearOut qkv[] = {{&L.q, opt(L.q_bias), L.gated_output ? &qg : &q}, {&L.k, opt(L.k_bias), &k}, {&L.v, opt(L.v_bias), &v}};
  ops::linear_many(ctx, h, qkv);
  lora.apply(ctx, h, {{LoraTarget::Q, L.gated_output ? &qg : &q}, {LoraTarget::K, &k}, {LoraTarget::V, &v}});
  if (L.gated_output) {
    gate = ops::scratch(ctx, {T, q_dim});
    ops::copy_blocks(ctx, qg, {heads, 2 * d, 0}, q, {heads, d, 0}, d);
    ops::copy_blocks(ctx, qg, {heads, 2 * d, d}, gate, {heads, d, 0}, d);
  }
  if (L.q_norm) {
    ops::rmsnorm(ctx, q, *L.q_norm, eps, q, c.norm_weight_offset);
    ops::rmsnorm(ctx, k, *L.k_norm, eps, k, c.norm_weight_offset);
  }
  // The first 2 * cos.dim(1) values of each head rotate (all of them unless the rotary part is partial).
  ops::rope_blocks(ctx, q, {heads, d, 0}, cos, sin, false);
  ops::rope_blocks(ctx, k, {kv_heads, d, 0}, cos, sin, false);
  ops::store_kv(ctx, ab, k, &v, kv, B, d);
  ops::paged_attention(ctx, q, ab, kv, shape, attn);
  if (L.gated_output) ops::sigmoid_mul(ctx, attn, gate);
  ops::linear(ctx, attn, L.o, opt(L.o_bias), out);
  lora.apply(ctx, attn, {{LoraTarget::O, &out}});
}

void DecoderModel::dense_mlp(ops::Context& ctx, const LayerWeights& L, const Tensor& h, Tensor& out, const LayerLora& lora) const {
  auto opt = [](const std::optional<Tensor>& t) { return t ? &*t : nullptr; };
  const int64_t T = h.dim(0), I = L.gate.dim(0);
  Tensor gate = ops::scratch(ctx, {T, I}), up = ops::scratch(ctx, {T, I});
  const ops::LinearOut gate_up[] = {{&L.gate, opt(L.gate_bias), &gate}, {&L.up, opt(L.up_bias), &up}};
  ops::linear_many(ctx, h, gate_up);
  lora.apply(ctx, h, {{LoraTarget::Gate, &gate}, {LoraTarget::Up, &up}});
  if (config_.activation == Activation::GeluTanh) ops::gelu_tanh_mul(ctx, gate, up, gate);
  else ops::silu_mul(ctx, gate, up, gate);
  ops::linear(ctx, gate, L.down, opt(L.down_bias), out);
  lora.apply(ctx, gate, {{LoraTarget::Down, &out}});
}

Tensor DecoderModel::forward(ops::Context& main_ctx, const Batch& b, kvcache::KvPool& pool,
                             const std::vector<kvcache::SequenceKv*>& sequences,
                             const std::vector<ops::Context*>* layer_ctx, bool logits_on_host, Tensor* hidden) const {
  const ModelConfig& c = config_;
  const int64_t T = int64_t(b.tokens.size()), H = c.hidden_size;

  // The embedding is looked up where its table is; activations then follow the layers from device to
  // device, crossing once per boundary.
  ops::Context embed_ctx{main_ctx.pool, main_ctx.kernels, embed_.device};
  Tensor x = ops::zeros(embed_ctx, {T, H});
  ops::embedding(embed_ctx, embed_, b.tokens, x);
  if (c.embedding_scale) {  // Gemma: the rows times sqrt(hidden_size), in float32
    Tensor scale = Tensor::zeros_f32({T, 1});
    std::fill(scale.as<float>(), scale.as<float>() + T, c.embedding_scale);
    ops::scale_rows(embed_ctx, x, ops::to_device(scale, embed_ctx.device), false);
  }

  // The angles of each RoPE the layers use (Gemma 3's sliding layers have their own), on each device that
  // asks for them, computed and copied once per step.
  std::vector<std::pair<Tensor, Tensor>> rope_host;
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const int64_t half = int64_t(inv_freq_[i].size());
    const RopeConfig& rope = i == 0 ? c.rope : *c.sliding_rope;
    rope_host.push_back({Tensor::zeros_f32({T, half}), Tensor::zeros_f32({T, half})});
    rope_tables(inv_freq_[i], b.positions, rope_host[i].first, rope_host[i].second, rope_attention_factor(rope),
                long_inv_freq_.empty() || i ? nullptr : &long_inv_freq_, rope.original_max_position_embeddings);
  }
  std::vector<std::pair<std::pair<Device, int>, std::pair<Tensor, Tensor>>> rope_copies;
  const LayerStep::RopeTables rope_on = [&](Device dev, int table) -> std::pair<Tensor, Tensor> {
    for (auto& [where, tables] : rope_copies)
      if (where.first == dev && where.second == table) return tables;
    const auto& [cos, sin] = rope_host[size_t(table)];
    rope_copies.push_back({{dev, table}, {ops::to_device(cos, dev), ops::to_device(sin, dev)}});
    return rope_copies.back().second;
  };

  ops::AttentionBatch ab{b.positions, b.seq, {}, {}, {}, {}};
  for (kvcache::SequenceKv* s : sequences) {
    if (!s->take_state_slot(pool))
      throw EngineError("all " + std::to_string(pool.state_slots()) + " recurrent-state slots are held; fewer sequences per step");
    ab.state_slot.push_back(s->state_slot);
    ab.table_start.push_back(int32_t(ab.block_table.size()));
    ab.block_table.insert(ab.block_table.end(), s->blocks.begin(), s->blocks.end());
  }

  const LoraRows lora = LoraRows::of_batch(b.seq, b.adapters);
  Tensor h, proj;
  for (int64_t l = 0; l < int64_t(layers_.size()); ++l) {
    ops::Context& ctx = layer_ctx ? *(*layer_ctx)[size_t(l)] : main_ctx;
    if (!(x.device == ctx.device) || h.empty()) {
      x = ops::to_device(x, ctx.device);
      h = ops::zeros(ctx, {T, H});
      proj = ops::zeros(ctx, {T, H});
    }
    // A split layer's own weights stay on the host; its first shard holds its norms on the layer's device.
    const LayerWeights& L = layers_[size_t(l)];
    const auto [cos, sin] = rope_on(ctx.device, L.rope_table);
    LayerStep step(*this, ctx, l, L, is_split(l) ? shards_[size_t(l)][0].w : L, pool, ab, rope_on, cos, sin, h, proj);
    step.lora = {&lora, l};
    arch_.run_layer(step, x);
  }

  // Only the rows whose next token is wanted go through the final norm and the (large) LM head, on the
  // LM head's device; the logits come back to the host for the sampler unless asked not to.
  ops::Context head_ctx{main_ctx.pool, main_ctx.kernels, lm_head_.device};
  x = ops::to_device(x, head_ctx.device);
  if (hidden && !b.hidden_rows.empty()) {
    const int64_t n = int64_t(b.hidden_rows.size());
    Tensor rows = ops::zeros(head_ctx, {n, H}), normed = ops::zeros(head_ctx, {n, H});
    ops::gather_rows(head_ctx, x, b.hidden_rows, rows);
    ops::rmsnorm(head_ctx, rows, final_norm_, float(c.rms_norm_eps), normed, c.norm_weight_offset);
    *hidden = ops::to_device(normed, Device::cpu());
  }
  const int64_t R = int64_t(b.logit_rows.size());
  Tensor last = ops::zeros(head_ctx, {R, H}), normed = ops::zeros(head_ctx, {R, H});
  ops::gather_rows(head_ctx, x, b.logit_rows, last);
  ops::rmsnorm(head_ctx, last, final_norm_, float(c.rms_norm_eps), normed, c.norm_weight_offset);
  Tensor logits = ops::scratch(head_ctx, {R, c.vocab_size});
  ops::linear(head_ctx, normed, lm_head_, nullptr, logits);
  if (c.final_softcap) ops::softcap(head_ctx, logits, c.final_softcap);
  return logits_on_host ? ops::to_device(logits, Device::cpu()) : logits;
}

const ModelConfig& LayerStep::model_config(const DecoderModel& m) { return m.config_; }

void LayerStep::attention(const Tensor& in, Tensor& out) {
  if (model_.is_split(layer) && lora.rows && !lora.rows->empty())  // load-adapter and set_placement refuse this
    throw EngineError("layer " + std::to_string(layer) + " is split over devices: LoRA adapters need whole layers");
  if (model_.is_split(layer)) model_.split_sublayer(ctx, layer, false, in, pool, ab, rope_on_, out);
  else model_.arch_.attention(*this, in, out);
}

void LayerStep::mlp(const Tensor& in, Tensor& out) {
  if (!w.experts.empty()) model_.moe_mlp(ctx, w, in, out);
  else if (model_.is_split(layer)) model_.split_sublayer(ctx, layer, true, in, pool, ab, rope_on_, out);
  else model_.dense_mlp(ctx, w, in, out, lora);
}

void LayerStep::gqa_attention(const Tensor& in, Tensor& out) {
  const ops::KvLayer kv{pool.key(layer, 0, 0), pool.value(layer, 0, 0), pool.block_bytes(),
                        pool.row_bytes(),      pool.dtype(),            pool.layer_storage(layer).device};
  model_.gqa_attention(ctx, w, config.num_heads, config.num_kv_heads, in, cos, sin, kv, pool.block_tokens(), ab, out, lora);
}

// The shared decoder's layer and blocks, which architectures take or replace.
void Architecture::run_layer(LayerStep& s, Tensor& x) const {
  s.rmsnorm(x, s.local.attn_norm, s.h);
  s.attention(s.h, s.proj);
  ops::add(s.ctx, x, s.proj);
  s.rmsnorm(x, s.local.mlp_norm, s.h);
  s.mlp(s.h, s.proj);
  ops::add(s.ctx, x, s.proj);
}

void Architecture::attention(LayerStep& s, const Tensor& h, Tensor& out) const { s.gqa_attention(h, out); }

ops::Routes Architecture::route(const ModelConfig& c, const LayerWeights& L, const Tensor& logits) const {
  const MoeConfig& m = c.moe;
  if (m.sigmoid_grouped)
    return ops::route_sigmoid_grouped(logits, L.own_tensor(kCorrectionBias), m.experts_per_token, m.n_group, m.topk_group,
                                      m.norm_topk_prob, float(m.routed_scaling_factor));
  return ops::route_softmax_topk(logits, m.experts_per_token, m.norm_topk_prob, m.n_group, m.topk_group,
                                 float(m.routed_scaling_factor));
}

}  // namespace ftllm::model
