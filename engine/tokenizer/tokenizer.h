// A tokenizer: text to token ids and back, exact against Hugging Face `tokenizers` and llama.cpp.
// Built from tokenizer.json (+ tokenizer_config.json) or from a GGUF file's vocabulary.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bpe_model.h"
#include "normalizer.h"
#include "pretokenizer.h"
#include "spm_model.h"
#include "vocab.h"

namespace ftllm::model {
class GgufFile;
}

namespace ftllm::tokenizer {

struct AddedToken {
  int32_t id;
  std::string content;
  bool special = true;
  bool lstrip = false, rstrip = false, single_word = false, normalized = false;
};

class Tokenizer {
 public:
  // Throws EngineError naming the file and what in it is malformed or unsupported.
  static std::unique_ptr<Tokenizer> from_json(const std::string& tokenizer_json, const std::string& source);
  static std::unique_ptr<Tokenizer> from_gguf(const model::GgufFile& gguf);
  // A tiktoken vocabulary as Kimi-K2 ships it: tiktoken.model ("BASE64 RANK" lines) and the
  // tokenizer_config.json naming its special tokens (tokenizer_tiktoken.cpp).
  static std::unique_ptr<Tokenizer> from_tiktoken(const std::string& model_path, const std::string& config_path);

  // Text (any bytes: invalid UTF-8 reads as U+FFFD) to ids. add_special adds what the post-processor
  // adds (BOS, ...); parse_special matches special tokens written in the text.
  std::vector<int32_t> encode(std::string_view text, bool add_special = false, bool parse_special = true) const;
  // Ids to text; ids outside the vocabulary are skipped.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  int32_t vocab_size() const { return int32_t(vocab_.tokens.size()); }
  const std::string& token(int32_t id) const { return vocab_.tokens.at(size_t(id)); }
  // What the token decodes to on its own, as raw bytes (a byte-level token may hold part of a character).
  const std::string& token_bytes(int32_t id) const { return piece_bytes_.at(size_t(id)); }
  std::optional<int32_t> token_id(std::string_view text) const;
  bool is_special(int32_t id) const { return id >= 0 && size_t(id) < special_.size() && special_[size_t(id)]; }

  // Streaming decode: feed ids one by one; each call returns the text that became complete. Never emits
  // part of a UTF-8 character; all pieces plus finish() equal decode() of the same ids.
  class Stream {
   public:
    // `kept`: special tokens decoded even when skipping them (the markers a parser reads).
    explicit Stream(const Tokenizer& t, bool skip_special = false, std::vector<int32_t> kept = {})
        : t_(t), skip_special_(skip_special), kept_(std::move(kept)) {}
    std::string feed(int32_t id);
    std::string finish();

   private:
    const Tokenizer& t_;
    bool skip_special_;
    std::vector<int32_t> kept_;
    bool started_ = false;
    std::string pending_;
  };

 private:
  Tokenizer() = default;
  void finish_setup();
  void split_added(std::string_view text, bool parse_special, std::vector<std::pair<std::string_view, int32_t>>& out) const;
  // One stretch of text (special tokens split out, then normalised, pre-tokenized and encoded) onto out.
  void encode_piece(std::string_view text, bool parse_special, bool& first, std::vector<int32_t>& out) const;
  // The bytes one token contributes to decoded text; `first` applies the leading-space strip.
  void append_token_bytes(int32_t id, bool first, std::string& out) const;

  Vocab vocab_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  std::unique_ptr<BpeModel> bpe_;
  std::unique_ptr<SpmModel> spm_;
  std::vector<AddedToken> added_;
  std::array<std::vector<size_t>, 256> added_by_first_byte_;  // indexes into added_, longest first
  std::vector<bool> special_;
  std::vector<int32_t> prefix_, suffix_;  // what add_special puts around the text
  bool byte_level_decode_ = false;        // token characters stand for bytes (GPT-2 table)
  bool metaspace_decode_ = false;         // "▁" decodes to a space, <0xNN> to its byte
  bool strip_first_space_ = false;        // decoded text drops one leading space
  std::vector<std::string> piece_bytes_;  // per id: the bytes it decodes to
  // tiktoken models as Kimi's tokenizer runs them: text cut where a run of whitespace or non-whitespace
  // would pass this many characters (0: never), each piece encoded on its own.
  size_t max_run_ = 0;
};

}  // namespace ftllm::tokenizer
