#include "ggml_blocks.h"

namespace ftllm::quant {

static_assert(sizeof(BlockQ8_0) == dtype_layout(DType::Q8_0).block_bytes);
static_assert(sizeof(BlockQ4_0) == dtype_layout(DType::Q4_0).block_bytes);
static_assert(sizeof(BlockQ4_1) == dtype_layout(DType::Q4_1).block_bytes);
static_assert(sizeof(BlockQ5_0) == dtype_layout(DType::Q5_0).block_bytes);
static_assert(sizeof(BlockQ5_1) == dtype_layout(DType::Q5_1).block_bytes);
static_assert(sizeof(BlockQ2_K) == dtype_layout(DType::Q2_K).block_bytes);
static_assert(sizeof(BlockQ3_K) == dtype_layout(DType::Q3_K).block_bytes);
static_assert(sizeof(BlockQ4_K) == dtype_layout(DType::Q4_K).block_bytes);
static_assert(sizeof(BlockQ5_K) == dtype_layout(DType::Q5_K).block_bytes);
static_assert(sizeof(BlockQ6_K) == dtype_layout(DType::Q6_K).block_bytes);
static_assert(sizeof(BlockMXFP4) == dtype_layout(DType::MXFP4).block_bytes);

namespace {

struct Known {
  uint32_t id;
  const char* name;
  DType dtype;
};
constexpr Known kKnown[] = {
    {0, "F32", DType::F32},    {1, "F16", DType::F16},    {2, "Q4_0", DType::Q4_0},  {3, "Q4_1", DType::Q4_1},
    {6, "Q5_0", DType::Q5_0},  {7, "Q5_1", DType::Q5_1},  {8, "Q8_0", DType::Q8_0},  {10, "Q2_K", DType::Q2_K},
    {11, "Q3_K", DType::Q3_K}, {12, "Q4_K", DType::Q4_K}, {13, "Q5_K", DType::Q5_K}, {14, "Q6_K", DType::Q6_K},
    {30, "BF16", DType::BF16}, {39, "MXFP4", DType::MXFP4},
};

}  // namespace

std::optional<DType> dtype_of_ggml(uint32_t type) {
  for (const Known& k : kKnown)
    if (k.id == type) return k.dtype;
  return std::nullopt;
}

std::string ggml_type_name(uint32_t type) {
  for (const Known& k : kKnown)
    if (k.id == type) return k.name;
  // Names of the ggml types we do not read, so an error can say which one a file uses.
  static const char* const kOthers[] = {nullptr, nullptr, nullptr, nullptr, "Q4_2", "Q4_3", nullptr, nullptr, nullptr,
                                        "Q8_1", nullptr, nullptr, nullptr, nullptr, nullptr, "Q8_K", "IQ2_XXS",
                                        "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8",
                                        "I16", "I32", "I64", "F64", "IQ1_M", nullptr, "Q4_0_4_4", "Q4_0_4_8",
                                        "Q4_0_8_8", "TQ1_0", "TQ2_0"};
  if (type < std::size(kOthers) && kOthers[type]) return kOthers[type];
  return "type " + std::to_string(type);
}

}  // namespace ftllm::quant
