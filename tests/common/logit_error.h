// How far logits are from a reference: the largest absolute difference over the reference's range, the
// measure every fixture bound in the engine tests is stated in.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace ftllm::test {

// |a - b|, and infinity where either is NaN: std::max skips a NaN, which would let a broken result pass.
inline double difference(double a, double b) {
  const double d = std::fabs(a - b);
  return std::isnan(d) ? INFINITY : d;
}

inline double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size() || want.empty()) return INFINITY;
  auto [lo, hi] = std::minmax_element(want.begin(), want.end());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, difference(got[i], want[i]));
  return worst / double(*hi - *lo);
}

}  // namespace ftllm::test
