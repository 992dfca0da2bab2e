#include "../core/error.h"
#include "architecture.h"

namespace ftllm::model {

const std::vector<Architecture>& architectures() {
  static const std::vector<Architecture> all = {
      {"LlamaForCausalLM", llama_spec},
      {"MistralForCausalLM", mistral_spec},
      {"Qwen2ForCausalLM", qwen2_spec},
      {"Qwen3ForCausalLM", qwen3_spec},
      {"Qwen2MoeForCausalLM", qwen2_moe_spec},
      {"Qwen3MoeForCausalLM", qwen3_moe_spec},
      {"DeepseekV2ForCausalLM", deepseek_v2_spec},
      {"DeepseekV3ForCausalLM", deepseek_v3_spec},
  };
  return all;
}

const Architecture& find_architecture(const std::string& hf_name) {
  for (const Architecture& a : architectures())
    if (hf_name == a.hf_name) return a;
  std::string names;
  for (const Architecture& a : architectures()) names += std::string(names.empty() ? "" : ", ") + a.hf_name;
  throw EngineError("architecture " + hf_name + " is not supported; supported are " + names);
}

}  // namespace ftllm::model
