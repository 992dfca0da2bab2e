#include "rope.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "../core/error.h"

namespace ftllm::model {

std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim, bool long_factors) {
  head_dim = rope.rotary_dim(head_dim);  // the rotated part of a head
  const int64_t half = head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  const float base = float(rope.theta);
  for (int64_t i = 0; i < half; ++i) inv[size_t(i)] = 1.0f / std::pow(base, float(2 * i) / float(head_dim));

  if (rope.type == RopeType::LongRope) {
    const std::vector<double>& ext = long_factors ? rope.long_factor : rope.short_factor;
    if (int64_t(ext.size()) != half)
      throw EngineError("longrope: " + std::to_string(ext.size()) + " factors for " + std::to_string(half) + " rotary frequencies");
    for (int64_t i = 0; i < half; ++i)
      inv[size_t(i)] = 1.0f / (float(ext[size_t(i)]) * std::pow(base, float(2 * i) / float(head_dim)));
  } else if (rope.type == RopeType::Linear) {
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
  } else if (rope.type == RopeType::Yarn) {
    // Dimensions rotating fewer than beta_slow times over the pretrained context are interpolated (slowed
    // by factor), those rotating more than beta_fast times kept, a linear ramp between.
    const double dim = double(head_dim), base = rope.theta, old_len = double(rope.original_max_position_embeddings);
    auto correction_dim = [&](double rotations) {
      return dim * std::log(old_len / (rotations * 2 * M_PI)) / (2 * std::log(base));
    };
    double low = correction_dim(rope.beta_fast), high = correction_dim(rope.beta_slow);
    if (rope.truncate) low = std::floor(low), high = std::ceil(high);
    low = std::max(low, 0.0), high = std::min(high, dim - 1);
    if (low == high) high += 0.001;
    for (int64_t i = 0; i < half; ++i) {
      const float ramp = std::clamp((float(i) - float(low)) / float(high - low), 0.0f, 1.0f);
      const float pos_freq = std::pow(float(base), float(2 * i) / float(head_dim));
      const float extrapolation = 1.0f - ramp, extrapolated = 1.0f / pos_freq, interpolated = 1.0f / (float(rope.factor) * pos_freq);
      inv[size_t(i)] = interpolated * (1.0f - extrapolation) + extrapolated * extrapolation;
    }
  }
  return inv;
}

namespace {
double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }
}  // namespace

float rope_attention_factor(const RopeConfig& rope) {
  if (rope.type == RopeType::LongRope) {
    if (rope.attention_factor > 0) return float(rope.attention_factor);
    if (rope.factor <= 1) return 1.0f;
    return float(std::sqrt(1 + std::log(rope.factor) / std::log(double(rope.original_max_position_embeddings))));
  }
  if (rope.type != RopeType::Yarn) return 1.0f;
  if (rope.attention_factor > 0) return float(rope.attention_factor);
  if (rope.mscale != 0 && rope.mscale_all_dim != 0)
    return float(yarn_mscale(rope.factor, rope.mscale) / yarn_mscale(rope.factor, rope.mscale_all_dim));
  return float(yarn_mscale(rope.factor, 1.0));
}

float yarn_softmax_scale(const RopeConfig& rope) {
  if (rope.type == RopeType::Default || rope.mscale_all_dim == 0) return 1.0f;
  const double m = yarn_mscale(rope.factor, rope.mscale_all_dim);
  return float(m * m);
}

void rope_tables(const std::vector<float>& inv_freq, std::span<const int64_t> positions, Tensor& cos, Tensor& sin,
                 float factor, const std::vector<float>* long_inv_freq, int64_t long_from) {
  const int64_t half = int64_t(inv_freq.size());
  for (size_t t = 0; t < positions.size(); ++t)
    for (int64_t i = 0; i < half; ++i) {
      const std::vector<float>& f = long_inv_freq && positions[t] >= long_from ? *long_inv_freq : inv_freq;
      const float angle = float(positions[t]) * f[size_t(i)];  // a float32 product, as torch forms it
      cos.as<float>()[int64_t(t) * half + i] = float(std::cos(double(angle))) * factor;
      sin.as<float>()[int64_t(t) * half + i] = float(std::sin(double(angle))) * factor;
    }
}

}  // namespace ftllm::model
