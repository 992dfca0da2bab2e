#include "../core/error.h"
#include "architecture.h"

namespace ftllm::model {

// One per architecture file.
const Architecture& llama();
const Architecture& mistral();
const Architecture& qwen2();
const Architecture& qwen3();
const Architecture& qwen2_moe();
const Architecture& qwen3_moe();
const Architecture& deepseek_v2();
const Architecture& deepseek_v3();
const Architecture& gemma2();
const Architecture& gemma3();
const Architecture& phi3();
const Architecture& glm4_moe();
const Architecture& gpt_oss();
const Architecture& qwen3_next();

const std::vector<const Architecture*>& architectures() {
  static const std::vector<const Architecture*> all = {
      &llama(), &mistral(), &qwen2(), &qwen3(), &qwen2_moe(), &qwen3_moe(), &deepseek_v2(), &deepseek_v3(), &gemma2(), &gemma3(), &phi3(), &glm4_moe(), &gpt_oss(), &qwen3_next(),
  };
  return all;
}

const Architecture& find_architecture(const std::string& hf_name) {
  for (const Architecture* a : architectures())
    if (hf_name == a->hf_name()) return *a;
  std::string names;
  for (const Architecture* a : architectures()) names += std::string(names.empty() ? "" : ", ") + a->hf_name();
  throw EngineError("architecture " + hf_name + " is not supported; supported are " + names);
}

}  // namespace ftllm::model
