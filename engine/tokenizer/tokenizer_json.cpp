// Tokenizer::from_json: Hugging Face tokenizer.json. Components real models use are supported; any other
// is refused by name rather than silently tokenizing differently.
#include <simdjson.h>

#include "../core/error.h"
#include "tokenizer.h"

namespace ftllm::tokenizer {

namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

struct JsonContext {
  const std::string& source;
  EngineError error(const std::string& why) const { return EngineError(source + ": " + why); }
};

std::string_view str(element e, const char* key, std::string_view fallback = {}) {
  std::string_view v;
  return e[key].get(v) ? fallback : v;
}
bool flag(element e, const char* key, bool fallback = false) {
  bool v;
  return e[key].get(v) ? fallback : v;
}
std::string_view type_of(element e) { return str(e, "type"); }

// {"String": "x"} or {"Regex": "x"}: a splitter for it.
std::shared_ptr<RegexSplitter> pattern_of(element e, const JsonContext& ctx) {
  std::string_view s;
  if (!e["pattern"]["String"].get(s)) return std::make_shared<RegexSplitter>(std::string(s), true);
  if (!e["pattern"]["Regex"].get(s)) return std::make_shared<RegexSplitter>(std::string(s));
  throw ctx.error("a pattern is neither {\"String\": ...} nor {\"Regex\": ...}");
}

void add_normalizer(element e, Normalizer& n, const JsonContext& ctx) {
  if (e.is_null()) return;
  std::string_view t = type_of(e);
  if (t == "Sequence") {
    array list;
    if (e["normalizers"].get(list)) throw ctx.error("Sequence normalizer without \"normalizers\"");
    for (element item : list) add_normalizer(item, n, ctx);
  } else if (t == "NFC") n.add({NormalizerStep::NFC, {}, nullptr});
  else if (t == "NFD") n.add({NormalizerStep::NFD, {}, nullptr});
  else if (t == "NFKC") n.add({NormalizerStep::NFKC, {}, nullptr});
  else if (t == "NFKD") n.add({NormalizerStep::NFKD, {}, nullptr});
  else if (t == "Lowercase") n.add({NormalizerStep::Lowercase, {}, nullptr});
  else if (t == "Prepend") n.add({NormalizerStep::Prepend, std::string(str(e, "prepend")), nullptr});
  else if (t == "Replace") n.add({NormalizerStep::Replace, std::string(str(e, "content")), pattern_of(e, ctx)});
  else throw ctx.error("normalizer type \"" + std::string(t) + "\" is not supported (NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Sequence are)");
}

SplitBehavior behavior_of(std::string_view b, const JsonContext& ctx) {
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  throw ctx.error("split behavior \"" + std::string(b) + "\" is unknown");
}

void add_pre_tokenizer(element e, PreTokenizer& p, const JsonContext& ctx) {
  if (e.is_null()) return;
  std::string_view t = type_of(e);
  PreTokenizerStep s{};
  if (t == "Sequence") {
    array list;
    if (e["pretokenizers"].get(list)) throw ctx.error("Sequence pre-tokenizer without \"pretokenizers\"");
    for (element item : list) add_pre_tokenizer(item, p, ctx);
    return;
  } else if (t == "Split") {
    s.kind = PreTokenizerStep::Split;
    s.regex = pattern_of(e, ctx);
    s.behavior = behavior_of(str(e, "behavior", "Isolated"), ctx);
    s.invert = flag(e, "invert");
  } else if (t == "ByteLevel") {
    s.kind = PreTokenizerStep::ByteLevel;
    s.add_prefix_space = flag(e, "add_prefix_space");
    if (flag(e, "use_regex", true)) s.regex = std::make_shared<RegexSplitter>(kGpt2Pattern);
  } else if (t == "Metaspace") {
    s.kind = PreTokenizerStep::Metaspace;
    s.replacement = std::string(str(e, "replacement", "\xe2\x96\x81"));
    std::string_view scheme = str(e, "prepend_scheme", flag(e, "add_prefix_space", true) ? "always" : "never");
    s.prepend = scheme == "first" ? PreTokenizerStep::First : scheme == "never" ? PreTokenizerStep::Never : PreTokenizerStep::Always;
    s.split = flag(e, "split", true);
    s.regex = std::make_shared<RegexSplitter>(s.replacement, true);
  } else if (t == "Digits") {
    s.kind = PreTokenizerStep::Digits;
    s.individual_digits = flag(e, "individual_digits");
  } else {
    throw ctx.error("pre-tokenizer type \"" + std::string(t) + "\" is not supported (Split, ByteLevel, Metaspace, Digits, Sequence are)");
  }
  p.add(std::move(s));
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_json(const std::string& text, const std::string& source) {
  JsonContext ctx{source};
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  element root;
  if (auto err = parser.parse(padded).get(root))
    throw ctx.error(std::string("not valid JSON (") + simdjson::error_message(err) + ")");

  std::unique_ptr<Tokenizer> t(new Tokenizer());
  element model;
  if (root["model"].get(model)) throw ctx.error("no \"model\" section");
  std::string_view model_type = str(model, "type", "BPE");
  if (model_type != "BPE")
    throw ctx.error("model type \"" + std::string(model_type) + "\" is not supported (BPE is)");
  if (!str(model, "continuing_subword_prefix").empty() || !str(model, "end_of_word_suffix").empty())
    throw ctx.error("BPE with continuing_subword_prefix or end_of_word_suffix is not supported");
  object vocab;
  if (model["vocab"].get(vocab)) throw ctx.error("model.vocab is missing or not an object");
  for (auto [token, id] : vocab) {
    int64_t v;
    if (id.get(v) || v < 0 || v > (1 << 24)) throw ctx.error("vocab entry \"" + std::string(token) + "\" has no valid id");
    t->vocab_.set(int32_t(v), std::string(token));
  }

  array added;
  if (!root["added_tokens"].get(added)) {
    for (element a : added) {
      int64_t id;
      std::string_view content;
      if (a["id"].get(id) || a["content"].get(content) || id < 0 || id > (1 << 24))
        throw ctx.error("an added token lacks an id or content");
      t->added_.push_back({int32_t(id), std::string(content), flag(a, "special"), flag(a, "lstrip"), flag(a, "rstrip"),
                           flag(a, "single_word"), flag(a, "normalized")});
    }
  }

  BpeModel::Options options;
  options.byte_fallback = flag(model, "byte_fallback");
  options.ignore_merges = flag(model, "ignore_merges");
  options.fuse_unk = flag(model, "fuse_unk");
  if (std::string_view unk = str(model, "unk_token"); !unk.empty()) options.unk_id = t->vocab_.find(unk);
  t->bpe_ = std::make_unique<BpeModel>(t->vocab_, options);
  array merges;
  if (model["merges"].get(merges)) throw ctx.error("model.merges is missing");
  for (element m : merges) {
    std::string_view pair, left, right;
    if (!m.get(pair)) {
      size_t space = pair.find(' ', 1);
      if (space == std::string_view::npos) throw ctx.error("merge \"" + std::string(pair) + "\" is not two tokens");
      left = pair.substr(0, space);
      right = pair.substr(space + 1);
    } else {
      array two;
      if (m.get(two) || two.size() != 2 || two.at(0).get(left) || two.at(1).get(right))
        throw ctx.error("a merge is neither \"a b\" nor [\"a\", \"b\"]");
    }
    t->bpe_->add_merge(left, right);
  }

  element e;
  if (!root["normalizer"].get(e)) add_normalizer(e, t->normalizer_, ctx);
  if (!root["pre_tokenizer"].get(e)) add_pre_tokenizer(e, t->pre_tokenizer_, ctx);

  // Post-processor: TemplateProcessing's single-sequence template gives what add_special adds.
  if (!root["post_processor"].get(e) && !e.is_null()) {
    std::vector<element> processors{e};
    array list;
    if (type_of(e) == "Sequence" && !e["processors"].get(list)) processors.assign(list.begin(), list.end());
    for (element p : processors) {
      if (type_of(p) != "TemplateProcessing") continue;  // ByteLevel only trims offsets
      bool after = false;
      array single;
      if (p["single"].get(single)) throw ctx.error("TemplateProcessing without \"single\"");
      for (element item : single) {
        std::string_view special;
        if (!item["SpecialToken"]["id"].get(special)) {
          array ids;
          if (p["special_tokens"][special]["ids"].get(ids)) throw ctx.error("special token " + std::string(special) + " has no ids");
          for (element id : ids) (after ? t->suffix_ : t->prefix_).push_back(int32_t(int64_t(id)));
        } else {
          after = true;  // the sequence itself
        }
      }
    }
  }

  if (!root["decoder"].get(e) && !e.is_null()) {
    std::vector<element> decoders{e};
    array list;
    if (type_of(e) == "Sequence" && !e["decoders"].get(list)) decoders.assign(list.begin(), list.end());
    for (element d : decoders) {
      std::string_view dt = type_of(d);
      if (dt == "ByteLevel") t->byte_level_decode_ = true;
      else if (dt == "Metaspace") {
        t->metaspace_decode_ = true;
        t->strip_first_space_ = str(d, "prepend_scheme", flag(d, "add_prefix_space", true) ? "always" : "never") != "never";
      } else if (dt == "Replace" || dt == "ByteFallback" || dt == "Fuse") t->metaspace_decode_ = true;
      else if (dt == "Strip") {
        int64_t start = 0;
        if (!d["start"].get(start) && start > 0) t->strip_first_space_ = true;
      } else {
        throw ctx.error("decoder type \"" + std::string(dt) + "\" is not supported (ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip are)");
      }
    }
  }
  t->finish_setup();
  return t;
}

}  // namespace ftllm::tokenizer
