// Tokenizer::from_gguf: the vocabulary inside a GGUF file (tokenizer.ggml.*), so a GGUF model needs no
// separate tokenizer. "gpt2" vocabularies are byte-level BPE split by the pattern list its "pre" names;
// "llama" vocabularies are SentencePiece-style BPE by scores.
#include <map>

#include "../core/error.h"
#include "../model/gguf.h"
#include "tokenizer.h"

namespace ftllm::tokenizer {

namespace {

const char* const kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen35 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The split patterns of each "tokenizer.ggml.pre", applied one after another (each piece is split again
// by the next pattern), as the models' own tokenizer.json files chain their Split pre-tokenizers.
const std::map<std::string, std::vector<std::string>>& pre_patterns() {
  static const std::map<std::string, std::vector<std::string>> table = {
      {"gpt-2", {kGpt2Pattern}},
      {"default", {kGpt2Pattern}},
      {"llama-bpe", {kLlama3}},
      {"llama3", {kLlama3}},
      {"llama-v3", {kLlama3}},
      {"smaug-bpe", {kLlama3}},
      {"dbrx", {kLlama3}},
      {"qwen2", {kQwen2}},
      {"stablelm2", {kQwen2}},
      {"qwen35", {kQwen35}},
      {"kimi-k2", {kKimiPattern}},
      {"smollm", {R"(\p{N})", kGpt2Pattern}},
      {"starcoder", {R"(\p{N})", kGpt2Pattern}},
      {"refact", {R"(\p{N})", kGpt2Pattern}},
      // DeepSeek's own tokenizer.json patterns, with code points written out: several of these letters
      // have canonical equivalents, and an editor that normalises the source would silently break them.
      {"deepseek-coder",
       {"[\\r\\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", R"(\p{N})"}},
      {"deepseek-llm",
       {"[\\r\\n]",
        "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}-\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}-\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}-\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
        "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+", R"(\s+$)",
        "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", R"(\p{N}+)"}},
  };
  return table;
}

enum TokenType { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const model::GgufFile& g) {
  auto fail = [&](const std::string& why) { return EngineError(g.path() + ": " + why); };
  const std::string kind = g.get_string("tokenizer.ggml.model").value_or("");
  const std::vector<std::string>* tokens = g.get_strings("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty()) throw fail("has no tokenizer.ggml.tokens; give the model's tokenizer.json instead");
  if (kind != "gpt2" && kind != "llama")
    throw fail("tokenizer.ggml.model \"" + kind + "\" is not supported (gpt2 and llama are)");

  std::unique_ptr<Tokenizer> t(new Tokenizer());
  for (size_t i = 0; i < tokens->size(); ++i) t->vocab_.set(int32_t(i), (*tokens)[i]);

  const auto& md = g.metadata();
  const std::vector<double>* types = nullptr;
  if (auto it = md.find("tokenizer.ggml.token_type"); it != md.end()) types = std::get_if<std::vector<double>>(&it->second.v);
  if (types && types->size() == tokens->size())
    for (size_t i = 0; i < tokens->size(); ++i) {
      int type = int((*types)[i]);
      if (type == Control || type == UserDefined)
        t->added_.push_back({int32_t(i), (*tokens)[i], type == Control, false, false, false, false});
    }

  if (kind == "gpt2") {
    const std::string pre = g.get_string("tokenizer.ggml.pre").value_or("default");
    auto it = pre_patterns().find(pre);
    if (it == pre_patterns().end()) throw fail("tokenizer.ggml.pre \"" + pre + "\" is not supported");
    for (const std::string& p : it->second)
      t->pre_tokenizer_.add({PreTokenizerStep::Split, std::make_shared<RegexSplitter>(p)});
    t->pre_tokenizer_.add({PreTokenizerStep::ByteLevel, nullptr});
    BpeModel::Options options;
    options.ignore_merges = pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3";
    t->bpe_ = std::make_unique<BpeModel>(t->vocab_, options);
    const std::vector<std::string>* merges = g.get_strings("tokenizer.ggml.merges");
    if (!merges) throw fail("a gpt2 vocabulary needs tokenizer.ggml.merges");
    for (const std::string& m : *merges) {
      size_t space = m.find(' ', 1);
      if (space == std::string::npos) throw fail("merge \"" + m + "\" is not two tokens");
      t->bpe_->add_merge(std::string_view(m).substr(0, space), std::string_view(m).substr(space + 1));
    }
    t->byte_level_decode_ = true;
  } else {
    std::vector<float> scores(tokens->size(), 0.0f);
    if (auto it = md.find("tokenizer.ggml.scores"); it != md.end())
      if (auto* s = std::get_if<std::vector<double>>(&it->second.v); s && s->size() == tokens->size())
        for (size_t i = 0; i < s->size(); ++i) scores[i] = float((*s)[i]);
    int32_t unk = int32_t(g.get_int("tokenizer.ggml.unknown_token_id").value_or(0));
    t->spm_ = std::make_unique<SpmModel>(t->vocab_, std::move(scores), unk);
    // SentencePiece marks word starts with "▁": every space, plus one before each stretch of text.
    if (g.get_bool("tokenizer.ggml.add_space_prefix").value_or(true))
      t->normalizer_.add({NormalizerStep::Prepend, "\xe2\x96\x81", nullptr});
    t->normalizer_.add({NormalizerStep::Replace, "\xe2\x96\x81", std::make_shared<RegexSplitter>(" ", true)});
    t->metaspace_decode_ = true;
    t->strip_first_space_ = true;
  }

  // What add_special adds: BOS/EOS as the file says (SentencePiece vocabularies add BOS by default).
  auto bos = g.get_int("tokenizer.ggml.bos_token_id"), eos = g.get_int("tokenizer.ggml.eos_token_id");
  if (bos && g.get_bool("tokenizer.ggml.add_bos_token").value_or(kind == "llama")) t->prefix_.push_back(int32_t(*bos));
  if (eos && g.get_bool("tokenizer.ggml.add_eos_token").value_or(false)) t->suffix_.push_back(int32_t(*eos));
  t->finish_setup();
  return t;
}

}  // namespace ftllm::tokenizer
