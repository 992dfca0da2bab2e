// __nv_bfloat16 for the simulator: the upper half of a float32, rounded to nearest even, NaNs kept quiet.
#pragma once

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  uint16_t bits;
};

inline float __bfloat162float(__nv_bfloat16 b) {
  const uint32_t u = uint32_t(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  __nv_bfloat16 b;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    b.bits = uint16_t((u >> 16) | 0x40u);  // NaN: stays a (quiet) NaN
  } else {
    const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    b.bits = uint16_t((u + rounding) >> 16);
  }
  return b;
}
inline __nv_bfloat16 __float2bfloat16(float v) { return __float2bfloat16_rn(v); }
