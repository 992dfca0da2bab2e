#include "dtype.h"

#include <string>

namespace ftllm {

std::optional<DType> parse_dtype(std::string_view name) {
  std::string n(name);
  for (char& c : n) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (n == "fp32" || n == "float" || n == "f32") return DType::F32;
  if (n == "fp16" || n == "half" || n == "f16") return DType::F16;
  if (n == "bf16") return DType::BF16;
  if (n == "int4g") return DType::I4G128;
  if (n == "float8" || n == "fp8_e4m3" || n == "e4m3") return DType::FP8;
  for (DType t : kAllDTypes)
    if (dtype_name(t) == n) return t;
  return std::nullopt;
}

}  // namespace ftllm
