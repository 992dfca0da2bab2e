// Byte-pair encoding with ranked merges (Hugging Face BPE, llama.cpp's "gpt2" vocabularies): a word
// starts as characters and the adjacent pair of lowest merge rank is merged until none is left.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "vocab.h"

namespace ftllm::tokenizer {

class BpeModel {
 public:
  struct Options {
    bool byte_fallback = false;  // characters outside the vocabulary become <0xNN> tokens
    bool ignore_merges = false;  // a word that is a token is that token, whatever the merges say
    int32_t unk_id = -1;         // otherwise unknown characters become this (if set) or vanish
    bool fuse_unk = false;
  };
  BpeModel(const Vocab& vocab, Options options) : vocab_(vocab), options_(options) {}

  // Adds a merge of two token strings; rank is the order of addition. Returns false when either side or
  // their concatenation is not a token (such merges can never apply).
  bool add_merge(std::string_view left, std::string_view right);
  // tiktoken's rule instead: any two adjacent tokens whose concatenation `result` is a token merge, lowest
  // `rank` first (the result's rank, so every split of one token ranks alike).
  void add_pair(int32_t left, int32_t right, int32_t result, int32_t rank) { merges_.emplace(key(left, right), Merge{rank, result}); }
  void encode(std::string_view word, std::vector<int32_t>& out) const;

 private:
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  struct Merge {
    int32_t rank, result;
  };
  const Vocab& vocab_;
  Options options_;
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace ftllm::tokenizer
