#include "gguf_model.h"

#include <cstring>
#include <filesystem>

#include "../core/error.h"
#include "../core/tensor.h"
#include "../cpu/kernels.h"
#include "../quant/ggml_blocks.h"
#include "gguf.h"

namespace ftllm::model {

namespace {

int64_t required(const GgufFile& g, const std::string& key) {
  auto v = g.get_int(key);
  if (!v || *v <= 0) throw EngineError(g.path() + ": metadata " + key + " is missing; it is required to build the model");
  return *v;
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
  }
  if (auto v = g.get_int(p + "vocab_size")) c.vocab_size = *v;
  else if (auto* tokens = g.get_strings("tokenizer.ggml.tokens")) c.vocab_size = int64_t(tokens->size());
  else throw EngineError(g.path() + ": neither " + p + "vocab_size nor tokenizer.ggml.tokens gives the vocabulary size");
  c.tie_word_embeddings = g.tensor("output.weight") == nullptr;
  if (auto bos = g.get_int("tokenizer.ggml.bos_token_id")) c.bos_token_id = int32_t(*bos);
  if (auto eos = g.get_int("tokenizer.ggml.eos_token_id")) c.eos_token_ids.push_back(int32_t(*eos));
  if (auto eot = g.get_int("tokenizer.ggml.eot_token_id"))
    if (c.eos_token_ids.empty() || c.eos_token_ids[0] != *eot) c.eos_token_ids.push_back(int32_t(*eot));
  return c;
}

// `s` re-pointed at the float32 buffer `f`, which it keeps alive.
StoredTensor holding_f32(StoredTensor s, const Tensor& f) {
  s.dtype = DType::F32;
  s.dtype_name = "F32";
  s.data = f.data;
  s.bytes = f.bytes();
  s.owner = f.owner;
  return s;
}

// The weight in Hugging Face's layout: rows = ne[1], columns = ne[0]. Float formats stay mapped; block
// formats become float32 buffers.
StoredTensor convert(const GgufFile& g, const GgufTensor& t, const std::string& hf_name) {
  StoredTensor s;
  s.name = hf_name;
  for (auto it = t.ne.rbegin(); it != t.ne.rend(); ++it) s.shape.push_back(*it);
  if (!t.data)
    throw EngineError(g.path() + ": tensor " + t.name + " is of type " + quant::ggml_type_name(t.type) +
                      ", which this engine cannot read yet (F32, F16, BF16, Q4_0, Q4_1, Q8_0 are supported)");
  if (t.type == uint32_t(quant::GgmlType::F32) || t.type == uint32_t(quant::GgmlType::F16) ||
      t.type == uint32_t(quant::GgmlType::BF16)) {
    s.dtype = t.type == 0 ? DType::F32 : t.type == 1 ? DType::F16 : DType::BF16;
    s.dtype_name = quant::ggml_type_name(t.type);
    s.data = t.data;
    s.bytes = t.bytes;
    s.owner = g.file();  // a view: the mapping must outlive the model
    return s;
  }
  Tensor f = Tensor::zeros_f32(s.shape);
  quant::dequantize(t.type, t.data, f.as<float>(), t.numel());
  return holding_f32(std::move(s), f);
}

// llama.cpp's converter interleaves the two rotary halves of each q/k head; undo it to get back
// Hugging Face's rotate-half layout. Within a head of 2 * half rows, GGUF row 2i + j is HF row j * half + i.
StoredTensor unpermute_rows(const StoredTensor& s, int64_t heads) {
  const int64_t rows = s.shape[0], cols = s.shape[1], half = rows / heads / 2;
  Tensor out = Tensor::zeros_f32({rows, cols});
  std::vector<float> src(size_t(rows * cols));
  cpu::best_kernels().to_f32(*s.dtype, s.data, src.data(), rows * cols);  // widen f16/bf16 views
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t from = h * 2 * half + 2 * i + j, to = h * 2 * half + j * half + i;
        std::memcpy(out.as<float>() + to * cols, src.data() + from * cols, size_t(cols) * 4);
      }
  return holding_f32(s, out);
}

const std::pair<const char*, const char*> kLayerNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},  {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},     {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};

}  // namespace

GgufModel load_gguf_model(const std::string& path, const std::function<void(uint64_t, uint64_t)>& progress) {
  GgufFile g = GgufFile::open(path);
  std::string arch = g.get_string("general.architecture").value_or("");
  if (arch != "llama")
    throw EngineError(path + ": GGUF architecture \"" + arch + "\" is not supported yet (llama is)");
  GgufModel m;
  m.config = config_from_metadata(g, arch);
  const ModelConfig& c = m.config;

  uint64_t total = 0, done = 0;
  for (const GgufTensor& t : g.tensors()) total += t.bytes;
  auto add = [&](const std::string& gguf_name, const std::string& hf_name, int64_t unpermute_heads = 0) {
    const GgufTensor* t = g.tensor(gguf_name);
    if (!t) return;  // binding reports what is missing, under the Hugging Face name
    done += t->bytes;
    if (progress) progress(done, total);
    StoredTensor s = convert(g, *t, hf_name);
    m.weights.add(unpermute_heads ? unpermute_rows(s, unpermute_heads) : s);
  };
  add("token_embd.weight", "model.embed_tokens.weight");
  add("output_norm.weight", "model.norm.weight");
  add("output.weight", "lm_head.weight");
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string blk = "blk." + std::to_string(l) + ".", layer = "model.layers." + std::to_string(l) + ".";
    for (auto [from, to] : kLayerNames) {
      const std::string f = from;
      add(blk + f, layer + to, f == "attn_q.weight" ? c.num_heads : f == "attn_k.weight" ? c.num_kv_heads : 0);
    }
  }
  return m;
}

}  // namespace ftllm::model
