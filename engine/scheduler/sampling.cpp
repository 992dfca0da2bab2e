#include "sampling.h"

#include <emmintrin.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>
#include <vector>

namespace ftllm::scheduler {

namespace {

constexpr float kRemoved = -INFINITY;

// Softmax probabilities of the logits (removed tokens get 0).
// Each exponential in float (e^(l - max) <= 1 there; a double exp cost 3x as much over a 152K vocabulary),
// summed and divided in double.
std::vector<double> softmax(std::span<const float> logits) {
  float max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) sum += (p[i] = double(std::exp(logits[i] - max)));
  for (double& x : p) x /= sum;
  return p;
}

void apply_top_k(std::span<float> logits, int32_t k) {
  if (k <= 0 || size_t(k) >= logits.size()) return;
  std::vector<float> sorted(logits.begin(), logits.end());
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
  const float kth = sorted[size_t(k - 1)];
  for (float& l : logits)
    if (l < kth) l = kRemoved;  // ties with the k-th survive, as in transformers
}

// transformers' rule: sort ascending, drop tokens while the cumulative probability stays <= 1 - top_p;
// the most likely token always survives.
void apply_top_p(std::span<float> logits, float top_p) {
  if (top_p >= 1.0f) return;
  std::vector<double> probs = softmax(logits);
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[size_t(a)] < logits[size_t(b)]; });
  double cumulative = 0;
  for (size_t i = 0; i + 1 < order.size(); ++i) {
    cumulative += probs[size_t(order[i])];
    if (cumulative <= 1.0 - double(top_p)) logits[size_t(order[i])] = kRemoved;
    else break;
  }
}

void apply_min_p(std::span<float> logits, float min_p) {
  if (min_p <= 0.0f) return;
  std::vector<double> probs = softmax(logits);
  const double threshold = double(min_p) * *std::max_element(probs.begin(), probs.end());
  for (size_t i = 0; i < logits.size(); ++i)
    if (probs[i] < threshold) logits[i] = kRemoved;
}

int32_t argmax(std::span<const float> logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());  // first of equals
}

// The largest logit, four SSE lanes at a time (std::max_element's compare-and-branch per token took
// half of a 152K-vocabulary draw); NaNs are passed over, as max_element passes them.
float largest(std::span<const float> logits) {
  __m128 m[4] = {_mm_set1_ps(-INFINITY), _mm_set1_ps(-INFINITY), _mm_set1_ps(-INFINITY), _mm_set1_ps(-INFINITY)};
  size_t i = 0;
  for (; i + 16 <= logits.size(); i += 16)
    for (int j = 0; j < 4; ++j) m[j] = _mm_max_ps(_mm_loadu_ps(logits.data() + i + 4 * j), m[j]);  // a NaN load keeps m[j]
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, _mm_max_ps(_mm_max_ps(m[0], m[1]), _mm_max_ps(m[2], m[3])));
  float top = std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3]));
  for (; i < logits.size(); ++i) top = logits[i] > top ? logits[i] : top;
  return top;
}

}  // namespace

void process_logits(const SamplingParams& p, std::span<float> logits, std::span<const int32_t> context,
                    std::span<const int32_t> output) {
  const int32_t vocab = int32_t(logits.size());
  for (auto [token, bias] : p.logit_bias)
    if (token >= 0 && token < vocab) logits[size_t(token)] += bias;
  if (p.repetition_penalty != 1.0f) {
    std::vector<bool> seen(size_t(vocab), false);
    for (int32_t t : context)
      if (t >= 0 && t < vocab && !seen[size_t(t)]) {
        seen[size_t(t)] = true;
        float& l = logits[size_t(t)];
        l = l < 0 ? l * p.repetition_penalty : l / p.repetition_penalty;
      }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t t : output)
      if (t >= 0 && t < vocab) ++counts[t];
    for (auto [t, n] : counts) logits[size_t(t)] -= p.presence_penalty + p.frequency_penalty * float(n);
  }
  if (p.temperature <= 0.0f) return;  // greedy: the filters cannot change the argmax
  if (p.temperature != 1.0f)
    for (float& l : logits) l /= p.temperature;
  apply_top_k(logits, p.top_k);
  apply_top_p(logits, p.top_p);
  apply_min_p(logits, p.min_p);
}

Sampler::Sampler(const SamplingParams& p) : params_(p), rng_(p.seed ? *p.seed : std::random_device{}()) {}

int32_t Sampler::next(std::span<float> logits, std::span<const int32_t> context, std::span<const int32_t> output) {
  process_logits(params_, logits, context, output);
  if (params_.temperature <= 0.0f) return argmax(logits);
  // The softmax without its division: each logit becomes its weight e^(l - max) in place (float, <= 1),
  // and a uniform draw in [0, 1) times their total is found in the running sum, stopping there. (A
  // vector of probabilities divided through cost twice as much over a 152K vocabulary.)
  const float max = largest(logits);
  double total = 0;
  for (float& l : logits) {
    const float w = std::exp(l - max);
    total += double(l = w == w ? w : 0.0f);  // a NaN logit weighs nothing
  }
  const double target = std::uniform_real_distribution<double>(0.0, 1.0)(rng_) * total;
  double cumulative = 0;
  int32_t last_possible = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] == 0) continue;  // removed, NaN, or too unlikely for a float
    cumulative += double(logits[i]);
    last_possible = int32_t(i);
    if (target < cumulative) return int32_t(i);
  }
  return last_possible;  // rounding left the draw just above the total
}

}  // namespace ftllm::scheduler
