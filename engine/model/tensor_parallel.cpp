// Tensor parallelism over devices (fastllm's multicuda): a layer's attention split by KV heads and its
// dense MLP by intermediate rows, each shard's weights on its own device, partial outputs summed on the
// layer's device. One thread queues every shard's work; GPU shards run at once on their own streams, a
// host shard runs while the GPUs work on what was queued before it.
#include <algorithm>
#include <cmath>

#include "../core/error.h"
#include "decoder.h"

namespace ftllm::model {

namespace {

// `total` units in whole multiples of `step` over the shares, each at least one step (the last takes
// what rounding left). Empty when there are fewer steps than shards.
std::vector<int64_t> split_by_shares(int64_t total, int64_t step, const std::vector<double>& shares) {
  const int64_t steps = total / step;
  if (total % step || steps < int64_t(shares.size())) return {};
  double sum = 0;
  for (double s : shares) sum += s;
  std::vector<int64_t> counts;
  int64_t given = 0;
  double acc = 0;
  for (size_t i = 0; i < shares.size(); ++i) {
    acc += shares[i];
    const int64_t left_for_rest = int64_t(shares.size() - i - 1);
    int64_t end = i + 1 == shares.size() ? steps : std::llround(double(steps) * acc / sum);
    end = std::clamp<int64_t>(end, given + 1, steps - left_for_rest);
    counts.push_back((end - given) * step);
    given = end;
  }
  return counts;
}

}  // namespace

std::vector<DecoderModel::ShardSpan> DecoderModel::split_layer(int64_t l, const std::vector<std::pair<Device, double>>& shares) {
  const ModelConfig& c = config_;
  const LayerWeights& L = layers_[size_t(l)];
  if (L.sinks) throw EngineError(c.architecture + "'s attention sinks are not split over devices; place its layers on one device");
  if (L.k.empty() || c.linear.count())
    throw EngineError(c.architecture + "'s attention (" +
                      (c.mla.kv_lora_rank ? "multi-head latent attention" : c.linear.count() ? "gated DeltaNet and gated attention" : "its own") +
                      ") is not split over devices; place its layers on one device");
  join_layer(l);
  const int64_t d = c.head_dim, group = c.num_heads / c.num_kv_heads;
  std::vector<double> w;
  for (auto& [dev, share] : shares) w.push_back(share);
  // o_proj is cut between query heads: the cuts must fall on its dtype's blocks.
  const int64_t o_block = dtype_layout(L.o.dtype).block_values;
  int64_t head_step = 1;
  while ((head_step * group * d) % o_block) ++head_step;
  const std::vector<int64_t> kv = split_by_shares(c.num_kv_heads, head_step, w);
  if (kv.empty())
    throw EngineError("layer " + std::to_string(l) + ": " + std::to_string(c.num_kv_heads) + " KV heads cannot be split over " +
                      std::to_string(shares.size()) + " devices (each needs at least " + std::to_string(head_step) +
                      " so o_proj's " + std::string(dtype_name(L.o.dtype)) + " blocks stay whole)");
  std::vector<int64_t> ffn(shares.size(), 0);
  const bool dense = L.experts.empty();
  if (dense) {
    const int64_t I = L.gate.dim(0), block = std::max<int64_t>(32, dtype_layout(L.down.dtype).block_values);
    ffn = split_by_shares(I, block, w);
    if (ffn.empty())
      throw EngineError("layer " + std::to_string(l) + ": an intermediate of " + std::to_string(I) + " cannot be split over " +
                        std::to_string(shares.size()) + " devices in whole blocks of " + std::to_string(block));
  }
  // Host copies to cut from: the layer's own weights may sit on a GPU.
  auto host = [](const Tensor& t) { return ops::to_device(t, Device::cpu()); };
  auto here = [](const std::optional<Tensor>& t) { return t ? std::optional<Tensor>(ops::to_device(*t, Device::cpu())) : std::nullopt; };
  const Tensor o = host(L.o), down = dense ? host(L.down) : Tensor();
  std::vector<Shard> out;
  int64_t kv0 = 0, f0 = 0;
  for (size_t s = 0; s < shares.size(); ++s) {
    Shard sh;
    sh.span = {shares[s].first, kv0, kv[s], f0, ffn[s]};
    const int64_t q0 = kv0 * group * d, q1 = (kv0 + kv[s]) * group * d, k0 = kv0 * d, k1 = (kv0 + kv[s]) * d;
    LayerWeights& W = sh.w;
    W.q = slice_rows(L.q, q0, q1);
    W.k = slice_rows(L.k, k0, k1);
    W.v = slice_rows(L.v, k0, k1);
    W.o = slice_columns(o, q0, q1);
    if (L.q_bias) W.q_bias = slice_rows(*here(L.q_bias), q0, q1);
    if (L.k_bias) W.k_bias = slice_rows(*here(L.k_bias), k0, k1);
    if (L.v_bias) W.v_bias = slice_rows(*here(L.v_bias), k0, k1);
    W.q_norm = L.q_norm;
    W.k_norm = L.k_norm;
    W.window = L.window;
    W.rope_table = L.rope_table;
    if (s == 0) {  // added once, after the sum; the norms run on the layer's device
      W.o_bias = L.o_bias;
      W.down_bias = L.down_bias;
      W.attn_norm = L.attn_norm;
      W.mlp_norm = L.mlp_norm;
      for (const OwnTensor& t : L.own)  // an architecture's own norms (its own matrices are not split)
        if (t.part == kAttentionAndDense && !t.matrix) W.own.push_back({t.name, ops::to_device(t.tensor, shares[s].first), t.part, false});
    }
    if (dense) {
      W.gate = slice_rows(L.gate, f0, f0 + ffn[s]);
      W.up = slice_rows(L.up, f0, f0 + ffn[s]);
      W.down = slice_columns(down, f0, f0 + ffn[s]);
      if (L.gate_bias) W.gate_bias = slice_rows(*here(L.gate_bias), f0, f0 + ffn[s]);
      if (L.up_bias) W.up_bias = slice_rows(*here(L.up_bias), f0, f0 + ffn[s]);
    }
    const Device dev = shares[s].first;
    for (Tensor* t : {&W.q, &W.k, &W.v, &W.o, &W.gate, &W.up, &W.down, &W.attn_norm, &W.mlp_norm})
      if (!t->empty()) *t = ops::to_device(*t, dev);
    for (std::optional<Tensor>* t : {&W.q_bias, &W.k_bias, &W.v_bias, &W.o_bias, &W.q_norm, &W.k_norm, &W.gate_bias, &W.up_bias,
                                     &W.down_bias})
      if (*t) **t = ops::to_device(**t, dev);
    kv0 += kv[s];
    f0 += ffn[s];
    out.push_back(std::move(sh));
  }
  shards_[size_t(l)] = std::move(out);
  std::vector<ShardSpan> spans;
  for (const Shard& sh : shards_[size_t(l)]) spans.push_back(sh.span);
  return spans;
}

void DecoderModel::join_layer(int64_t l) { shards_[size_t(l)].clear(); }

std::vector<const Tensor*> DecoderModel::shard_tensors() const {
  std::vector<const Tensor*> out;
  for (const std::vector<Shard>& layer : shards_)
    for (const Shard& sh : layer) LayerWeights::visit(sh.w, [&](const std::string&, const Tensor& t, unsigned, bool) { out.push_back(&t); });
  return out;
}

void DecoderModel::split_sublayer(ops::Context& ctx, int64_t l, bool mlp, const Tensor& h, kvcache::KvPool& pool,
                                  const ops::AttentionBatch& ab,
                                  const LayerStep::RopeTables& rope_on, Tensor& out) const {
  const ModelConfig& c = config_;
  const int64_t T = h.dim(0), H = h.dim(1), d = c.head_dim, group = c.num_heads / c.num_kv_heads;
  const std::vector<Shard>& shards = shards_[size_t(l)];
  const std::vector<Tensor>& pages = pool.shards(l);
  // Every shard gets its input first, then each queues its work (on its own device's stream, so GPU
  // shards overlap), then the partial sums are gathered.
  std::vector<Tensor> inputs, parts;
  for (const Shard& sh : shards) inputs.push_back(ops::to_device(h, sh.span.device));
  for (size_t s = 0; s < shards.size(); ++s) {
    const Shard& sh = shards[s];
    ops::Context sc{ctx.pool, ctx.kernels, sh.span.device};
    const Tensor& hs = inputs[s];
    Tensor part = ops::zeros(sc, {T, H});
    if (mlp) {
      dense_mlp(sc, sh.w, hs, part);
    } else {
      const Tensor& kvp = pages[s];
      const int64_t row_bytes = kvp.dim(3) * 4, block_bytes = kvp.dim(2) * row_bytes;
      uint8_t* keys = reinterpret_cast<uint8_t*>(kvp.as<float>());
      const ops::KvLayer kv{keys, keys + kvp.dim(1) * block_bytes, block_bytes, row_bytes, pool.dtype(), kvp.device};
      if (row_bytes != (sh.span.kv_heads * kvcache::kv_head_bytes(pool.dtype(), d) + 3) / 4 * 4)
        throw EngineError("tensor parallel: KV pages do not match the shard's heads");
      const auto [cos, sin] = rope_on(sh.span.device, layers_[size_t(l)].rope_table);
      gqa_attention(sc, sh.w, sh.span.kv_heads * group, sh.span.kv_heads, hs, cos, sin, kv, pool.block_tokens(), ab, part);
    }
    parts.push_back(std::move(part));
  }
  // The sum: NCCL's all-reduce when the shards are on distinct GPUs, else through copies to the layer's
  // device, in shard order.
  std::vector<Tensor*> ptrs;
  for (Tensor& p : parts) ptrs.push_back(&p);
  if (parts.size() > 1 && ops::all_reduce_sum(ptrs)) {
    out = parts[0];
    return;
  }
  for (size_t s = 0; s < parts.size(); ++s) {
    const Tensor part = ops::to_device(parts[s], ctx.device);
    if (s == 0) out = part;
    else ops::add(ctx, out, part);
  }
}

}  // namespace ftllm::model
