// tokenizer.json against Hugging Face `tokenizers` (tests/data/tokenizers/corpus.json), against the GGUF
// vocabulary of the same family, streaming decode, hostile input and malformed files.
#include <simdjson.h>

#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "core/error.h"
#include "model/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace bdata = boost::unit_test::data;
using namespace ftllm;
using tokenizer::Tokenizer;

namespace {

const std::string kData = FTLLM_SOURCE_ROOT "/tests/data/";

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::unique_ptr<Tokenizer> from_json(const std::string& name) {
  std::string path = kData + "tokenizers/" + name + "/tokenizer.json";
  return Tokenizer::from_json(read(path), path);
}

std::vector<int32_t> ids_of(simdjson::dom::element e) {
  std::vector<int32_t> v;
  for (int64_t id : e.get_array()) v.push_back(int32_t(id));
  return v;
}

std::string show(const std::vector<int32_t>& ids) {
  std::ostringstream s;
  for (int32_t id : ids) s << ' ' << id;
  return s.str();
}

const std::vector<std::string> kNames = {"qwen3", "llama3", "llama2"};

}  // namespace

BOOST_DATA_TEST_CASE(corpus_matches_hugging_face_tokenizers, bdata::make(kNames), name) {
  auto tok = from_json(name);
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(kData + "tokenizers/corpus.json");
  auto texts = doc["texts"].get_array();
  auto rows = doc["results"][name].get_array();
  BOOST_REQUIRE_EQUAL(texts.size(), rows.size());
  size_t passed = 0, total = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::string text(std::string_view(texts.at(i)));
    auto row = rows.at(i);
    bool ok = true;
    std::vector<int32_t> plain = tok->encode(text, false), special = tok->encode(text, true);
    if (plain != ids_of(row["ids"])) {
      ok = false;
      BOOST_ERROR(name << " ids of " << text.substr(0, 50) << "\n  got " << show(plain) << "\n want " << show(ids_of(row["ids"])));
    }
    if (special != ids_of(row["ids_special"])) {
      ok = false;
      BOOST_ERROR(name << " ids with special tokens of " << text.substr(0, 50));
    }
    std::string decoded = tok->decode(ids_of(row["ids"]));
    if (decoded != std::string_view(row["decoded"])) {
      ok = false;
      BOOST_ERROR(name << " decode of " << text.substr(0, 50) << ": got [" << decoded << "]");
    }
    passed += ok;
    ++total;
  }
  std::cout << "tokenizer " << name << ": " << passed << "/" << total << std::endl;
  BOOST_TEST(passed == total);
}

BOOST_DATA_TEST_CASE(tokenizer_json_equals_gguf_of_its_family,
                     bdata::make(std::vector<std::string>{"qwen3", "llama3"}) ^
                         bdata::make(std::vector<std::string>{"qwen2", "llama-bpe"}),
                     json_name, gguf_name) {
  auto json = from_json(json_name);
  auto gguf_file = model::GgufFile::open(kData + "vocab/ggml-vocab-" + gguf_name + ".gguf");
  auto gguf = Tokenizer::from_gguf(gguf_file);
  std::string inp = read(kData + "vocab/ggml-vocab-" + gguf_name + ".gguf.inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  size_t n = 0;
  for (size_t pos = 0; pos < inp.size();) {
    size_t next = inp.find(sep, pos);
    std::string text = inp.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    BOOST_TEST(json->encode(text, false, false) == gguf->encode(text, false, false), boost::test_tools::per_element());
    ++n;
    if (next == std::string::npos) break;
    pos = next + sep.size();
  }
  BOOST_TEST(n >= 45u);
}

// The llama2 fixture carries Mistral's 32000-token vocabulary, not Llama 2's, so the llama-spm GGUF is no
// oracle for it: the same strings are checked against transformers' ids instead.
BOOST_AUTO_TEST_CASE(llama2_json_on_the_spm_vocab_strings_matches_hugging_face) {
  auto tok = from_json("llama2");
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(kData + "tokenizers/corpus.json");
  auto texts = doc["llama2_vocab_strings"]["texts"].get_array();
  auto ids = doc["llama2_vocab_strings"]["ids"].get_array();
  BOOST_REQUIRE_GE(texts.size(), 45u);
  for (size_t i = 0; i < texts.size(); ++i)
    BOOST_TEST(tok->encode(std::string_view(texts.at(i)), false) == ids_of(ids.at(i)), boost::test_tools::per_element());
}

BOOST_DATA_TEST_CASE(streaming_decode_is_whole_characters_adding_up_to_decode, bdata::make(kNames), name) {
  auto tok = from_json(name);
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(kData + "tokenizers/corpus.json");
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> sequences;
  for (auto text : doc["texts"].get_array()) sequences.push_back(tok->encode(std::string_view(text), true));
  // Random ids too: byte-level pieces that split characters anywhere.
  for (int k = 0; k < 50; ++k) {
    std::vector<int32_t> ids;
    for (int j = 0; j < 30; ++j) ids.push_back(int32_t(rng() % uint32_t(tok->vocab_size())));
    sequences.push_back(ids);
  }
  for (const auto& ids : sequences) {
    Tokenizer::Stream stream(*tok);
    std::string joined;
    for (int32_t id : ids) {
      std::string piece = stream.feed(id);
      BOOST_REQUIRE(tokenizer::complete_utf8_prefix(piece) == piece.size());
      BOOST_REQUIRE(tokenizer::sanitize_utf8(piece) == piece);  // valid UTF-8
      joined += piece;
    }
    joined += stream.finish();
    BOOST_REQUIRE_EQUAL(joined, tok->decode(ids));
  }
}

BOOST_DATA_TEST_CASE(any_bytes_encode_without_crashing, bdata::make(kNames), name) {
  auto tok = from_json(name);
  std::mt19937 rng(11);
  for (int k = 0; k < 300; ++k) {
    std::string bytes(size_t(rng() % 200), '\0');
    for (char& c : bytes) c = char(rng() % 256);
    std::vector<int32_t> ids = tok->encode(bytes, true);
    for (int32_t id : ids) BOOST_REQUIRE(id >= 0 && id < tok->vocab_size());
    // Invalid UTF-8 reads as U+FFFD: the same ids as the sanitised text.
    BOOST_REQUIRE(ids == tok->encode(tokenizer::sanitize_utf8(bytes), true));
  }
  std::vector<int32_t> bad = {-5, 1 << 30, 0};
  BOOST_TEST(tok->decode(bad) == tok->decode(std::vector<int32_t>{0}));  // unknown ids are skipped
}

BOOST_AUTO_TEST_CASE(malformed_tokenizer_files_say_what_is_wrong) {
  auto error_of = [](const std::string& json) {
    try {
      Tokenizer::from_json(json, "t.json");
    } catch (const EngineError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  BOOST_TEST(error_of("{not json").find("t.json: not valid JSON") == 0u);
  BOOST_TEST(error_of("{}") == "t.json: no \"model\" section");
  BOOST_TEST(error_of(R"({"model": {"type": "WordPiece", "vocab": {}}})") ==
             "t.json: model type \"WordPiece\" is not supported (BPE is)");
  BOOST_TEST(error_of(R"({"model": {"type": "BPE", "vocab": {"a": 0}}})") == "t.json: model.merges is missing");
  BOOST_TEST(error_of(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                          "pre_tokenizer": {"type": "BertPreTokenizer"}})")
                 .find("pre-tokenizer type \"BertPreTokenizer\" is not supported") != std::string::npos);
  BOOST_TEST(error_of(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                          "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "[a-"}, "behavior": "Isolated"}})")
                 .find("does not compile") != std::string::npos);
  BOOST_TEST(error_of(R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})")
                 .find("has no valid id") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(special_tokens_in_text_are_matched_unless_told_not_to) {
  auto tok = from_json("qwen3");
  int32_t im_start = *tok->token_id("<|im_start|>");
  std::vector<int32_t> parsed = tok->encode("<|im_start|>user", false, true);
  BOOST_TEST(parsed.front() == im_start);
  std::vector<int32_t> literal = tok->encode("<|im_start|>user", false, false);
  BOOST_TEST(!std::count(literal.begin(), literal.end(), im_start));
  BOOST_TEST(tok->decode(literal) == "<|im_start|>user");
  BOOST_TEST(tok->is_special(im_start));
  BOOST_TEST(tok->decode(parsed, true) == "user");
}
