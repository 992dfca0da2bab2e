// libFuzzer target for the tokenizers: bytes in, ids out, ids back to bytes, on the three real tokenizer
// families of tests/data/tokenizers (llama2: SentencePiece BPE with byte fallback; llama3: byte-level BPE;
// qwen3: NFC and byte-level BPE). The first input byte picks the tokenizer and the options, the rest is
// the text; the same bytes also read as token ids to decode. Checked beyond "no crash":
//  - every id is in the vocabulary;
//  - streaming decode, piece by piece, equals decode of the whole;
//  - valid UTF-8 without special-token parsing round-trips exactly where the tokenizer has no normalizer
//    that changes text (llama2 and llama3).
// FTLLM_FUZZ_TOKENIZERS names the folder (tests/fuzz/run.sh sets it). Run by tests/fuzz/run.sh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

using namespace ftllm;

namespace {

struct Family {
  const char* name;
  bool round_trips;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
};
Family families[] = {{"llama2", true, nullptr}, {"llama3", true, nullptr}, {"qwen3", false, nullptr}};

std::string streamed(const tokenizer::Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special) {
  tokenizer::Tokenizer::Stream stream(t, skip_special);
  std::string out;
  for (int32_t id : ids) out += stream.feed(id);
  return out + stream.finish();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("FTLLM_FUZZ_TOKENIZERS");
  if (!dir) {
    std::fprintf(stderr, "tokenizer_fuzz: set FTLLM_FUZZ_TOKENIZERS to tests/data/tokenizers\n");
    std::exit(2);
  }
  for (Family& f : families) {
    const std::string path = std::string(dir) + "/" + f.name + "/tokenizer.json";
    f.tokenizer = tokenizer::Tokenizer::from_json(read_text_file(path), path);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Family& family = families[data[0] % 3];
  const tokenizer::Tokenizer& t = *family.tokenizer;
  const bool add_special = data[0] & 4, parse_special = data[0] & 8, skip_special = data[0] & 16;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);

  const std::vector<int32_t> ids = t.encode(text, add_special, parse_special);
  for (int32_t id : ids)
    if (id < 0 || id >= t.vocab_size()) __builtin_trap();
  const std::string decoded = t.decode(ids, skip_special);
  if (streamed(t, ids, skip_special) != decoded) __builtin_trap();
  if (family.round_trips && !add_special && !parse_special && tokenizer::sanitize_utf8(text) == text && decoded != text)
    __builtin_trap();

  // The same bytes as ids, in and out of the vocabulary: decoding skips what it does not know.
  std::vector<int32_t> raw((size - 1) / 4);
  if (!raw.empty()) std::memcpy(raw.data(), data + 1, raw.size() * 4);
  for (int32_t& id : raw) id = data[0] & 32 ? id : int32_t(uint32_t(id) % uint32_t(t.vocab_size() + 16));
  if (streamed(t, raw, skip_special) != t.decode(raw, skip_special)) __builtin_trap();
  return 0;
}
