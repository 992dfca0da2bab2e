#include "kv_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../core/dtype.h"
#include "../quant/quant.h"

namespace ftllm::kvcache {

std::optional<KvDtype> parse_kv_dtype(std::string_view name) {
  for (KvDtype t : {KvDtype::F32, KvDtype::F16, KvDtype::BF16, KvDtype::Q8_0, KvDtype::FP8})
    if (name == kv_dtype_name(t)) return t;
  return std::nullopt;
}

std::string_view kv_dtype_name(KvDtype t) {
  switch (t) {
    case KvDtype::F32: return "f32";
    case KvDtype::F16: return "f16";
    case KvDtype::BF16: return "bf16";
    case KvDtype::Q8_0: return "q8_0";
    case KvDtype::FP8: return "fp8";
  }
  return "?";
}

void kv_store_head(KvDtype t, const float* x, int64_t d, uint8_t* out) {
  auto amax = [](const float* v, int64_t n) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(v[i]));
    return m;
  };
  switch (t) {
    case KvDtype::F32:
      std::memcpy(out, x, size_t(d) * 4);
      return;
    case KvDtype::F16:
    case KvDtype::BF16:
      for (int64_t i = 0; i < d; ++i) {
        const uint16_t h = t == KvDtype::F16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case KvDtype::Q8_0:
      for (int64_t b = 0; b < d / 32; ++b, x += 32, out += 34) {
        const float scale = amax(x, 32) / 127.0f, inverse = scale ? 1.0f / scale : 0.0f;
        const uint16_t h = f32_to_f16(scale);
        std::memcpy(out, &h, 2);
        for (int i = 0; i < 32; ++i) out[2 + i] = uint8_t(int8_t(std::round(x[i] * inverse)));
      }
      return;
    case KvDtype::FP8: {
      const float scale = amax(x, d) / 448.0f, inverse = scale ? 1.0f / scale : 0.0f;
      std::memcpy(out, &scale, 4);
      for (int64_t i = 0; i < d; ++i) out[4 + i] = quant::f32_to_e4m3(x[i] * inverse);
      return;
    }
  }
}

}  // namespace ftllm::kvcache
