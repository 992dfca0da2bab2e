// An architecture: what one Hugging Face model class adds to the shared decoder (decoder.h). Its file
// reads the config.json keys only it has, checks what it cannot run, binds its layers' weights and
// builds each layer from the shared blocks (LayerStep); a new architecture is that file plus its lines in
// registry.cpp and engine/meson.build.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "../ops/moe.h"
#include "config_reader.h"
#include "layer.h"
#include "model_config.h"

namespace ftllm::model {

class LayerStep;
class GgufFile;

class Architecture {
 public:
  explicit Architecture(const char* hf_name) : hf_name_(hf_name) {}
  virtual ~Architecture() = default;
  const char* hf_name() const { return hf_name_; }

  // Reads the config.json keys this architecture adds to the common ones (config_reader.h); throws
  // EngineError naming a key it cannot honour.
  virtual void read_config(const ConfigReader&, ModelConfig&) const {}
  // Writes those keys back (ftllmctl export): field(key, JSON value).
  using ConfigField = std::function<void(const char* key, const std::string& json_value)>;
  virtual void write_config(const ModelConfig&, const ConfigField&) const {}
  // Checks a config however it was read (config.json, GGUF metadata, --moe_experts applied); throws
  // EngineError saying what this architecture cannot run.
  virtual void check(const ModelConfig&) const {}
  // A GGUF of this architecture as llama.cpp's converter writes it (`arch.` keys): what its metadata says
  // beyond the common keys (gguf_model.cpp), the layer tensor names (under blk.N.) that differ from
  // llama's as (GGUF name, Hugging Face name under model.layers.N.), and what the converter added to a
  // norm weight (Gemma: 1) of that Hugging Face name, which the loader takes off again.
  virtual void read_gguf(const GgufFile&, const std::string& /*arch*/, ModelConfig&) const {}
  virtual std::vector<std::pair<std::string, std::string>> gguf_layer_names() const { return {}; }
  virtual float gguf_norm_shift(const std::string& /*hf_name*/) const { return 0; }
  // Binds one layer's weights.
  virtual void bind_layer(const LayerBinder& b, LayerWeights& L) const = 0;
  // Runs one layer on the residual stream x: by default x += attention(norm(x)), x += mlp(norm(x)).
  virtual void run_layer(LayerStep& s, Tensor& x) const;
  // The attention block, from the normalised rows h: by default grouped-query attention with RoPE over
  // the paged cache (LayerStep::gqa_attention).
  virtual void attention(LayerStep& s, const Tensor& h, Tensor& out) const;
  // Whether layer `layer`'s attention is that default block over its q/k/v/o weights, which LoRA adapters
  // may then change (lora.h); false where the architecture computes it another way.
  virtual bool standard_attention(const ModelConfig&, int64_t /*layer*/) const { return true; }
  // A mixture-of-experts layer's routing from the router's logits [T, E] (host float32): by default as
  // config.moe says: sigmoid scores plus the correction bias over expert groups (sigmoid_grouped), else
  // a softmax (over the best groups); the top experts_per_token, renormalised when norm_topk_prob.
  virtual ops::Routes route(const ModelConfig& c, const LayerWeights& L, const Tensor& logits) const;

 private:
  const char* hf_name_;
};

const std::vector<const Architecture*>& architectures();
// Throws EngineError naming the architecture and listing the supported ones.
const Architecture& find_architecture(const std::string& hf_name);

}  // namespace ftllm::model
