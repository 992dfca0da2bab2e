// GGUF (ggml) block formats and their reference dequantisation, bit-exact with gguf-py's (which
// transformers uses): the value is d * q (+ m), computed in float32 from the block's float16 scales.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace ftllm::quant {

// ggml's type ids as stored in GGUF tensor infos.
enum class GgmlType : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q8_0 = 8, BF16 = 30 };

struct BlockQ4_0 {
  uint16_t d;  // float16 scale
  uint8_t qs[16];
};
struct BlockQ4_1 {
  uint16_t d, m;  // float16 scale and minimum
  uint8_t qs[16];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ8_0) == 34);

struct GgmlTypeInfo {
  const char* name;
  int64_t block_values;  // elements per block
  size_t block_bytes;
};

// Known types the engine can read; nullopt for the rest.
std::optional<GgmlTypeInfo> ggml_type_info(uint32_t type);
std::string ggml_type_name(uint32_t type);  // "Q4_1", or "type 14" for unknown ones

// Dequantises n elements (a multiple of the block size) to float32.
void dequantize(uint32_t type, const void* src, float* dst, int64_t n);

}  // namespace ftllm::quant
