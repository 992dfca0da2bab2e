// Token strings and ids, shared by the models, the added-token matcher and the decoder.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ftllm::tokenizer {

struct Vocab {
  // Lookups by string_view without building a std::string (a hot path of encoding).
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::string> tokens;                                         // by id
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> ids;     // by text

  int32_t find(std::string_view text) const {
    auto it = ids.find(text);
    return it == ids.end() ? -1 : it->second;
  }
  void set(int32_t id, std::string text) {
    if (size_t(id) >= tokens.size()) tokens.resize(size_t(id) + 1);
    ids[text] = id;
    tokens[size_t(id)] = std::move(text);
  }
};

}  // namespace ftllm::tokenizer
