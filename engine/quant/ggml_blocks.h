// GGUF (ggml) block formats: their type ids and block layouts. Each block holds 32 or 256 values as
// small integers with float16 scales; quant.h dequantises them bit-exactly as ggml's reference code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "../core/dtype.h"

namespace ftllm::quant {

struct BlockQ8_0 {
  uint16_t d;  // float16 scale
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];  // byte j: value j in the low nibble, value j + 16 in the high one
};
struct BlockQ4_1 {
  uint16_t d, m;  // scale and minimum
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // fifth bits, value j at bit j
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
// K-quants: super-blocks of 256 values in sub-blocks of 16 or 32 with quantized sub-block scales.
struct BlockQ2_K {
  uint8_t scales[16];  // per 16 values: scale (low nibble) and min (high nibble)
  uint8_t qs[64];
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];  // 16 six-bit scales
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];  // 8 six-bit scales and 8 six-bit mins
  uint8_t qs[128];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};

// MXFP4: 32 e2m1 values sharing a power-of-two scale (block_decode.h: e2m1_doubled, e8m0_half).
struct BlockMXFP4 {
  uint8_t e;       // e8m0 exponent
  uint8_t qs[16];  // value j in the low nibble of byte j, value j + 16 in the high one (Q4_0's order)
};

// ggml's type id (as GGUF tensor infos store it) as our DType; nullopt for types we cannot read.
std::optional<DType> dtype_of_ggml(uint32_t type);
std::string ggml_type_name(uint32_t type);  // "Q4_K", or "type 23" for unknown ones

}  // namespace ftllm::quant
