// What tests/tools/make_fixtures.py recorded for a fixture model with transformers: the prompt, the
// greedy continuation, and the logits after the prompt and after the last greedy token but one.
#pragma once

#include <simdjson.h>

#include <filesystem>
#include <vector>

namespace ftllm::test {

struct Reference {
  std::vector<int32_t> prompt, greedy;
  std::vector<float> last_logits, final_logits;
};

inline Reference read_reference(const std::filesystem::path& dir) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load((dir / "reference.json").string());
  Reference r;
  for (int64_t v : doc["prompt"].get_array()) r.prompt.push_back(int32_t(v));
  for (int64_t v : doc["greedy"].get_array()) r.greedy.push_back(int32_t(v));
  for (double v : doc["last_logits"].get_array()) r.last_logits.push_back(float(v));
  for (double v : doc["final_logits"].get_array()) r.final_logits.push_back(float(v));
  return r;
}

}  // namespace ftllm::test
