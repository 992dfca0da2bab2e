// Which dtype each weight matrix is computed in: --dtype for every linear layer, --moe_dtype for the
// routed experts, and --dtype_config rules (tensor-name pattern -> dtype) ahead of both.
#pragma once

#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "../core/dtype.h"

namespace ftllm::model {

class DTypeRules {
 public:
  // dtype / moe_dtype: "auto" (or empty) keeps what the files store. dtype_config: a JSON file holding
  // [{"key": REGEX, "dtype": NAME}, ...]; a key matches a whole tensor name ("model.layers.0.mlp.up_proj.weight")
  // and the first matching rule wins; "auto" keeps the stored dtype. Throws EngineError on a bad name or file.
  static DTypeRules parse(const std::string& dtype, const std::string& moe_dtype, const std::string& dtype_config);

  // The dtype to convert `tensor` to, or nullopt to keep it as stored. An untied input embedding is left
  // alone unless a rule names it: it is only a table lookup (a tied one is bound as "lm_head.weight");
  // so are MoE routers (mlp.gate, mlp.shared_expert_gate), whose rounding could flip expert choices.
  std::optional<DType> target(const std::string& tensor) const;
  bool empty() const { return !dtype_ && !moe_dtype_ && rules_.empty(); }

 private:
  struct Rule {
    std::regex pattern;
    std::optional<DType> dtype;  // nullopt: keep
  };
  std::optional<DType> dtype_, moe_dtype_;
  std::vector<Rule> rules_;
};

}  // namespace ftllm::model
