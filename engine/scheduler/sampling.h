// Turning logits into the next token: OpenAI's logit_bias first, then penalties and filters in Hugging
// Face's order (repetition
// penalty, temperature, top-k, top-p, min-p) with OpenAI's presence and frequency penalties, then a
// draw from a seeded generator, or argmax when temperature is 0.
#pragma once

#include <cstdint>
#include <random>
#include <span>

#include "request.h"

namespace ftllm::scheduler {

// Rewrites logits in place; filtered-out tokens become -infinity. `context` is prompt plus output,
// `output` the generated tokens alone.
void process_logits(const SamplingParams& p, std::span<float> logits, std::span<const int32_t> context,
                    std::span<const int32_t> output);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Consumes (rewrites) the logits.
  int32_t next(std::span<float> logits, std::span<const int32_t> context, std::span<const int32_t> output);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace ftllm::scheduler
