// llama.cpp's vocabulary test vectors: every case of every vocabulary, from the GGUF vocabulary alone.
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <iostream>
#include <sstream>

#include "model/gguf.h"
#include "tokenizer/tokenizer.h"

namespace bdata = boost::unit_test::data;
using namespace ftllm;

namespace {

const std::string kVocab = FTLLM_SOURCE_ROOT "/tests/data/vocab/";

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// X.gguf.inp: strings separated by "\n__ggml_vocab_test__\n"; X.gguf.out: one line of ids per string.
std::vector<std::pair<std::string, std::vector<int32_t>>> cases(const std::string& name) {
  std::string inp = read(kVocab + "ggml-vocab-" + name + ".gguf.inp");
  std::string out = read(kVocab + "ggml-vocab-" + name + ".gguf.out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0;;) {
    size_t next = inp.find(sep, pos);
    texts.push_back(inp.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) break;
    pos = next + sep.size();
  }
  std::vector<std::pair<std::string, std::vector<int32_t>>> result;
  std::istringstream lines(out);
  std::string line;
  for (size_t i = 0; i < texts.size() && std::getline(lines, line); ++i) {
    std::vector<int32_t> ids;
    std::istringstream nums(line);
    int32_t id;
    while (nums >> id) ids.push_back(id);
    result.push_back({texts[i], ids});
  }
  return result;
}

}  // namespace

BOOST_DATA_TEST_CASE(gguf_vocabularies_pass_every_case,
                     bdata::make(std::vector<std::string>{"qwen2", "qwen35", "llama-bpe", "llama-spm", "gpt-2", "phi-3",
                                                          "deepseek-llm", "deepseek-coder"}),
                     name) {
  auto gguf = model::GgufFile::open(kVocab + "ggml-vocab-" + name + ".gguf");
  auto tok = tokenizer::Tokenizer::from_gguf(gguf);
  auto all = cases(name);
  BOOST_REQUIRE_GE(all.size(), 40u);
  size_t passed = 0;
  for (auto& [text, want] : all) {
    std::vector<int32_t> got = tok->encode(text, false, false);
    if (got == want) {
      ++passed;
    } else {
      std::ostringstream g;
      for (int32_t id : got) g << ' ' << id;
      BOOST_ERROR(name << ": " << text.substr(0, 60) << "\n  got: " << g.str());
    }
  }
  std::cout << "vocab " << name << ": " << passed << "/" << all.size() << std::endl;
  BOOST_TEST(passed == all.size());
}
