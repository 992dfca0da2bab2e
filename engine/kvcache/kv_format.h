// How the KV cache stores a head's row of d values (--kv_dtype), as code for the host and CUDA devices
// alike: attention reads the stored type directly, one value at a time (kv_value) or eight (the AVX2
// kernels), never through a widened copy.
//   f32, f16, bf16   d values
//   q8_0             ggml's Q8_0 (llama.cpp's --cache-type q8_0): per 32 values an f16 scale and 32 int8,
//                    scale = max|x| / 127, q = round(x / scale); d must be a multiple of 32
//   fp8              an f32 scale then d e4m3 bytes, scale = max|x| / 448 over the head's row
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "../quant/block_decode.h"

namespace ftllm::kvcache {

enum class KvDtype : uint8_t { F32, F16, BF16, Q8_0, FP8 };

FTLLM_HD int64_t kv_head_bytes(KvDtype t, int64_t d) {
  switch (t) {
    case KvDtype::F32: return 4 * d;
    case KvDtype::F16:
    case KvDtype::BF16: return 2 * d;
    case KvDtype::Q8_0: return d / 32 * 34;
    case KvDtype::FP8: return 4 + d;
  }
  return 0;
}

// Value i of a head's row.
FTLLM_HD float kv_value(KvDtype t, const uint8_t* head, int64_t i) {
  using namespace quant::decode;
  switch (t) {
    case KvDtype::F32: return f32(head + 4 * i);
    case KvDtype::F16: return half(u16(head + 2 * i));
    case KvDtype::BF16: return bits_to_float(uint32_t(u16(head + 2 * i)) << 16);
    case KvDtype::Q8_0: {
      const uint8_t* block = head + i / 32 * 34;
      return half(u16(block)) * float(int8_t(block[2 + i % 32]));
    }
    case KvDtype::FP8: return f32(head) * e4m3(head[4 + i]);
  }
  return 0.0f;
}

// Every head's row starts 4-byte aligned (the pages' rows are whole 32-bit words) when this holds.
constexpr bool kv_fits(KvDtype t, int64_t d) {
  return t == KvDtype::Q8_0 ? d % 32 == 0 : t == KvDtype::F32 ? true : t == KvDtype::FP8 ? d % 4 == 0 : d % 2 == 0;
}

std::optional<KvDtype> parse_kv_dtype(std::string_view name);
std::string_view kv_dtype_name(KvDtype t);

// A head's row of d floats stored as t (the reference every device's store is checked against).
void kv_store_head(KvDtype t, const float* x, int64_t d, uint8_t* out);

}  // namespace ftllm::kvcache
