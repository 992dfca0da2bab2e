// tiktoken vocabularies as Kimi-K2 ships them (tests/data/tokenizers/kimi-synth, by
// tests/tools/make_tiktoken_fixtures.py): ids exactly as the tiktoken package gives them with Kimi's
// pattern, special tokens and cuts, over a multilingual corpus and hostile input; decoding back to the text.
#include <simdjson.h>

#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

using namespace ftllm;
namespace fs = std::filesystem;

namespace {

const fs::path kDir = fs::path(FTLLM_SOURCE_ROOT) / "tests" / "data" / "tokenizers" / "kimi-synth";

std::unique_ptr<tokenizer::Tokenizer> kimi() {
  return tokenizer::Tokenizer::from_tiktoken((kDir / "tiktoken.model").string(), (kDir / "tokenizer_config.json").string());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(tiktoken)

BOOST_AUTO_TEST_CASE(kimi_tiktoken_matches_the_tiktoken_package) {
  auto t = kimi();
  simdjson::dom::parser parser;
  simdjson::dom::element golden = parser.load((kDir / "golden.json").string());
  const int32_t base = int32_t(int64_t(golden["base_tokens"]));
  BOOST_TEST(t->vocab_size() == base + 258);
  BOOST_TEST(t->token_id("[BOS]").value() == base);
  BOOST_TEST(t->token_id("<|reserved_token_" + std::to_string(base + 5) + "|>").value() == base + 5);
  BOOST_TEST(t->is_special(base + 2));
  size_t rows = 0;
  for (simdjson::dom::element row : golden["rows"].get_array()) {
    const std::string text{std::string_view(row["text"])};
    std::vector<int32_t> want;
    for (int64_t id : row["ids"].get_array()) want.push_back(int32_t(id));
    const std::vector<int32_t> got = t->encode(text);
    BOOST_TEST(got == want, "text " << rows << ": " << text.substr(0, 60));
    BOOST_TEST(t->decode(got) == text, "text " << rows);
    ++rows;
  }
  BOOST_TEST(rows > 50u);
}

BOOST_AUTO_TEST_CASE(broken_tiktoken_files_say_what_is_wrong) {
  const fs::path dir = fs::temp_directory_path() / ("ftllm-tiktoken-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const char* name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  auto error = [&](const std::string& model, const std::string& config) -> std::string {
    try {
      tokenizer::Tokenizer::from_tiktoken(model, config);
    } catch (const EngineError& e) {
      return e.what();
    }
    return "";
  };
  const std::string config = write("tokenizer_config.json", "{}");
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes += "AA== " + std::to_string(b) + "\n";  // valid lines, ranks in order
  BOOST_TEST(error(write("ok.model", bytes), config).empty());
  BOOST_TEST(error(write("gap.model", "AA== 0\nAQ== 2\n"), config).find("line 2 is not \"BASE64 RANK\"") != std::string::npos);
  BOOST_TEST(error(write("bad.model", "A*== 0\n"), config).find("line 1") != std::string::npos);
  BOOST_TEST(error(write("ok2.model", bytes), write("bad.json", "{")).find("not JSON") != std::string::npos);
  BOOST_TEST(error(write("ok3.model", bytes), write("far.json", R"({"added_tokens_decoder": {"5": {"content": "x"}}})"))
                 .find("is not a special token after the 256 ranks") != std::string::npos);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()
