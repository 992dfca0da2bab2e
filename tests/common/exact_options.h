// Load options for tests that compare with float32 references (transformers' logits, llama.cpp's tokens,
// another placement): the KV cache in float32, as the fixtures were computed. Serving defaults to f16.
#pragma once

#include "load_options.h"

namespace ftllm::test {

inline ModelLoadOptions exact_options() {
  ModelLoadOptions o;
  o.kv_dtype = "f32";
  return o;
}

}  // namespace ftllm::test
