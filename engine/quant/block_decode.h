// Every stored type decoded 32 values at a time, as code that compiles for the host and for CUDA
// devices alike: the CUDA matmul, embedding and dequantization kernels decode weights in registers
// with these, and the CPU tests check them against dequantize_row (quant.h), the reference. Unit u of a
// row is its values [32u, 32u + 32); rows start with their header (int8, int4) as dtype.h lays out.
#pragma once

#include <cmath>
#include <cstdint>

#include "../core/dtype.h"

#if defined(__CUDACC__)
#define FTLLM_HD __host__ __device__ __forceinline__
#else
#define FTLLM_HD inline
#endif

namespace ftllm::quant::decode {

// Every block start but MXFP4's (17 bytes, read bytewise) is 2-byte aligned and every float header
// 4-byte aligned (dtype.h's layouts).
FTLLM_HD uint16_t u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
FTLLM_HD float f32(const uint8_t* p) { return *reinterpret_cast<const float*>(p); }
FTLLM_HD uint32_t u32_bytes(const uint8_t* p) {  // any alignment
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

FTLLM_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return bits_float(u);
#endif
}

FTLLM_HD float half(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    const float v = float(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_to_float(sign | ((exp + 112) << 23) | (mant << 13));
}

FTLLM_HD float e4m3(uint8_t b) {
  const int e = (b >> 3) & 0xF, m = b & 7;
  float v;
  if (e == 15 && m == 7) v = bits_to_float(0x7fc00000u);
  else if (e == 0) v = float(m) * (1.0f / 512.0f);
  else v = bits_to_float(uint32_t(e + 120) << 23 | uint32_t(m) << 20);  // (8 + m) * 2^(e - 10)
  return (b & 0x80) ? -v : v;
}

// OCP e4m3 (bias 7, no infinities, 0x7f NaN, largest 448) of f: nearest even, saturating at +-448.
FTLLM_HD uint8_t encode_e4m3(float f) {
  if (f != f) return 0x7f;
  const uint8_t sign = (f < 0.0f || (f == 0.0f && 1.0f / f < 0.0f)) ? 0x80 : 0;
  const float a = fabsf(f);
  if (a >= 448.0f) return sign | 0x7e;
  int code;
  if (a < 0.015625f) {  // below 2^-6: subnormal steps of 2^-9; 8 is the smallest normal
    code = int(nearbyintf(a * 512.0f));
  } else {
    int e;
    frexpf(a, &e);  // a = f * 2^e, f in [0.5, 1): the biased exponent is e + 6
    const int mant = int(nearbyintf(ldexpf(a, 4 - e))) - 8;  // 3 mantissa bits, may carry into 8
    code = ((e + 6) << 3) + mant;
  }
  return uint8_t(sign | (code < 0x7e ? code : 0x7e));
}

// MXFP4 (OCP microscaling) as ggml computes it: an e2m1 code as twice its value (0, 1, 2, 3, 4, 6, 8, 12,
// the top bit the sign), so every value is an integer, and the e8m0 exponent e as 2^(e - 128), half its
// power of two, to make up for the doubling. Exponents 0 and 1 give subnormal floats (ggml's bits too).
FTLLM_HD int e2m1_doubled(int code) {
  const int m = code & 7;
  const int v = m < 4 ? m : (2 + (m & 1)) << ((m >> 1) - 1);
  return code & 8 ? -v : v;
}
FTLLM_HD float e8m0_half(uint8_t e) { return bits_to_float(e < 2 ? 0x00200000u << e : uint32_t(e - 1) << 23); }

// value j of each 32 in the low nibble of byte j, value j + 16 in the high one (ggml's Q4_0 order).
FTLLM_HD int nib(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; }

FTLLM_HD void scale_min_k4(int j, const uint8_t* q, int& d, int& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

#if defined(__CUDA_ARCH__)
// On the device the common types read their unit with 16- or 4-byte loads (a lane's 32 values in 2 to 8
// instructions instead of 32); the values are the same as the scalar code's below.
template <DType T>
__device__ __forceinline__ bool unit_wide(const uint8_t* row, int64_t u, float* y) {
  if constexpr (T == DType::F32 || T == DType::F16 || T == DType::BF16)  // rows of K % 8 != 0 values start unaligned
    if (reinterpret_cast<uintptr_t>(row) % 16) return false;
  if constexpr (T == DType::F32) {
    const float4* p = reinterpret_cast<const float4*>(row + u * 128);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float4 q = p[i];
      y[4 * i] = q.x, y[4 * i + 1] = q.y, y[4 * i + 2] = q.z, y[4 * i + 3] = q.w;
    }
    return true;
  } else if constexpr (T == DType::F16 || T == DType::BF16) {
    const uint4* p = reinterpret_cast<const uint4*>(row + u * 64);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint4 q = p[i];
      const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {  // little-endian: the even value in the low half
        if constexpr (T == DType::BF16) {
          y[8 * i + 2 * k] = __uint_as_float(w[k] << 16);
          y[8 * i + 2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
        } else {
          y[8 * i + 2 * k] = half(uint16_t(w[k] & 0xffffu));
          y[8 * i + 2 * k + 1] = half(uint16_t(w[k] >> 16));
        }
      }
    }
    return true;
  } else if constexpr (T == DType::I8) {
    const float scale = f32(row);
    const uint32_t* p = reinterpret_cast<const uint32_t*>(row + 4 + u * 32);  // rows are 4 + K bytes: 4-aligned
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t w = p[i];
#pragma unroll
      for (int k = 0; k < 4; ++k) y[4 * i + k] = scale * float(int8_t(uint8_t(w >> (8 * k))));
    }
    return true;
  } else if constexpr (T == DType::I4G32 || T == DType::I4G64 || T == DType::I4G128 || T == DType::I4G256) {
    constexpr int64_t g = dtype_layout(T).block_values;
    constexpr int64_t block = int64_t(dtype_layout(T).block_bytes);
    const uint8_t* b = row + (u * 32 / g) * block;
    const float scale = half(u16(b)), min = half(u16(b + 2));
    const uint32_t* p = reinterpret_cast<const uint32_t*>(b + 4 + (u % (g / 32)) * 16);  // blocks are 4-aligned
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = p[i];
#pragma unroll
      for (int k = 0; k < 4; ++k) {  // byte j = 4i + k: value j low, value j + 16 high
        const uint32_t byte = (w >> (8 * k)) & 0xffu;
        y[4 * i + k] = scale * float(byte & 0xF) + min;
        y[16 + 4 * i + k] = scale * float(byte >> 4) + min;
      }
    }
    return true;
  }
  return false;
}
#endif

// Q3_K's scale of run i (0-15) from its twelve packed bytes: the low four bits in a nibble of bytes 0-7, the
// top two in bytes 8-11; stored with 32 added.
FTLLM_HD int q3_k_scale(const uint8_t* scales, int i) {
  const int low = i < 8 ? scales[i] & 0xF : scales[i - 8] >> 4;
  const int high = (scales[8 + i % 4] >> (2 * (i / 4))) & 3;
  return (low | high << 4) - 32;
}

// Values [32u, 32u + 32) of a row of type T into y.
template <DType T>
FTLLM_HD void unit(const uint8_t* row, int64_t u, float* y) {
#if defined(__CUDA_ARCH__)
  if (unit_wide<T>(row, u, y)) return;
#endif
  if constexpr (T == DType::F32) {
    for (int j = 0; j < 32; ++j) y[j] = f32(row + (u * 32 + j) * 4);
  } else if constexpr (T == DType::F16) {
    for (int j = 0; j < 32; ++j) y[j] = half(u16(row + (u * 32 + j) * 2));
  } else if constexpr (T == DType::BF16) {
    for (int j = 0; j < 32; ++j) y[j] = bits_to_float(uint32_t(u16(row + (u * 32 + j) * 2)) << 16);
  } else if constexpr (T == DType::Q8_0) {
    const uint8_t* b = row + u * 34;
    const float d = half(u16(b));
    for (int j = 0; j < 32; ++j) y[j] = d * float(int8_t(b[2 + j]));
  } else if constexpr (T == DType::Q4_0) {
    const uint8_t* b = row + u * 18;
    const float d = half(u16(b));
    for (int j = 0; j < 32; ++j) y[j] = float(nib(b + 2, j) - 8) * d;
  } else if constexpr (T == DType::Q4_1) {
    const uint8_t* b = row + u * 20;
    const float d = half(u16(b)), m = half(u16(b + 2));
    for (int j = 0; j < 32; ++j) y[j] = d * float(nib(b + 4, j)) + m;
  } else if constexpr (T == DType::Q5_0) {
    const uint8_t* b = row + u * 22;
    const float d = half(u16(b));
    const uint32_t qh = u32_bytes(b + 2);
    for (int j = 0; j < 32; ++j) y[j] = float((nib(b + 6, j) | int((qh >> j) & 1) << 4) - 16) * d;
  } else if constexpr (T == DType::Q5_1) {
    const uint8_t* b = row + u * 24;
    const float d = half(u16(b)), m = half(u16(b + 2));
    const uint32_t qh = u32_bytes(b + 4);
    for (int j = 0; j < 32; ++j) y[j] = float(nib(b + 8, j) | int((qh >> j) & 1) << 4) * d + m;
  } else if constexpr (T == DType::Q2_K) {
    // 256 values in two halves of 128; a half's 32 bytes give four 2-bit planes (shifts 0, 2, 4, 6), each
    // plane two runs of 16 values with their own 4-bit scale and min.
    const uint8_t* b = row + (u / 8) * 84;
    const int s = int(u % 8), n = s / 4, shift = 2 * (s % 4);
    const float d = half(u16(b + 80)), dmin = half(u16(b + 82));
    const uint8_t* q = b + 16 + 32 * n;
    for (int h = 0; h < 2; ++h) {
      const uint8_t sc = b[n * 8 + (s % 4) * 2 + h];
      const float dl = d * float(sc & 0xF), ml = dmin * float(sc >> 4);
      for (int l = 0; l < 16; ++l) y[16 * h + l] = dl * float((q[l + 16 * h] >> shift) & 3) - ml;
    }
  } else if constexpr (T == DType::Q3_K) {
    const uint8_t* b = row + (u / 8) * 110;
    const int s = int(u % 8), n = s / 4, shift = 2 * (s % 4);
    const uint8_t* hmask = b;
    const uint8_t* q = b + 32 + 32 * n;
    const uint8_t* scales = b + 96;
    const float d = half(u16(b + 108));
    const uint8_t m = uint8_t(1u << (n * 4 + s % 4));
    for (int h = 0; h < 2; ++h) {
      const int i = n * 8 + (s % 4) * 2 + h;
      const float dl = d * float(q3_k_scale(scales, i));
      for (int l = 16 * h; l < 16 * h + 16; ++l) y[l] = dl * float(((q[l] >> shift) & 3) - ((hmask[l] & m) ? 0 : 4));
    }
  } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    constexpr int bytes = T == DType::Q4_K ? 144 : 176;
    const uint8_t* b = row + (u / 8) * bytes;
    const int j = int(u % 8);
    const float d = half(u16(b)), dmin = half(u16(b + 2));
    int sc, m;
    scale_min_k4(j, b + 4, sc, m);
    const float dl = d * float(sc), ml = dmin * float(m);
    const uint8_t* qh = T == DType::Q5_K ? b + 16 : nullptr;
    const uint8_t* q = b + (T == DType::Q4_K ? 16 : 48) + 32 * (j / 2);
    for (int l = 0; l < 32; ++l) {
      const int v = (j % 2 ? q[l] >> 4 : q[l] & 0xF) + (qh && (qh[l] >> j & 1) ? 16 : 0);
      y[l] = dl * float(v) - ml;
    }
  } else if constexpr (T == DType::Q6_K) {
    // Each half of 128 values: four runs of 32 (quarters r = 0..3) from ql's low/high nibbles and qh's
    // 2-bit fields; scales per 16 values.
    const uint8_t* b = row + (u / 8) * 210;
    const int s = int(u % 8), n = s / 4, r = s % 4;
    const uint8_t* ql = b + 64 * n;
    const uint8_t* qh = b + 128 + 32 * n;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * n;
    const float d = half(u16(b + 208));
    for (int l = 0; l < 32; ++l) {
      const uint8_t byte = ql[l + 32 * (r % 2)];
      const int lq = r < 2 ? byte & 0xF : byte >> 4;
      const int q = int(lq | ((qh[l] >> (2 * r)) & 3) << 4) - 32;
      y[l] = d * float(sc[l / 16 + 2 * r]) * float(q);
    }
  } else if constexpr (T == DType::I8) {
    const float scale = f32(row);
    for (int j = 0; j < 32; ++j) y[j] = scale * float(int8_t(row[4 + u * 32 + j]));
  } else if constexpr (T == DType::I4) {
    const float scale = f32(row), min = f32(row + 4);
    const uint8_t* qs = row + 8 + u * 16;
    for (int j = 0; j < 32; ++j) y[j] = scale * float(nib(qs, j)) + min;
  } else if constexpr (T == DType::I4G32 || T == DType::I4G64 || T == DType::I4G128 || T == DType::I4G256) {
    constexpr int64_t g = dtype_layout(T).block_values;
    constexpr int64_t block = int64_t(dtype_layout(T).block_bytes);
    const uint8_t* b = row + (u * 32 / g) * block;
    const float scale = half(u16(b)), min = half(u16(b + 2));
    const uint8_t* qs = b + 4 + (u % (g / 32)) * 16;
    for (int j = 0; j < 32; ++j) y[j] = scale * float(nib(qs, j)) + min;
  } else if constexpr (T == DType::FP8) {
    const uint8_t* b = row + (u / 4) * 132;
    const float scale = f32(b);
    const uint8_t* q = b + 4 + (u % 4) * 32;
    for (int j = 0; j < 32; ++j) y[j] = e4m3(q[j]) * scale;
  } else if constexpr (T == DType::MXFP4) {
    const uint8_t* b = row + u * 17;
    const float d = e8m0_half(b[0]);
    for (int j = 0; j < 32; ++j) y[j] = float(e2m1_doubled(nib(b + 1, j))) * d;
  }
}

// Calls f.template operator()<T>() for the runtime dtype t (host code): one switch, outside every loop.
template <typename F>
inline void with_dtype(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f.template operator()<DType::F32>();
    case DType::F16: return f.template operator()<DType::F16>();
    case DType::BF16: return f.template operator()<DType::BF16>();
    case DType::Q8_0: return f.template operator()<DType::Q8_0>();
    case DType::Q4_0: return f.template operator()<DType::Q4_0>();
    case DType::Q4_1: return f.template operator()<DType::Q4_1>();
    case DType::Q5_0: return f.template operator()<DType::Q5_0>();
    case DType::Q5_1: return f.template operator()<DType::Q5_1>();
    case DType::Q2_K: return f.template operator()<DType::Q2_K>();
    case DType::Q3_K: return f.template operator()<DType::Q3_K>();
    case DType::Q4_K: return f.template operator()<DType::Q4_K>();
    case DType::Q5_K: return f.template operator()<DType::Q5_K>();
    case DType::Q6_K: return f.template operator()<DType::Q6_K>();
    case DType::I8: return f.template operator()<DType::I8>();
    case DType::I4: return f.template operator()<DType::I4>();
    case DType::I4G32: return f.template operator()<DType::I4G32>();
    case DType::I4G64: return f.template operator()<DType::I4G64>();
    case DType::I4G128: return f.template operator()<DType::I4G128>();
    case DType::I4G256: return f.template operator()<DType::I4G256>();
    case DType::FP8: return f.template operator()<DType::FP8>();
    case DType::MXFP4: return f.template operator()<DType::MXFP4>();
  }
}

}  // namespace ftllm::quant::decode
