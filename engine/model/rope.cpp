#include "rope.h"

#include <cmath>

namespace ftllm::model {

std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  const float base = float(rope.theta);
  for (int64_t i = 0; i < half; ++i) inv[size_t(i)] = 1.0f / std::pow(base, float(2 * i) / float(head_dim));

  if (rope.type == RopeType::Linear) {
    for (float& f : inv) f /= float(rope.factor);
  } else if (rope.type == RopeType::Llama3) {
    // Long wavelengths are slowed by `factor`, short ones kept, the band between blended smoothly.
    const float factor = float(rope.factor), lo = float(rope.low_freq_factor), hi = float(rope.high_freq_factor);
    const float old_len = float(rope.original_max_position_embeddings);
    const float low_freq_wavelen = old_len / lo, high_freq_wavelen = old_len / hi;
    const float two_pi = 2.0f * float(M_PI);
    for (float& f : inv) {
      const float wavelen = two_pi / f;
      float scaled = wavelen > low_freq_wavelen ? f / factor : f;
      const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      if (medium) {
        const float smooth = (old_len / wavelen - lo) / (hi - lo);
        scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
      }
      f = scaled;
    }
  }
  return inv;
}

void rope_tables(const std::vector<float>& inv_freq, std::span<const int64_t> positions, Tensor& cos, Tensor& sin) {
  const int64_t half = int64_t(inv_freq.size());
  for (size_t t = 0; t < positions.size(); ++t)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = float(positions[t]) * inv_freq[size_t(i)];  // a float32 product, as torch forms it
      cos.as<float>()[int64_t(t) * half + i] = float(std::cos(double(angle)));
      sin.as<float>()[int64_t(t) * half + i] = float(std::sin(double(angle)));
    }
}

}  // namespace ftllm::model
