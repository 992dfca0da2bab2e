#include "quant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "block_decode.h"
#include "ggml_blocks.h"

namespace ftllm::quant {

namespace {

float h2f(uint16_t h) { return f16_to_f32(h); }

template <typename Block>
const Block* blocks(const void* row) {
  return static_cast<const Block*>(row);
}

void q8_0(const void* row, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += 32) {
    const BlockQ8_0& x = blocks<BlockQ8_0>(row)[b];
    const float d = h2f(x.d);
    for (int j = 0; j < 32; ++j) y[j] = d * float(x.qs[j]);
  }
}

void q4_0(const void* row, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += 32) {
    const BlockQ4_0& x = blocks<BlockQ4_0>(row)[b];
    const float d = h2f(x.d);
    for (int j = 0; j < 32; ++j) y[j] = float(nibble(x.qs, j) - 8) * d;
  }
}

void q4_1(const void* row, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += 32) {
    const BlockQ4_1& x = blocks<BlockQ4_1>(row)[b];
    const float d = h2f(x.d), m = h2f(x.m);
    // Two roundings (product, then sum), never a fused multiply-add.
    for (int j = 0; j < 32; ++j) {
      const float p = d * float(nibble(x.qs, j));
      y[j] = p + m;
    }
  }
}

void q5_0(const void* row, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += 32) {
    const BlockQ5_0& x = blocks<BlockQ5_0>(row)[b];
    const float d = h2f(x.d);
    uint32_t qh;
    std::memcpy(&qh, x.qh, 4);
    for (int j = 0; j < 32; ++j) y[j] = float((nibble(x.qs, j) | int((qh >> j) & 1) << 4) - 16) * d;
  }
}

void q5_1(const void* row, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += 32) {
    const BlockQ5_1& x = blocks<BlockQ5_1>(row)[b];
    const float d = h2f(x.d), m = h2f(x.m);
    uint32_t qh;
    std::memcpy(&qh, x.qh, 4);
    for (int j = 0; j < 32; ++j) {
      const float p = float(nibble(x.qs, j) | int((qh >> j) & 1) << 4) * d;
      y[j] = p + m;
    }
  }
}

void q2_k(const void* row, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ2_K& x = blocks<BlockQ2_K>(row)[b];
    const float d = h2f(x.d), dmin = h2f(x.dmin);
    const uint8_t* q = x.qs;
    int is = 0;
    for (int n = 0; n < 256; n += 128, q += 32)
      for (int shift = 0; shift < 8; shift += 2)
        for (int half = 0; half < 2; ++half) {
          const uint8_t sc = x.scales[is++];
          const float dl = d * float(sc & 0xF), ml = dmin * float(sc >> 4);
          for (int l = 0; l < 16; ++l) {
            const float p = dl * float((q[l + 16 * half] >> shift) & 3);
            *y++ = p - ml;
          }
        }
  }
}

void q3_k(const void* row, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ3_K& x = blocks<BlockQ3_K>(row)[b];
    const float d = h2f(x.d);
    // 16 six-bit scales: low four bits in bytes 0-7 (two per byte), high two bits in bytes 8-11.
    int8_t scales[16];
    for (int i = 0; i < 16; ++i) {
      const int low = i < 8 ? x.scales[i] & 0xF : x.scales[i - 8] >> 4;
      const int high = (x.scales[8 + i % 4] >> (2 * (i / 4))) & 3;
      scales[i] = int8_t((low | high << 4) - 32);
    }
    const uint8_t* q = x.qs;
    uint8_t m = 1;
    int is = 0;
    for (int n = 0; n < 256; n += 128, q += 32)
      for (int shift = 0; shift < 8; shift += 2, m = uint8_t(m << 1))
        for (int half = 0; half < 2; ++half) {
          const float dl = d * float(scales[is++]);
          for (int l = 16 * half; l < 16 * half + 16; ++l)
            *y++ = dl * float(((q[l] >> shift) & 3) - ((x.hmask[l] & m) ? 0 : 4));
        }
  }
}

// Q4_K / Q5_K: scale and min j (of 8) from the 12 packed bytes.
void scale_min_k4(int j, const uint8_t* q, uint8_t& d, uint8_t& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// One Q4_K or Q5_K super-block: sub-block j holds the low (even j) or high (odd j) nibbles of a 32-byte
// run, plus bit j of each qh byte worth 16 for Q5_K (qh null for Q4_K); value = d * sc_j * q - dmin * m_j.
void k_quant_values(float d, float dmin, const uint8_t* scales, const uint8_t* qs, const uint8_t* qh, float* y) {
  for (int j = 0; j < 8; ++j, y += 32) {
    uint8_t sc, m;
    scale_min_k4(j, scales, sc, m);
    const float dl = d * float(sc), ml = dmin * float(m);
    const uint8_t* q = qs + 32 * (j / 2);
    for (int l = 0; l < 32; ++l) {
      const int nib = j % 2 ? q[l] >> 4 : q[l] & 0xF;
      const float p = dl * float(nib + (qh && (qh[l] >> j & 1) ? 16 : 0));
      y[l] = p - ml;
    }
  }
}

void q4_k(const void* row, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += 256) {
    const BlockQ4_K& x = blocks<BlockQ4_K>(row)[b];
    k_quant_values(h2f(x.d), h2f(x.dmin), x.scales, x.qs, nullptr, y);
  }
}

void q5_k(const void* row, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += 256) {
    const BlockQ5_K& x = blocks<BlockQ5_K>(row)[b];
    k_quant_values(h2f(x.d), h2f(x.dmin), x.scales, x.qs, x.qh, y);
  }
}

void q6_k(const void* row, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ6_K& x = blocks<BlockQ6_K>(row)[b];
    const float d = h2f(x.d);
    const uint8_t* ql = x.ql;
    const uint8_t* qh = x.qh;
    const int8_t* sc = x.scales;
    for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = int((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
        const int q2 = int((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
        const int q3 = int((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
        const int q4 = int((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
        y[l] = d * float(sc[is]) * float(q1);
        y[l + 32] = d * float(sc[is + 2]) * float(q2);
        y[l + 64] = d * float(sc[is + 4]) * float(q3);
        y[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
  }
}

// int4 with one scale and minimum for `n` values (a multiple of 32).
void int4_values(const uint8_t* qs, float scale, float min, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, qs += 16, y += 32)
    for (int j = 0; j < 32; ++j) y[j] = scale * float(nibble(qs, j)) + min;
}

// The int4 code of each of n values for one scale and minimum.
void int4_codes(const float* x, float scale, float min, uint8_t* qs, int64_t n) {
  const float inv = scale > 0 ? 1.0f / scale : 0.0f;
  for (int64_t b = 0; b < n / 32; ++b, qs += 16, x += 32)
    for (int j = 0; j < 16; ++j) {
      auto code = [&](float v) { return uint8_t(std::clamp(int(std::nearbyint((v - min) * inv)), 0, 15)); };
      qs[j] = uint8_t(code(x[j]) | code(x[j + 16]) << 4);
    }
}

void min_max(const float* x, int64_t n, float& lo, float& hi) {
  lo = hi = x[0];
  for (int64_t i = 1; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
}

float abs_max(const float* x, int64_t n) {
  float a = 0;
  for (int64_t i = 0; i < n; ++i) a = std::max(a, std::fabs(x[i]));
  return a;
}

int64_t group_of(DType t) { return dtype_layout(t).block_values; }

// As ggml and gguf-py quantize MXFP4: the exponent puts the block's largest magnitude in [8, 16) times
// the half scale (so values above 12 of those steps clip to 12), then each value takes the nearest code,
// the first of equals. The exponent is exact floor(log2(amax)) here (numpy's float32 log2 can round up
// just below a power of two; no other value differs).
void mxfp4_block(const float* x, uint8_t* out) {
  const float amax = abs_max(x, 32);
  int e = 0;
  if (amax > 0) {
    int exp2;
    std::frexp(amax, &exp2);  // amax = f * 2^exp2, f in [0.5, 1): floor(log2(amax)) = exp2 - 1
    e = std::clamp(exp2 - 1 - 2 + 127, 0, 254);
  }
  out[0] = uint8_t(e);
  const float d = decode::e8m0_half(uint8_t(e));
  std::memset(out + 1, 0, 16);
  for (int j = 0; j < 32; ++j) {
    int best = 0;
    float best_err = std::fabs(d * float(decode::e2m1_doubled(0)) - x[j]);
    for (int c = 1; c < 16; ++c) {
      const float err = std::fabs(d * float(decode::e2m1_doubled(c)) - x[j]);
      if (err < best_err) best = c, best_err = err;
    }
    out[1 + j % 16] |= uint8_t(best << (j < 16 ? 0 : 4));
  }
}

}  // namespace

float e4m3_to_f32(uint8_t b) {
  const int e = (b >> 3) & 0xF, m = b & 7;
  float v;
  if (e == 15 && m == 7) v = std::nanf("");
  else if (e == 0) v = std::ldexp(float(m), -9);
  else v = std::ldexp(float(8 + m), e - 10);
  return (b & 0x80) ? -v : v;
}

uint8_t f32_to_e4m3(float f) { return decode::encode_e4m3(f); }

void dequantize_row(DType t, const void* row, float* y, int64_t k) {
  const int64_t nb = k / dtype_layout(t).block_values;
  const auto* bytes = static_cast<const uint8_t*>(row);
  switch (t) {
    case DType::F32: std::memcpy(y, row, size_t(k) * 4); return;
    case DType::F16:
      for (int64_t i = 0; i < k; ++i) y[i] = f16_to_f32(static_cast<const uint16_t*>(row)[i]);
      return;
    case DType::BF16:
      for (int64_t i = 0; i < k; ++i) y[i] = bf16_to_f32(static_cast<const uint16_t*>(row)[i]);
      return;
    case DType::Q8_0: return q8_0(row, y, nb);
    case DType::Q4_0: return q4_0(row, y, nb);
    case DType::Q4_1: return q4_1(row, y, nb);
    case DType::Q5_0: return q5_0(row, y, nb);
    case DType::Q5_1: return q5_1(row, y, nb);
    case DType::Q2_K: return q2_k(row, y, nb);
    case DType::Q3_K: return q3_k(row, y, nb);
    case DType::Q4_K: return q4_k(row, y, nb);
    case DType::Q5_K: return q5_k(row, y, nb);
    case DType::Q6_K: return q6_k(row, y, nb);
    case DType::I8: {
      float scale;
      std::memcpy(&scale, bytes, 4);
      for (int64_t i = 0; i < k; ++i) y[i] = scale * float(int8_t(bytes[4 + i]));
      return;
    }
    case DType::I4: {
      float scale, min;
      std::memcpy(&scale, bytes, 4);
      std::memcpy(&min, bytes + 4, 4);
      return int4_values(bytes + 8, scale, min, y, k);
    }
    case DType::I4G32:
    case DType::I4G64:
    case DType::I4G128:
    case DType::I4G256: {
      const int64_t g = group_of(t);
      const size_t block = dtype_layout(t).block_bytes;
      for (int64_t b = 0; b < nb; ++b, bytes += block, y += g) {
        uint16_t h[2];
        std::memcpy(h, bytes, 4);
        int4_values(bytes + 4, f16_to_f32(h[0]), f16_to_f32(h[1]), y, g);
      }
      return;
    }
    case DType::MXFP4:
      for (int64_t b = 0; b < nb; ++b, y += 32) decode::unit<DType::MXFP4>(bytes, b, y);
      return;
    case DType::FP8: {
      static const auto table = [] {  // every code's value, so the row loop is a lookup
        std::array<float, 256> t{};
        for (int c = 0; c < 256; ++c) t[size_t(c)] = e4m3_to_f32(uint8_t(c));
        return t;
      }();
      for (int64_t b = 0; b < nb; ++b, bytes += 132, y += 128) {
        float scale;
        std::memcpy(&scale, bytes, 4);
        for (int j = 0; j < 128; ++j) y[j] = table[bytes[4 + j]] * scale;
      }
      return;
    }
  }
}

bool can_quantize_to(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::I8: case DType::I4: case DType::I4G32:
    case DType::I4G64: case DType::I4G128: case DType::I4G256: case DType::FP8: case DType::MXFP4:
      return true;
    default:
      return false;
  }
}

void quantize_row(DType t, const float* x, int64_t k, void* out) {
  auto* bytes = static_cast<uint8_t*>(out);
  switch (t) {
    case DType::F32: std::memcpy(out, x, size_t(k) * 4); return;
    case DType::F16:
      for (int64_t i = 0; i < k; ++i) static_cast<uint16_t*>(out)[i] = f32_to_f16(x[i]);
      return;
    case DType::BF16:
      for (int64_t i = 0; i < k; ++i) static_cast<uint16_t*>(out)[i] = f32_to_bf16(x[i]);
      return;
    case DType::I8: {
      const float scale = abs_max(x, k) / 127.0f, inv = scale > 0 ? 1.0f / scale : 0.0f;
      std::memcpy(bytes, &scale, 4);
      for (int64_t i = 0; i < k; ++i)
        bytes[4 + i] = uint8_t(int8_t(std::clamp(int(std::nearbyint(x[i] * inv)), -127, 127)));
      return;
    }
    case DType::I4: {
      float lo, hi;
      min_max(x, k, lo, hi);
      const float scale = (hi - lo) / 15.0f;
      std::memcpy(bytes, &scale, 4);
      std::memcpy(bytes + 4, &lo, 4);
      return int4_codes(x, scale, lo, bytes + 8, k);
    }
    case DType::I4G32:
    case DType::I4G64:
    case DType::I4G128:
    case DType::I4G256: {
      const int64_t g = group_of(t);
      const size_t block = dtype_layout(t).block_bytes;
      for (int64_t b = 0; b < k / g; ++b, bytes += block, x += g) {
        float lo, hi;
        min_max(x, g, lo, hi);
        // Codes are chosen against the float16 values that will be stored, not the exact ones.
        const uint16_t min_h = f32_to_f16(lo);
        const float min = f16_to_f32(min_h);
        const uint16_t scale_h = f32_to_f16((hi - min) / 15.0f);
        const uint16_t h[2] = {scale_h, min_h};
        std::memcpy(bytes, h, 4);
        int4_codes(x, f16_to_f32(scale_h), min, bytes + 4, g);
      }
      return;
    }
    case DType::FP8:
      for (int64_t b = 0; b < k / 128; ++b, bytes += 132, x += 128) {
        const float scale = abs_max(x, 128) / 448.0f, inv = scale > 0 ? 1.0f / scale : 0.0f;
        std::memcpy(bytes, &scale, 4);
        for (int j = 0; j < 128; ++j) bytes[4 + j] = f32_to_e4m3(x[j] * inv);
      }
      return;
    case DType::MXFP4:
      for (int64_t b = 0; b < k / 32; ++b, bytes += 17, x += 32) mxfp4_block(x, bytes);
      return;
    default:
      return;  // can_quantize_to(t) is false: callers check first
  }
}

}  // namespace ftllm::quant
