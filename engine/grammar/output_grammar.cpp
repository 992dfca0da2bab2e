#include "output_grammar.h"

#include <dlpack/dlpack.h>
#include <simdjson.h>
#include <xgrammar/xgrammar.h>

#include "../core/json_writer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <regex>
#include <set>

namespace ftllm::grammar {

namespace {

// One sequence's position in the grammar, and the bitmask of the tokens allowed next.
class Matcher final : public TokenMatcher {
 public:
  Matcher(const xgrammar::CompiledGrammar& compiled, int32_t vocab_size)
      : matcher_(compiled), vocab_size_(vocab_size), bits_(size_t(xgrammar::GetBitmaskSize(vocab_size))) {}

  void mask(std::span<float> logits) override {
    int64_t shape[1] = {int64_t(bits_.size())}, strides[1] = {1};
    DLTensor bits{bits_.data(), {kDLCPU, 0}, 1, xgrammar::GetBitmaskDLType(), shape, strides, 0};
    matcher_.FillNextTokenBitmask(&bits);
    // Bit i of the mask: token i may come next. Most words of it are all ones or all zeros.
    const size_t n = std::min(logits.size(), size_t(vocab_size_));
    for (size_t w = 0; w * 32 < n; ++w) {
      const uint32_t word = uint32_t(bits_[w]);
      if (word == ~0u) continue;
      for (size_t i = w * 32; i < std::min(n, w * 32 + 32); ++i)
        if (!(word >> (i % 32) & 1u)) logits[i] = -INFINITY;
    }
    for (size_t i = n; i < logits.size(); ++i) logits[i] = -INFINITY;
  }
  bool accept(int32_t token) override { return matcher_.AcceptToken(token); }
  bool complete() const override { return matcher_.IsTerminated(); }

 private:
  xgrammar::GrammarMatcher matcher_;
  int32_t vocab_size_;
  std::vector<int32_t> bits_;
};

class Compiled final : public TokenGrammar {
 public:
  Compiled(xgrammar::CompiledGrammar g, int32_t vocab_size) : grammar_(std::move(g)), vocab_size_(vocab_size) {}
  std::unique_ptr<TokenMatcher> start() const override { return std::make_unique<Matcher>(grammar_, vocab_size_); }

 private:
  xgrammar::CompiledGrammar grammar_;
  int32_t vocab_size_;
};

// JSON Schema keywords the grammar enforces, and those that only annotate. Anything else is refused
// by name: a keyword silently dropped would let through output the schema forbids.
const std::set<std::string_view> kEnforced = {
    "type", "properties", "required", "additionalProperties", "unevaluatedProperties", "patternProperties",
    "propertyNames", "minProperties", "maxProperties", "items", "prefixItems", "unevaluatedItems", "minItems",
    "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "pattern", "format",
    "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"};
const std::set<std::string_view> kAnnotations = {"title", "description", "default", "examples", "deprecated",
                                                 "readOnly", "writeOnly", "$comment", "$schema", "$id", "$anchor",
                                                 "contentMediaType", "contentEncoding"};
const std::set<std::string_view> kFormats = {"email", "date", "time", "date-time", "duration", "ipv4", "ipv6",
                                             "hostname", "uuid", "uri", "uri-reference", "uri-template",
                                             "json-pointer", "relative-json-pointer"};

using simdjson::dom::element;
using simdjson::dom::element_type;

// Why `schema` (at JSON pointer `at`) cannot be enforced exactly, or "" when it can.
std::string unenforceable(element schema, const std::string& at) {
  if (schema.type() == element_type::BOOL) return "";
  if (schema.type() != element_type::OBJECT) return at + " must be a schema (an object or a boolean)";
  simdjson::dom::object obj = schema;
  auto here = [&](std::string_view key) { return (at.empty() ? "" : at) + "/" + std::string(key); };
  for (auto [key, value] : obj) {
    if (kAnnotations.count(key)) continue;
    if (!kEnforced.count(key)) {
      if (key == "nullable") return "keyword \"nullable\" at " + here(key) + " is OpenAPI's, not JSON Schema's; write \"type\": [\"...\", \"null\"]";
      return "keyword \"" + std::string(key) + "\" at " + here(key) + " cannot be enforced";
    }
    if (key == "format") {
      std::string_view f;
      if (value.get(f) || !kFormats.count(f)) return "format \"" + (f.empty() ? simdjson::to_string(value) : std::string(f)) + "\" at " + here(key) + " cannot be enforced";
      if (!obj["minLength"].error() || !obj["maxLength"].error() || !obj["pattern"].error())
        return "format with minLength, maxLength or pattern at " + at + " cannot be enforced together";
    }
    if (key == "pattern" && (!obj["minLength"].error() || !obj["maxLength"].error()))
      return "pattern with minLength or maxLength at " + at + " cannot be enforced together";
    if (key == "multipleOf") {
      double m = 0;
      std::string_view type;
      if (value.get(m) || m != std::floor(m) || m <= 0 || obj["type"].get(type) || type != "integer")
        return "multipleOf at " + here(key) + " can be enforced only as a positive whole number on an integer";
    }
    if (key == "allOf" && (value.type() != element_type::ARRAY || simdjson::dom::array(value).size() != 1))
      return "allOf with other than one schema at " + here(key) + " cannot be enforced";
    // The subschemas, each checked the same way.
    if (key == "properties" || key == "$defs" || key == "definitions" || key == "patternProperties") {
      if (value.type() != element_type::OBJECT) return here(key) + " must be an object of schemas";
      for (auto [name, sub] : simdjson::dom::object(value))
        if (auto why = unenforceable(sub, here(key) + "/" + std::string(name)); !why.empty()) return why;
    } else if (key == "items" || key == "additionalProperties" || key == "unevaluatedProperties" ||
               key == "unevaluatedItems" || key == "propertyNames") {
      if (auto why = unenforceable(value, here(key)); !why.empty()) return why;
    } else if (key == "prefixItems" || key == "anyOf" || key == "oneOf" || key == "allOf") {
      if (value.type() != element_type::ARRAY) return here(key) + " must be an array of schemas";
      size_t i = 0;
      for (element sub : simdjson::dom::array(value))
        if (auto why = unenforceable(sub, here(key) + "/" + std::to_string(i++)); !why.empty()) return why;
    }
  }
  return "";
}

std::string const_string(const std::string& value) {
  JsonWriter w;
  return w.begin_object().key("type").string("const_string").key("value").string(value).end_object().take();
}

// Tool calls in the model's dialect (tool_dialect.h's CallSyntax) as a format of xgrammar's structural
// tags: each tool a tag whose fixed beginning names it and whose content is its parameters' schema, in
// JSON or in the dialect's parameter tags. Empty, with `error` set, when a tool's schema cannot be
// enforced.
std::string tool_calls_format(const OutputConstraint& c, std::string& error) {
  const text::CallSyntax syntax = text::call_syntax(c.dialect);
  simdjson::dom::parser parser;
  simdjson::padded_string text(c.text);
  simdjson::dom::array tools;
  if (parser.parse(text).get(tools)) {
    error = "tools must be an array";
    return "";
  }
  JsonWriter w;
  w.begin_object().key("type").string("tags_with_separator").key("separator").string(syntax.separator);
  w.key("at_least_one").boolean(true).key("stop_after_first").boolean(!c.parallel || syntax.single_call);
  w.key("tags").begin_array();
  size_t i = 0, offered = 0;
  for (element tool : tools) {
    const std::string at = "tools[" + std::to_string(i++) + "].function";
    std::string_view name;
    if (tool["function"]["name"].get(name)) {
      error = at + ".name is required";
      return "";
    }
    if (!c.only_tool.empty() && name != c.only_tool) continue;
    element parameters;
    std::string schema = R"({"type": "object"})";
    if (!tool["function"]["parameters"].get(parameters) && !parameters.is_null()) {
      if (error = unenforceable(parameters, ""); !error.empty()) {
        error = at + ".parameters: " + error;
        return "";
      }
      schema = simdjson::to_string(parameters);
    }
    JsonWriter quoted;
    quoted.string(name);
    // At most one space between tokens of the arguments: a model fond of whitespace cannot spend its
    // tokens on it (response_format output has none at all).
    JsonWriter args;
    args.begin_object().key("type").string("json_schema").key("json_schema").raw(schema);
    if (syntax.args_style != "json") args.key("style").string(syntax.args_style);
    args.key("max_whitespace_cnt").number(int64_t(1)).end_object();
    w.begin_object().key("type").string("tag");
    w.key("begin").string(syntax.begin + (syntax.name_is_json_string ? quoted.take() : std::string(name)) + syntax.name_end);
    if (syntax.index_end.empty()) {
      w.key("content").raw(args.take());
    } else {  // Kimi numbers its calls: functions.NAME:IDX
      w.key("content").begin_object().key("type").string("sequence").key("elements").begin_array();
      w.begin_object().key("type").string("regex").key("pattern").string("[0-9]{1,3}").end_object();
      w.raw(const_string(syntax.index_end)).raw(args.take()).end_array().end_object();
    }
    w.key("end").string(syntax.call_end).end_object();
    ++offered;
  }
  w.end_array().end_object();
  if (!offered) {
    error = c.only_tool.empty() ? "no tools are given" : "no tool is named " + c.only_tool;
    return "";
  }
  if (syntax.section_open.empty()) return w.take();
  JsonWriter section;
  section.begin_object().key("type").string("sequence").key("elements").begin_array();
  section.raw(const_string(syntax.section_open)).raw(w.take()).raw(const_string(syntax.section_close));
  return section.end_array().end_object().take();
}

// Free text that never opens a tool call (tool_choice "none").
std::string no_tool_calls_format(const OutputConstraint& c) {
  JsonWriter w;
  w.begin_object().key("type").string("any_text").key("excludes").begin_array();
  for (const std::string& opener : text::dialect_openers(c.dialect))
    w.string(opener == "{" ? "{\"name\"" : opener);  // Llama 3's bare JSON call: not every "{"
  return w.end_array().end_object().take();
}

// The constraint as a format of xgrammar's structural tags, for when it follows a <think> block.
std::string format_of(const OutputConstraint& c, std::string& error) {
  auto json = [](std::string_view schema) {
    JsonWriter w;
    w.begin_object().key("type").string("json_schema").key("json_schema").raw(schema);
    return w.key("max_whitespace_cnt").number(int64_t(1)).end_object().take();
  };
  switch (c.kind) {
    case OutputConstraint::Kind::JsonObject: return json(R"({"type": "object"})");
    case OutputConstraint::Kind::JsonSchema: return json(c.text);
    case OutputConstraint::Kind::Gbnf: {
      JsonWriter w;
      return w.begin_object().key("type").string("grammar").key("grammar").string(c.text).end_object().take();
    }
    case OutputConstraint::Kind::ToolCalls: return tool_calls_format(c, error);
    case OutputConstraint::Kind::NoToolCalls: return no_tool_calls_format(c);
    case OutputConstraint::Kind::None: break;
  }
  return "";
}

// A structural tag: the thinking the template allows (free text up to </think>, then the blank lines
// that separate it; gpt-oss: an analysis message), then `format`.
std::string structural_tag(std::string format, const OutputConstraint& c) {
  const bool harmony = c.dialect == text::ToolDialect::Harmony;
  if (harmony && c.kind != OutputConstraint::Kind::ToolCalls && c.kind != OutputConstraint::Kind::NoToolCalls) {
    // gpt-oss answers in its final channel.
    JsonWriter final_answer;
    final_answer.begin_object().key("type").string("sequence").key("elements").begin_array();
    format = final_answer.raw(const_string("<|channel|>final<|message|>")).raw(format).end_array().end_object().take();
  }
  const OutputConstraint::Thinking thinking = c.thinking;
  JsonWriter w;
  w.begin_object().key("type").string("structural_tag").key("format");
  if (thinking == OutputConstraint::Thinking::None) return w.raw(format).end_object().take();
  JsonWriter think;
  think.begin_object().key("type").string("tag");
  think.key("begin").string(thinking == OutputConstraint::Thinking::Opened ? "" : harmony ? "<|channel|>analysis<|message|>" : "<think>");
  think.key("content").begin_object().key("type").string("any_text").end_object();
  think.key("end").string(harmony ? "<|end|><|start|>assistant" : "</think>").end_object();
  w.begin_object().key("type").string("sequence").key("elements").begin_array();
  if (thinking == OutputConstraint::Thinking::Opened) w.raw(think.take());
  else w.begin_object().key("type").string("optional").key("content").raw(think.take()).end_object();
  w.begin_object().key("type").string("regex").key("pattern").string("\\s{0,4}").end_object();
  w.raw(format).end_array().end_object();
  return w.end_object().take();
}

// xgrammar's messages start as its log lines do ("[03:04:58] path/grammar_parser.cc:820: "), which
// tells a user nothing: the message is what follows, without trailing newlines.
std::string without_log_prefix(std::string message) {
  static const std::regex prefix(R"(^\[[0-9:]+\] [^ ]+:[0-9]+: )");
  message = std::regex_replace(message, prefix, "");
  while (!message.empty() && std::isspace(static_cast<unsigned char>(message.back()))) message.pop_back();
  return message;
}

}  // namespace

struct GrammarCompiler::Impl {
  mutable xgrammar::GrammarCompiler compiler;  // holds the vocabulary (TokenizerInfo) it was given
  int32_t vocab_size;
  Impl(const xgrammar::TokenizerInfo& info, int32_t v)
      // One thread: requests compile on the daemon's workers already, side by side. The cache keeps
      // compiled grammars by schema text up to 64 MiB.
      : compiler(info, 1, true, 64ll << 20), vocab_size(v) {}
};

namespace {

xgrammar::TokenizerInfo tokenizer_info(const tokenizer::Tokenizer& t, int64_t vocab_size, const std::vector<int32_t>& stop_ids,
                                       const std::vector<std::string>& markers) {
  // Each token as the bytes it decodes to; special tokens as "", which xgrammar never allows (the stop
  // tokens, named, only once the output is complete), except the markers of the model's tool-call
  // dialect, which enforced calls are written with.
  std::vector<std::string> vocab(size_t(t.vocab_size()));
  for (int32_t id = 0; id < t.vocab_size(); ++id)
    if (!t.is_special(id)) vocab[size_t(id)] = t.token_bytes(id);
  for (const std::string& marker : markers)
    if (auto id = t.token_id(marker); id && std::find(stop_ids.begin(), stop_ids.end(), *id) == stop_ids.end())
      vocab[size_t(*id)] = marker;
  std::vector<int32_t> stops;
  for (int32_t id : stop_ids)
    if (id >= 0 && id < vocab_size) stops.push_back(id);
  return xgrammar::TokenizerInfo(vocab, xgrammar::VocabType::RAW, int(std::max<int64_t>(vocab_size, t.vocab_size())), stops);
}

}  // namespace

GrammarCompiler::GrammarCompiler(const tokenizer::Tokenizer& t, int64_t vocab_size, const std::vector<int32_t>& stop_ids,
                                 text::ToolDialect dialect)
    : impl_(std::make_unique<Impl>(tokenizer_info(t, vocab_size, stop_ids, text::dialect_markers(dialect)),
                                   int32_t(std::max<int64_t>(vocab_size, t.vocab_size())))) {}

GrammarCompiler::~GrammarCompiler() = default;

std::shared_ptr<const TokenGrammar> GrammarCompiler::compile(const OutputConstraint& c, std::string& error) const {
  try {
    if (c.kind == OutputConstraint::Kind::JsonSchema) {
      simdjson::dom::parser parser;
      simdjson::padded_string text(c.text);
      element schema;
      if (parser.parse(text).get(schema)) {
        error = "the schema is not valid JSON";
        return nullptr;
      }
      if (error = unenforceable(schema, ""); !error.empty()) return nullptr;
    }
    if (c.kind != OutputConstraint::Kind::None &&
        (c.thinking != OutputConstraint::Thinking::None || c.kind == OutputConstraint::Kind::ToolCalls ||
         c.kind == OutputConstraint::Kind::NoToolCalls || c.dialect == text::ToolDialect::Harmony)) {
      const std::string format = format_of(c, error);
      if (format.empty()) return nullptr;
      return std::make_shared<Compiled>(impl_->compiler.CompileStructuralTag(structural_tag(format, c)), impl_->vocab_size);
    }
    switch (c.kind) {
      case OutputConstraint::Kind::None: return nullptr;
      case OutputConstraint::Kind::JsonObject:
        // Compact (no free whitespace): a model that likes spaces cannot spend its tokens on them.
        return std::make_shared<Compiled>(impl_->compiler.CompileJSONSchema(R"({"type": "object"})", false), impl_->vocab_size);
      case OutputConstraint::Kind::JsonSchema:
        return std::make_shared<Compiled>(impl_->compiler.CompileJSONSchema(c.text, false), impl_->vocab_size);
      case OutputConstraint::Kind::Gbnf:
        return std::make_shared<Compiled>(impl_->compiler.CompileGrammar(c.text, "root"), impl_->vocab_size);
      case OutputConstraint::Kind::ToolCalls:
      case OutputConstraint::Kind::NoToolCalls: break;  // a structural tag, above
    }
  } catch (const std::exception& e) {
    error = without_log_prefix(e.what());
    return nullptr;
  }
  return nullptr;
}

}  // namespace ftllm::grammar
