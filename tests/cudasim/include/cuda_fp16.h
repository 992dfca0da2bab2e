// __half for the simulator: IEEE binary16 through GCC's _Float16, whose conversions round to nearest
// even as the device's __float2half_rn does.
#pragma once

#include <cstdint>
#include <cstring>

struct __half {
  uint16_t bits;
};

inline float __half2float(__half h) {
  _Float16 f;
  std::memcpy(&f, &h.bits, 2);
  return float(f);
}
inline __half __float2half_rn(float v) {
  const _Float16 f = static_cast<_Float16>(v);
  __half h;
  std::memcpy(&h.bits, &f, 2);
  return h;
}
inline __half __float2half(float v) { return __float2half_rn(v); }
