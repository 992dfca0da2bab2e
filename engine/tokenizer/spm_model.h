// SentencePiece-style BPE by token scores (llama.cpp's "llama" vocabularies): adjacent symbols whose
// concatenation is a token merge, highest score first; characters outside the vocabulary fall back to
// <0xNN> byte tokens.
#pragma once

#include <string_view>
#include <vector>

#include "vocab.h"

namespace ftllm::tokenizer {

class SpmModel {
 public:
  SpmModel(const Vocab& vocab, std::vector<float> scores, int32_t unk_id)
      : vocab_(vocab), scores_(std::move(scores)), unk_id_(unk_id) {}
  void encode(std::string_view text, std::vector<int32_t>& out) const;

 private:
  const Vocab& vocab_;
  std::vector<float> scores_;
  int32_t unk_id_;
};

}  // namespace ftllm::tokenizer
