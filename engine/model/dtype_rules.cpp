#include "dtype_rules.h"

#include <simdjson.h>

#include "../core/error.h"
#include "../core/mapped_file.h"
#include "../quant/quant.h"

namespace ftllm::model {

namespace {

std::optional<DType> parse_target(const std::string& name, const std::string& what) {
  if (name.empty() || name == "auto") return std::nullopt;
  auto t = parse_dtype(name);
  if (!t || !quant::can_quantize_to(*t))
    throw EngineError(what + " " + name + " is not a dtype models can be converted to; use float32, float16, bfloat16, "
                      "int8, int4, int4g (group 128) or int4g32/64/256, fp8, or auto to keep the stored dtype");
  return t;
}

}  // namespace

DTypeRules DTypeRules::parse(const std::string& dtype, const std::string& moe_dtype, const std::string& dtype_config) {
  DTypeRules r;
  r.dtype_ = parse_target(dtype, "--dtype");
  r.moe_dtype_ = parse_target(moe_dtype, "--moe_dtype");
  if (dtype_config.empty()) return r;
  simdjson::dom::parser parser;
  simdjson::padded_string text(read_text_file(dtype_config));
  simdjson::dom::array rules;
  if (parser.parse(text).get(rules))
    throw EngineError(dtype_config + ": a dtype config is a JSON array of {\"key\": REGEX, \"dtype\": NAME}");
  for (simdjson::dom::element e : rules) {
    std::string_view key, name;
    if (e["key"].get(key) || e["dtype"].get(name))
      throw EngineError(dtype_config + ": every rule needs a \"key\" (a regular expression) and a \"dtype\"");
    Rule rule;
    try {
      rule.pattern = std::regex(std::string(key), std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& err) {
      throw EngineError(dtype_config + ": key \"" + std::string(key) + "\" is not a regular expression (" + err.what() + ")");
    }
    rule.dtype = parse_target(std::string(name), dtype_config + ": dtype");
    r.rules_.push_back(std::move(rule));
  }
  return r;
}

std::optional<DType> DTypeRules::target(const std::string& tensor) const {
  for (const Rule& rule : rules_)
    if (std::regex_match(tensor, rule.pattern)) return rule.dtype;
  if (tensor.find(".mlp.experts.") != std::string::npos && moe_dtype_) return moe_dtype_;
  if (tensor == "model.embed_tokens.weight") return std::nullopt;
  // MoE routers choose experts: a rounding can flip a choice, and they are tiny. Like llama-quantize
  // (ffn_gate_inp), keep them unless a rule names them.
  if (tensor.ends_with(".mlp.gate.weight") || tensor.ends_with(".mlp.shared_expert_gate.weight")) return std::nullopt;
  return dtype_;
}

}  // namespace ftllm::model
