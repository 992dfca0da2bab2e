// GptOssForCausalLM (gpt-oss-20b, gpt-oss-120b): attention with biases and a learned sink logit per head
// in every softmax, sliding-window (128) layers alternating with full ones, YaRN; every layer a mixture
// of experts: the router has a bias, its top experts' logits go through a softmax, and the experts have
// biases and a clamped SwiGLU (swiglu_alpha, swiglu_limit). transformers stores the experts fused and
// transposed (gate_up_proj [E, H, 2I] with gate and up interleaved, down_proj [E, I, H]): bound as
// per-expert matrices in their stored float type or what --moe_dtype makes of them (an exported model's
// per-expert tensors read as well).
// Not yet: the checkpoints' MXFP4 expert blocks (gate_up_proj_blocks/_scales) are refused by name.
#include <cstring>

#include "../core/error.h"
#include "../core/json_writer.h"
#include "../quant/quant.h"
#include "architecture.h"
#include "gguf.h"

namespace ftllm::model {

namespace {

// out[i][j] = src[i * row_pitch + j * col_pitch] (elements of t): a transposed or strided view made a
// row-major matrix.
Tensor strided_copy(DType t, const uint8_t* src, int64_t out_rows, int64_t out_cols, int64_t row_pitch, int64_t col_pitch) {
  const size_t es = dtype_size(t);
  Tensor out = Tensor::zeros(t, {out_rows, out_cols});
  uint8_t* dst = out.as<uint8_t>();
  for (int64_t i = 0; i < out_rows; ++i)
    for (int64_t j = 0; j < out_cols; ++j) std::memcpy(dst + size_t(i * out_cols + j) * es, src + size_t(i * row_pitch + j * col_pitch) * es, es);
  return out;
}

// Rows first, first + step, ... (`rows` of them) of expert e of an MXFP4 pair as OpenAI stores it: blocks
// [E, R, K / 32, 16] with value 2j of a block in the low nibble of byte j and 2j + 1 in the high one, and
// e8m0 scales [E, R, K / 32]; made our MXFP4 rows (ggml's order: value j low, value j + 16 high).
Tensor mxfp4_rows(const StoredTensor& blocks, const StoredTensor& scales, int64_t e, int64_t first, int64_t step, int64_t rows) {
  const int64_t R = blocks.shape[1], nb = blocks.shape[2];
  Tensor out = Tensor::zeros(DType::MXFP4, {rows, nb * 32});
  uint8_t* dst = out.as<uint8_t>();
  const auto* qs = static_cast<const uint8_t*>(blocks.data);
  const auto* es = static_cast<const uint8_t*>(scales.data);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b, dst += 17) {
      const int64_t src = (e * R + first + r * step) * nb + b;
      const uint8_t* q = qs + src * 16;
      auto code = [&](int v) { return (q[v / 2] >> (4 * (v % 2))) & 0xF; };
      dst[0] = es[src];
      for (int j = 0; j < 16; ++j) dst[1 + j] = uint8_t(code(j) | code(j + 16) << 4);
    }
  return out;
}

// A stored float tensor of `shape` as float32.
Tensor float_copy(const StoredTensor& s, const std::vector<int64_t>& shape) {
  if (s.shape != shape || !s.dtype || !is_float(*s.dtype))
    throw EngineError("tensor " + s.name + " has shape " + shape_string(s.shape) + " (" + s.dtype_name + "), expected float " +
                      shape_string(shape));
  Tensor out = Tensor::zeros_f32(shape);
  quant::dequantize_row(*s.dtype, s.data, out.as<float>(), out.numel());
  return out;
}

// The blocks and scales of an MXFP4 pair, checked: [E, rows, K / 32, 16] and [E, rows, K / 32] bytes.
std::pair<const StoredTensor&, const StoredTensor&> mxfp4_pair(const std::map<std::string, StoredTensor>& stored,
                                                               const std::string& name, int64_t E, int64_t rows, int64_t K) {
  auto blocks = stored.find(name + "_blocks"), scales = stored.find(name + "_scales");
  const std::vector<int64_t> want_blocks{E, rows, K / 32, 16}, want_scales{E, rows, K / 32};
  if (K % 32 != 0 || blocks == stored.end() || scales == stored.end() || blocks->second.shape != want_blocks ||
      scales->second.shape != want_scales || blocks->second.dtype_name != "U8" || scales->second.dtype_name != "U8")
    throw EngineError(name + "_blocks and _scales: expected MXFP4 bytes " + shape_string(want_blocks) + " and " +
                      shape_string(want_scales) + " (rows of " + std::to_string(K) + " values in blocks of 32)");
  return {blocks->second, scales->second};
}

class GptOss final : public Architecture {
 public:
  GptOss() : Architecture("GptOssForCausalLM") {}

  void read_config(const ConfigReader& r, ModelConfig& c) const override {
    MoeConfig& m = c.moe;
    const char* experts = r.has("num_local_experts") ? "num_local_experts" : "num_experts";
    m.num_experts = r.required_int(experts);
    m.experts_per_token = r.required_int("num_experts_per_tok");
    if (m.experts_per_token == 0 || m.experts_per_token > m.num_experts)
      throw r.error("num_experts_per_tok", "must be between 1 and " + std::string(experts));
    m.expert_intermediate = c.intermediate_size;
    m.norm_topk_prob = true;  // a softmax over the chosen logits is the softmax renormalised over them
    m.swiglu_alpha = r.number_or("swiglu_alpha", 1.702);
    m.swiglu_limit = r.number_or("swiglu_limit", 7.0);
    c.sliding_window = r.int_or("sliding_window", 128);
    if (!read_layer_types(r, c)) {
      for (int64_t l = 0; l < c.num_layers; ++l) c.sliding_layers.push_back(l % 2 == 0);
    }
    if (!r.has("rope_parameters") && !r.has("rope_scaling")) {  // the config class's YaRN
      c.rope.type = RopeType::Yarn;
      c.rope.factor = 32;
      c.rope.beta_fast = 32;
      c.rope.beta_slow = 1;
      c.rope.truncate = false;
      c.rope.original_max_position_embeddings = 4096;
    }
  }
  // llama.cpp's gpt-oss: sliding layers every other one from the first (pattern 2), YaRN (read with the
  // common keys), a softmax over the chosen experts' logits, the clamped SwiGLU's constants fixed as its graph
  // fixes them. YaRN's blend is not rounded to whole dimensions, as in transformers and OpenAI's code
  // (llama.cpp's ggml rounds it; the logits differ slightly there).
  void read_gguf(const GgufFile& g, const std::string& arch, ModelConfig& c) const override {
    c.sliding_window = g.get_int(arch + ".attention.sliding_window").value_or(128);
    const int64_t pattern = g.get_int(arch + ".attention.sliding_window_pattern").value_or(2);
    c.sliding_layers.clear();
    for (int64_t l = 0; l < c.num_layers; ++l) c.sliding_layers.push_back(pattern > 0 && l % pattern < pattern - 1);
    c.rope.truncate = false;
    c.attention_bias = g.tensor("blk.0.attn_q.bias") != nullptr;
    c.moe.norm_topk_prob = true;
    c.moe.swiglu_alpha = 1.702;
    c.moe.swiglu_limit = 7.0;
  }
  std::vector<std::pair<std::string, std::string>> gguf_layer_names() const override {
    return {{"post_attention_norm.weight", "post_attention_layernorm.weight"},
            {"attn_sinks.weight", "self_attn.sinks"},
            {"attn_output.bias", "self_attn.o_proj.bias"},
            {"ffn_gate_inp.weight", "mlp.router.weight"},
            {"ffn_gate_inp.bias", "mlp.router.bias"},
            {"ffn_gate_exps.bias", "mlp.experts.gate_proj_bias"},
            {"ffn_up_exps.bias", "mlp.experts.up_proj_bias"},
            {"ffn_down_exps.bias", "mlp.experts.down_proj_bias"}};
  }
  void write_config(const ModelConfig& c, const ConfigField& field) const override {
    field("swiglu_alpha", json_number(c.moe.swiglu_alpha));
    field("swiglu_limit", json_number(c.moe.swiglu_limit));
  }

  void bind_layer(const LayerBinder& b, LayerWeights& L) const override {
    const ModelConfig& c = b.config;
    bind_norms(b, L);
    bind_attention(b, L, {.qkv_bias = c.attention_bias, .o_bias = c.attention_bias});
    L.sinks = b.vector("self_attn.sinks", c.num_heads);
    if (c.sliding_layers[size_t(b.layer)]) L.window = c.sliding_window.value_or(0);
    bind_moe(b, L);
  }

 private:
  static void bind_moe(const LayerBinder& b, LayerWeights& L) {
    const ModelConfig& c = b.config;
    const MoeConfig& m = c.moe;
    const int64_t E = m.num_experts, H = c.hidden_size, I = m.expert_intermediate;
    L.router_prefix = "mlp.router.";
    L.router = b.matrix("mlp.router.weight", {E, H});
    L.router_bias = b.vector("mlp.router.bias", E);
    const std::string fused = b.prefix + "mlp.experts.gate_up_proj", fused_down = b.prefix + "mlp.experts.down_proj";
    const auto& stored = b.store.tensors();
    auto need = [&](const std::string& name) -> const StoredTensor& {
      auto it = stored.find(name);
      if (it == stored.end()) throw EngineError("tensor " + name + " is missing; gpt-oss's experts need it");
      return it->second;
    };
    const bool mxfp4 = stored.count(fused + "_blocks") != 0, fused_form = mxfp4 || stored.count(fused) != 0;
    // The fused forms' biases: [E, 2I] with gate and up interleaved, and [E, H].
    Tensor biases, down_biases;
    if (fused_form) {
      biases = float_copy(need(fused + "_bias"), {E, 2 * I});
      down_biases = float_copy(need(fused_down + "_bias"), {E, H});
    }
    // A GGUF stacks each projection: gate and up [E, I, H], down [E, H, I], their biases [E, I] and [E, H].
    const std::string stacked = b.prefix + "mlp.experts.";
    const bool stacked_form = !fused_form && stored.count(stacked + "gate_proj") != 0;
    Tensor gate_biases, up_biases;
    if (stacked_form) {
      gate_biases = float_copy(need(stacked + "gate_proj_bias"), {E, I});
      up_biases = float_copy(need(stacked + "up_proj_bias"), {E, I});
      down_biases = float_copy(need(stacked + "down_proj_bias"), {E, H});
    }
    auto pick = [](const Tensor& all, int64_t first, int64_t n, int64_t step) {
      Tensor v = Tensor::zeros_f32({n});
      for (int64_t i = 0; i < n; ++i) v.as<float>()[i] = all.as<float>()[first + i * step];
      return v;
    };
    for (int64_t e = 0; e < E; ++e) {
      ops::Expert ex;
      const std::string x = "mlp.experts." + std::to_string(e) + ".";
      // --moe_dtype sees them under their per-expert names, as it sees other architectures' experts.
      const std::string names = b.prefix + x;
      if (mxfp4) {
        const auto& [gb, gs] = mxfp4_pair(stored, fused, E, 2 * I, H);
        const auto& [db, ds] = mxfp4_pair(stored, fused_down, E, H, I);
        ex.gate = b.store.converted(mxfp4_rows(gb, gs, e, 0, 2, I), names + "gate_proj.weight");
        ex.up = b.store.converted(mxfp4_rows(gb, gs, e, 1, 2, I), names + "up_proj.weight");
        ex.down = b.store.converted(mxfp4_rows(db, ds, e, 0, 1, H), names + "down_proj.weight");
      } else if (fused_form) {
        // gate_up [E, H, 2I]: expert e's gate row i is column 2i, its up row i column 2i + 1; down [E, I, H].
        const StoredTensor& gu = need(fused);
        const StoredTensor& down = need(fused_down);
        if (gu.shape != std::vector<int64_t>{E, H, 2 * I} || down.shape != std::vector<int64_t>{E, I, H} || !gu.dtype ||
            !is_float(*gu.dtype) || !down.dtype || down.dtype != gu.dtype)
          throw EngineError(fused + ": expected float [" + std::to_string(E) + ", " + std::to_string(H) + ", " + std::to_string(2 * I) +
                            "] with down_proj [E, I, H] of the same dtype");
        const DType t = *gu.dtype;
        const size_t es = dtype_size(t);
        const uint8_t* g = static_cast<const uint8_t*>(gu.data) + size_t(e * H * 2 * I) * es;
        ex.gate = b.store.converted(strided_copy(t, g, I, H, 2, 2 * I), names + "gate_proj.weight");
        ex.up = b.store.converted(strided_copy(t, g + es, I, H, 2, 2 * I), names + "up_proj.weight");
        ex.down = b.store.converted(strided_copy(t, static_cast<const uint8_t*>(down.data) + size_t(e * I * H) * es, H, I, 1, H),
                                    names + "down_proj.weight");
      } else if (stacked_form) {
        ex.gate = b.store.matrix_rows(stacked + "gate_proj", {E, I, H}, e * I, I, names + "gate_proj.weight");
        ex.up = b.store.matrix_rows(stacked + "up_proj", {E, I, H}, e * I, I, names + "up_proj.weight");
        ex.down = b.store.matrix_rows(stacked + "down_proj", {E, H, I}, e * H, H, names + "down_proj.weight");
        ex.gate_bias = pick(gate_biases, e * I, I, 1);
        ex.up_bias = pick(up_biases, e * I, I, 1);
        ex.down_bias = pick(down_biases, e * H, H, 1);
      } else {  // per-expert tensors (an exported model)
        ex.gate = b.matrix(x + "gate_proj.weight", {I, H});
        ex.up = b.matrix(x + "up_proj.weight", {I, H});
        ex.down = b.matrix(x + "down_proj.weight", {H, I});
        ex.gate_bias = b.vector(x + "gate_proj.bias", I);
        ex.up_bias = b.vector(x + "up_proj.bias", I);
        ex.down_bias = b.vector(x + "down_proj.bias", H);
      }
      if (fused_form) {
        ex.gate_bias = pick(biases, e * 2 * I, I, 2);
        ex.up_bias = pick(biases, e * 2 * I + 1, I, 2);
        ex.down_bias = pick(down_biases, e * H, H, 1);
      }
      ex.swiglu_alpha = float(m.swiglu_alpha);
      ex.swiglu_limit = float(m.swiglu_limit);
      L.experts.push_back(std::move(ex));
    }
  }
};

}  // namespace

const Architecture& gpt_oss() {
  static const GptOss a;
  return a;
}

}  // namespace ftllm::model
