// Tokenizer::from_tiktoken: a tiktoken vocabulary as Kimi-K2 ships it (tiktoken.model + tokenizer_config.json,
// read by its tokenization_kimi.py). tiktoken's BPE works on bytes: a piece that is a token is that token,
// else the adjacent pair whose concatenation has the lowest rank merges first. Here each token's bytes are
// spelled with GPT-2's byte characters so the byte-level machinery (pre-tokenizer, decoding) serves as for
// tokenizer.json, and every split of a token into two tokens is a merge of its rank. Special tokens follow
// the base ranks: 256 + 2 of them, named by added_tokens_decoder, the rest <|reserved_token_N|>.
#include <simdjson.h>

#include <sstream>

#include "../core/error.h"
#include "../core/mapped_file.h"
#include "tokenizer.h"

namespace ftllm::tokenizer {

namespace {

// Standard base64 (RFC 4648), padding optional; nullopt for anything else.
std::optional<std::string> base64_decode(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (char c : in) {
    const int v = value(c);
    if (v < 0) return std::nullopt;
    bits = bits << 6 | uint32_t(v);
    if ((count += 6) >= 8) out += char((bits >> (count -= 8)) & 0xFF);
  }
  return out;
}

constexpr int kReservedSpecials = 256 + 2;  // tokenization_kimi.py's num_reserved_special_tokens + 2

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_tiktoken(const std::string& model_path, const std::string& config_path) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  const auto& chars = byte_to_chars();
  std::vector<std::string> bytes_of;  // by rank
  {
    std::istringstream lines(read_text_file(model_path));
    std::string line;
    for (size_t n = 1; std::getline(lines, line); ++n) {
      if (line.empty()) continue;
      const size_t space = line.find(' ');
      auto bytes = space == std::string::npos ? std::nullopt : base64_decode(std::string_view(line).substr(0, space));
      char* end = nullptr;
      const long rank = space == std::string::npos ? -1 : std::strtol(line.c_str() + space + 1, &end, 10);
      if (!bytes || bytes->empty() || rank != long(bytes_of.size()) || *end != '\0')
        throw EngineError(model_path + ": line " + std::to_string(n) + " is not \"BASE64 RANK\" with ranks 0, 1, 2, ... in order");
      std::string spelled;
      for (unsigned char b : *bytes) spelled += chars[b];
      t->vocab_.set(int32_t(rank), std::move(spelled));
      bytes_of.push_back(std::move(*bytes));
    }
  }
  const int32_t base = int32_t(bytes_of.size());
  if (base < 256) throw EngineError(model_path + " holds " + std::to_string(base) + " ranks; a byte-level vocabulary has at least 256");
  BpeModel::Options options;
  options.ignore_merges = true;  // tiktoken: a piece that is a token is that token
  t->bpe_ = std::make_unique<BpeModel>(t->vocab_, options);
  for (int32_t rank = 0; rank < base; ++rank) {
    const std::string& b = bytes_of[size_t(rank)];
    if (b.size() == 1) continue;
    for (size_t cut = 1; cut < b.size(); ++cut) {
      std::string left, right;
      for (size_t i = 0; i < cut; ++i) left += chars[static_cast<unsigned char>(b[i])];
      for (size_t i = cut; i < b.size(); ++i) right += chars[static_cast<unsigned char>(b[i])];
      const int32_t l = t->vocab_.find(left), r = t->vocab_.find(right);
      if (l >= 0 && r >= 0) t->bpe_->add_pair(l, r, rank, rank);
    }
  }

  simdjson::dom::parser parser;
  simdjson::dom::element config;
  if (auto err = parser.load(config_path).get(config))
    throw EngineError(config_path + ": not JSON (" + simdjson::error_message(err) + "); a tiktoken model needs it for its special tokens");
  std::vector<std::string> names(kReservedSpecials);
  for (int i = 0; i < kReservedSpecials; ++i) names[size_t(i)] = "<|reserved_token_" + std::to_string(base + i) + "|>";
  simdjson::dom::object decoder;
  if (!config["added_tokens_decoder"].get(decoder))
    for (auto [key, value] : decoder) {
      const long id = std::strtol(std::string(key).c_str(), nullptr, 10);
      std::string_view content;
      if (id < base || id >= base + kReservedSpecials || value["content"].get(content))
        throw EngineError(config_path + ": added_tokens_decoder entry " + std::string(key) + " is not a special token after the " +
                          std::to_string(base) + " ranks of " + model_path);
      names[size_t(id - base)] = std::string(content);
    }
  for (int i = 0; i < kReservedSpecials; ++i) t->added_.push_back({base + i, names[size_t(i)], true, false, false, false, false});

  t->pre_tokenizer_.add({PreTokenizerStep::Split, std::make_shared<RegexSplitter>(kKimiPattern)});
  t->pre_tokenizer_.add({PreTokenizerStep::ByteLevel, nullptr});
  t->byte_level_decode_ = true;
  t->max_run_ = 25000;
  t->finish_setup();
  return t;
}

}  // namespace ftllm::tokenizer
