#include "ggml_blocks.h"

#include <cstring>

#include "../core/dtype.h"

namespace ftllm::quant {

std::optional<GgmlTypeInfo> ggml_type_info(uint32_t type) {
  switch (GgmlType(type)) {
    case GgmlType::F32: return GgmlTypeInfo{"F32", 1, 4};
    case GgmlType::F16: return GgmlTypeInfo{"F16", 1, 2};
    case GgmlType::BF16: return GgmlTypeInfo{"BF16", 1, 2};
    case GgmlType::Q4_0: return GgmlTypeInfo{"Q4_0", 32, sizeof(BlockQ4_0)};
    case GgmlType::Q4_1: return GgmlTypeInfo{"Q4_1", 32, sizeof(BlockQ4_1)};
    case GgmlType::Q8_0: return GgmlTypeInfo{"Q8_0", 32, sizeof(BlockQ8_0)};
  }
  return std::nullopt;
}

std::string ggml_type_name(uint32_t type) {
  auto info = ggml_type_info(type);
  return info ? info->name : "type " + std::to_string(type);
}

void dequantize(uint32_t type, const void* src, float* dst, int64_t n) {
  switch (GgmlType(type)) {
    case GgmlType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(static_cast<const uint16_t*>(src)[i]);
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(static_cast<const uint16_t*>(src)[i]);
      return;
    case GgmlType::Q4_0:
      for (int64_t b = 0; b < n / 32; ++b) {
        const BlockQ4_0& blk = static_cast<const BlockQ4_0*>(src)[b];
        const float d = f16_to_f32(blk.d);
        for (int j = 0; j < 16; ++j) {
          dst[b * 32 + j] = float(int(blk.qs[j] & 0xF) - 8) * d;
          dst[b * 32 + j + 16] = float(int(blk.qs[j] >> 4) - 8) * d;
        }
      }
      return;
    case GgmlType::Q4_1:
      for (int64_t b = 0; b < n / 32; ++b) {
        const BlockQ4_1& blk = static_cast<const BlockQ4_1*>(src)[b];
        const float d = f16_to_f32(blk.d), m = f16_to_f32(blk.m);
        for (int j = 0; j < 16; ++j) {
          // Two roundings (product, then sum), as gguf-py computes it; never a fused multiply-add.
          const float lo = d * float(blk.qs[j] & 0xF), hi = d * float(blk.qs[j] >> 4);
          dst[b * 32 + j] = lo + m;
          dst[b * 32 + j + 16] = hi + m;
        }
      }
      return;
    case GgmlType::Q8_0:
      for (int64_t b = 0; b < n / 32; ++b) {
        const BlockQ8_0& blk = static_cast<const BlockQ8_0*>(src)[b];
        const float d = f16_to_f32(blk.d);
        for (int j = 0; j < 32; ++j) dst[b * 32 + j] = d * float(blk.qs[j]);
      }
      return;
  }
}

}  // namespace ftllm::quant
