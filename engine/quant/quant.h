// Reference quantisation: every stored type back to float32 (the oracle the kernels are tested
// against and the path embeddings take), and our own formats made from float32 while loading.
#pragma once

#include <cstdint>

#include "../core/dtype.h"

namespace ftllm::quant {

// One row of k values (a multiple of the type's block) to float32. ggml's types follow ggml's
// reference code operation for operation (float32 products of the float16 scales, then the sum).
void dequantize_row(DType t, const void* row, float* out, int64_t k);

// One row of k float32 values into `out` (row_bytes(t, k) bytes). For t in int8, int4, int4gN and
// fp8 and the float types; the scale is chosen from the row's (or group's) range:
//   int8   scale = max|x| / 127,          q = round(x / scale) in [-127, 127]
//   int4*  scale = (max - min) / 15,      q = round((x - min) / scale) in [0, 15]
//   fp8    scale = max|x| / 448 per 128,  q = e4m3(x / scale), rounded to nearest even
//   mxfp4  as ggml and gguf-py: a power of two per 32, the nearest e2m1 code (quant.cpp)
bool can_quantize_to(DType t);
void quantize_row(DType t, const float* x, int64_t k, void* out);

// OCP float8 e4m3 (bias 7, no infinities, 0x7f/0xff NaN, largest 448), as torch.float8_e4m3fn.
float e4m3_to_f32(uint8_t b);
uint8_t f32_to_e4m3(float f);  // nearest even, saturating at +-448

// The int4 formats store value j of each 32 in the low nibble of byte j and value j + 16 in the high
// nibble, as ggml's Q4_0 does, so the same unpacking serves all of them.
inline int nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; }

}  // namespace ftllm::quant
