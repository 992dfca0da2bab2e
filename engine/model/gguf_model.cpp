#include "gguf_model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "../core/error.h"
#include "../core/tensor.h"
#include "../quant/ggml_blocks.h"
#include "architecture.h"
#include "gguf.h"

namespace ftllm::model {

namespace {

int64_t required(const GgufFile& g, const std::string& key) {
  auto v = g.get_int(key);
  if (!v || *v <= 0) throw EngineError(g.path() + ": metadata " + key + " is missing; it is required to build the model");
  return *v;
}

// llama.cpp's expert gating functions (LLAMA_EXPERT_GATING_FUNC_TYPE_*).
constexpr int64_t kGatingSoftmax = 1, kGatingSigmoid = 2, kGatingSoftmaxWeight = 3;

// The keys every MoE architecture's converter writes (`p` is "ARCH."). Whether the chosen weights are
// renormalised is the architecture's (its read_gguf): llama.cpp fixes it per graph for most.
void read_experts(const GgufFile& g, const std::string& p, ModelConfig& c) {
  const std::optional<int64_t> count = g.get_int(p + "expert_count");
  if (!count || *count == 0) return;
  MoeConfig& m = c.moe;
  m.num_experts = *count;
  m.experts_per_token = required(g, p + "expert_used_count");
  if (m.experts_per_token > m.num_experts)
    throw EngineError(g.path() + ": " + p + "expert_used_count is above " + p + "expert_count");
  m.expert_intermediate = g.get_int(p + "expert_feed_forward_length").value_or(c.intermediate_size);
  m.shared_intermediate = g.get_int(p + "expert_shared_feed_forward_length")
                              .value_or(g.get_int(p + "expert_shared_count").value_or(0) * m.expert_intermediate);
  for (int64_t l = 0; l < g.get_int(p + "leading_dense_block_count").value_or(0); ++l) m.dense_layers.push_back(l);
  m.routed_scaling_factor = g.get_float(p + "expert_weights_scale").value_or(0.0);
  if (m.routed_scaling_factor == 0.0) m.routed_scaling_factor = 1.0;  // llama.cpp: 0 means unscaled
  m.norm_topk_prob = g.get_bool(p + "expert_weights_norm").value_or(false);
  const int64_t gating = g.get_int(p + "expert_gating_func").value_or(kGatingSoftmax);
  if (gating != kGatingSoftmax && gating != kGatingSigmoid && gating != kGatingSoftmaxWeight)
    throw EngineError(g.path() + ": " + p + "expert_gating_func " + std::to_string(gating) +
                      " is not supported (1 softmax, 2 sigmoid, 3 softmax over the chosen experts)");
  m.sigmoid_grouped = gating == kGatingSigmoid;
  if (gating == kGatingSoftmaxWeight) m.norm_topk_prob = true;  // a softmax over the chosen logits
  m.n_group = std::max<int64_t>(1, g.get_int(p + "expert_group_count").value_or(1));
  m.topk_group = std::max<int64_t>(1, g.get_int(p + "expert_group_used_count").value_or(m.n_group));
  if (m.num_experts % m.n_group != 0 || m.topk_group > m.n_group)
    throw EngineError(g.path() + ": " + p + "expert_group_count must divide the experts, with expert_group_used_count at most it");
}

ModelConfig config_from_metadata(const GgufFile& g, const std::string& arch) {
  const std::string p = arch + ".";
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = required(g, p + "embedding_length");
  c.num_layers = required(g, p + "block_count");
  c.intermediate_size = required(g, p + "feed_forward_length");
  c.num_heads = required(g, p + "attention.head_count");
  c.num_kv_heads = g.get_int(p + "attention.head_count_kv").value_or(c.num_heads);
  c.head_dim = g.get_int(p + "attention.key_length").value_or(c.hidden_size / c.num_heads);
  c.rms_norm_eps = g.get_float(p + "attention.layer_norm_rms_epsilon").value_or(1e-5);
  c.rope.theta = g.get_float(p + "rope.freq_base").value_or(10000.0);
  c.max_position_embeddings = g.get_int(p + "context_length").value_or(2048);
  if (auto type = g.get_string(p + "rope.scaling.type"); type && *type == "linear") {
    c.rope.type = RopeType::Linear;
    c.rope.factor = g.get_float(p + "rope.scaling.factor").value_or(1.0);
  } else if (type && *type == "yarn") {  // what the architecture's file adds: whether the range is rounded, mscale
    c.rope.type = RopeType::Yarn;
    c.rope.factor = g.get_float(p + "rope.scaling.factor").value_or(1.0);
    c.rope.original_max_position_embeddings = g.get_int(p + "rope.scaling.original_context_length").value_or(4096);
    c.rope.beta_fast = g.get_float(p + "rope.scaling.yarn_beta_fast").value_or(32.0);
    c.rope.beta_slow = g.get_float(p + "rope.scaling.yarn_beta_slow").value_or(1.0);
  }
  if (auto v = g.get_int(p + "vocab_size")) c.vocab_size = *v;
  else if (auto* tokens = g.get_strings("tokenizer.ggml.tokens")) c.vocab_size = int64_t(tokens->size());
  else throw EngineError(g.path() + ": neither " + p + "vocab_size nor tokenizer.ggml.tokens gives the vocabulary size");
  c.tie_word_embeddings = g.tensor("output.weight") == nullptr;
  read_experts(g, p, c);
  if (auto bos = g.get_int("tokenizer.ggml.bos_token_id")) c.bos_token_id = int32_t(*bos);
  if (auto eos = g.get_int("tokenizer.ggml.eos_token_id")) c.eos_token_ids.push_back(int32_t(*eos));
  if (auto eot = g.get_int("tokenizer.ggml.eot_token_id"))
    if (c.eos_token_ids.empty() || c.eos_token_ids[0] != *eot) c.eos_token_ids.push_back(int32_t(*eot));
  return c;
}

// The weight in Hugging Face's layout (rows = ne[1], columns = ne[0]), a view of the mapped file in its
// stored type: block formats are computed on where they lie.
StoredTensor view(const GgufFile& g, const GgufTensor& t, const std::string& hf_name) {
  StoredTensor s;
  s.name = hf_name;
  for (auto it = t.ne.rbegin(); it != t.ne.rend(); ++it) s.shape.push_back(*it);
  s.dtype_name = quant::ggml_type_name(t.type);
  if (!t.data)
    throw EngineError(g.path() + ": tensor " + t.name + " is of type " + s.dtype_name +
                      ", which this engine cannot read (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, "
                      "Q5_K, Q6_K and MXFP4 are supported); convert the model with llama-quantize to one of those");
  s.dtype = quant::dtype_of_ggml(t.type);
  s.data = t.data;
  s.bytes = t.bytes;
  s.owner = t.file;  // the mapping (of its part) must outlive the model
  return s;
}

// llama.cpp's converter interleaves the two rotary halves of each q/k head of llama models; undo it to
// get back Hugging Face's rotate-half layout. Within a head of 2 * half rows, GGUF row 2i + j is HF row
// j * half + i. Rows move whole, in whatever type they are stored.
StoredTensor unpermute_rows(const StoredTensor& s, int64_t heads) {
  const int64_t rows = s.shape[0], half = rows / heads / 2;
  const size_t bytes = row_bytes(*s.dtype, s.shape[1]);
  Tensor moved = Tensor::zeros(*s.dtype, s.shape);
  const auto* src = static_cast<const uint8_t*>(s.data);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t from = h * 2 * half + 2 * i + j, to = h * 2 * half + j * half + i;
        std::memcpy(moved.as<uint8_t>() + size_t(to) * bytes, src + size_t(from) * bytes, bytes);
      }
  StoredTensor out = s;
  out.data = moved.data;
  out.owner = moved.owner;
  return out;
}

// Every weight of a norm less `shift` (llama.cpp's converter adds 1 to Gemma's), in float32.
StoredTensor unshift_norm(const StoredTensor& s, float shift) {
  if (!s.dtype || *s.dtype != DType::F32) throw EngineError("GGUF norm " + s.name + " is not float32");
  Tensor moved = Tensor::zeros(DType::F32, s.shape);
  const float* src = static_cast<const float*>(s.data);
  for (int64_t i = 0; i < moved.numel(); ++i) moved.as<float>()[i] = src[i] - shift;
  StoredTensor out = s;
  out.data = moved.data;
  out.owner = moved.owner;
  return out;
}

const std::pair<const char*, const char*> kLayerNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},  {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},     {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},     {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},        {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"}, {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    // Mixture of experts: the router, the experts stacked [E, rows, cols] (bound as views, one expert's
    // rows at a time: layer.cpp), shared experts, DeepSeek's and GLM's routing bias.
    {"ffn_gate_inp.weight", "mlp.gate.weight"},        {"ffn_gate_exps.weight", "mlp.experts.gate_proj"},
    {"ffn_up_exps.weight", "mlp.experts.up_proj"},     {"ffn_down_exps.weight", "mlp.experts.down_proj"},
    {"ffn_gate_up_exps.weight", "mlp.experts.gate_up_proj"},  // the converter's --fuse-gate-up-exps: [E, 2I, H]
    {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight"},
    {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight"},
    {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight"},
    {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias"},
};

// GGUF architectures and the Hugging Face class whose decoder they are.
const std::pair<const char*, const char*> kArchitectures[] = {
    {"llama", "LlamaForCausalLM"},     {"qwen2", "Qwen2ForCausalLM"},       {"qwen3", "Qwen3ForCausalLM"},
    {"gemma2", "Gemma2ForCausalLM"},   {"gemma3", "Gemma3ForCausalLM"},     {"phi3", "Phi3ForCausalLM"},
    {"qwen2moe", "Qwen2MoeForCausalLM"}, {"qwen3moe", "Qwen3MoeForCausalLM"}, {"glm4moe", "Glm4MoeForCausalLM"},
    {"gpt-oss", "GptOssForCausalLM"},  {"deepseek2", "DeepseekV3ForCausalLM"}, {"qwen3next", "Qwen3NextForCausalLM"}};

}  // namespace

GgufModel load_gguf_model(const std::string& path, const std::function<void(uint64_t, uint64_t)>& progress) {
  GgufFile g = GgufFile::open(path);
  std::string arch = g.get_string("general.architecture").value_or("");
  const char* hf_class = nullptr;
  for (auto [name, cls] : kArchitectures)
    if (arch == name) hf_class = cls;
  if (!hf_class)
    throw EngineError(path + ": GGUF architecture \"" + arch + "\" is not supported (llama, qwen2, qwen3, gemma2, gemma3, "
                      "phi3, qwen2moe, qwen3moe, glm4moe, gpt-oss, deepseek2 and qwen3next are)");
  GgufModel m;
  m.file_bytes = g.bytes();
  m.config = config_from_metadata(g, arch);
  m.config.architecture = hf_class;
  const Architecture& architecture = find_architecture(hf_class);
  architecture.read_gguf(g, arch, m.config);
  // A layer without a router is dense (llama.cpp's leading_dense_block_count, or Qwen's mlp_only_layers
  // written out as plain MLP tensors).
  MoeConfig& moe = m.config.moe;
  if (moe.num_experts > 0)
    for (int64_t l = 0; l < m.config.num_layers; ++l)
      if (!g.tensor("blk." + std::to_string(l) + ".ffn_gate_inp.weight") &&
          std::find(moe.dense_layers.begin(), moe.dense_layers.end(), l) == moe.dense_layers.end())
        moe.dense_layers.push_back(l);
  std::vector<std::pair<std::string, std::string>> layer_names;
  for (auto [from, to] : kLayerNames) layer_names.emplace_back(from, to);
  for (auto& [from, to] : architecture.gguf_layer_names()) {  // the architecture's own replace llama's
    std::erase_if(layer_names, [&](const auto& n) { return n.first == from; });
    layer_names.emplace_back(from, to);
  }
  const bool permuted = arch == "llama";  // only llama's q/k rows were interleaved by the converter
  const ModelConfig& c = m.config;

  uint64_t total = 0, done = 0;
  for (const GgufTensor& t : g.tensors()) total += t.bytes;
  auto add = [&](const std::string& gguf_name, const std::string& hf_name, int64_t unpermute_heads = 0) {
    const GgufTensor* t = g.tensor(gguf_name);
    if (!t) return;  // binding reports what is missing, under the Hugging Face name
    done += t->bytes;
    if (progress) progress(done, total);
    StoredTensor s = view(g, *t, hf_name);
    if (const float shift = architecture.gguf_norm_shift(hf_name)) s = unshift_norm(s, shift);
    m.weights.add(unpermute_heads ? unpermute_rows(s, unpermute_heads) : s);
  };
  add("token_embd.weight", "model.embed_tokens.weight");
  add("output_norm.weight", "model.norm.weight");
  add("output.weight", "lm_head.weight");
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string blk = "blk." + std::to_string(l) + ".", layer = "model.layers." + std::to_string(l) + ".";
    for (const auto& [from, to] : layer_names) {
      const std::string& f = from;
      const int64_t heads = f == "attn_q.weight" ? c.num_heads : f == "attn_k.weight" ? c.num_kv_heads : 0;
      add(blk + f, layer + to, permuted ? heads : 0);
    }
  }
  return m;
}

}  // namespace ftllm::model
