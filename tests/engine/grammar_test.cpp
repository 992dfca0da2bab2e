// Constrained decoding against real vocabularies (SentencePiece with byte fallback, byte-level BPE, Qwen's
// 151k): random "model wishes" walk through the grammar's masks, and whatever they pick must decode to
// output the grammar allows. A random walk that runs out of steps is a max_tokens cut-off, the one case
// where output may be incomplete; the schemas here are finite, so every walk must end.
#include <simdjson.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "grammar/output_grammar.h"
#include "scheduler/scheduler.h"
#include "text/output_parser.h"
#include "tokenizer/tokenizer.h"

using namespace ftllm;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BOOST_REQUIRE_MESSAGE(in, "cannot read " << path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Vocabulary {
  std::string name;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  int32_t stop = -1;
  int64_t vocab_size = 0;  // the logits' width: past the tokenizer's, as models pad their embeddings
};

Vocabulary vocabulary(const std::string& name, const std::string& stop_token) {
  Vocabulary v;
  v.name = name;
  v.tokenizer = tokenizer::Tokenizer::from_json(read_file(FTLLM_SOURCE_ROOT "/tests/data/tokenizers/" + name + "/tokenizer.json"), name);
  v.stop = v.tokenizer->token_id(stop_token).value_or(-1);
  BOOST_REQUIRE_MESSAGE(v.stop >= 0, name << " has no " << stop_token);
  v.vocab_size = v.tokenizer->vocab_size() + 64;
  return v;
}

const std::vector<Vocabulary>& vocabularies() {
  static const std::vector<Vocabulary> all = [] {
    std::vector<Vocabulary> v;
    v.push_back(vocabulary("llama2", "</s>"));
    v.push_back(vocabulary("llama3", "<|end_of_text|>"));
    v.push_back(vocabulary("qwen3", "<|im_end|>"));
    return v;
  }();
  return all;
}

struct Walk {
  std::string text;
  bool ended = false;  // the grammar completed and the stop token was taken
};

// Random logits, masked by the grammar, then greedy or "sampled" (argmax after more noise): the
// scheduler's order. Every token drawn must be allowed, and the stop token may
// come only once the output is complete. The logits are windows into one pool of noise, so a step costs
// a copy rather than 151k draws.
Walk walk(const Vocabulary& v, const TokenGrammar& grammar, uint64_t seed, bool sample, int max_steps = 400) {
  static std::map<int64_t, std::vector<float>> pools;
  std::vector<float>& pool = pools[v.vocab_size];
  if (pool.empty()) {
    std::mt19937_64 fill(42);
    std::normal_distribution<float> noise(0.0f, 3.0f);
    pool.resize(size_t(v.vocab_size) * 3);
    for (float& x : pool) x = noise(fill);
  }
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> window(0, pool.size() - size_t(v.vocab_size));
  auto matcher = grammar.start();
  std::vector<int32_t> tokens;
  std::vector<float> logits(size_t(v.vocab_size));
  for (int step = 0; step < max_steps; ++step) {
    std::copy_n(pool.begin() + int64_t(window(rng)), logits.size(), logits.begin());
    matcher->mask(logits);
    if (sample) {
      const float* extra = pool.data() + window(rng);
      for (size_t i = 0; i < logits.size(); ++i) logits[i] += extra[i];
    }
    const int32_t token = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    BOOST_REQUIRE_MESSAGE(!std::isinf(logits[size_t(token)]), v.name << ": the mask allowed no token after " << tokens.size());
    BOOST_REQUIRE_MESSAGE(matcher->accept(token), v.name << ": the matcher refused token " << token << " it allowed");
    if (token == v.stop) {
      BOOST_REQUIRE(matcher->complete());
      return {v.tokenizer->decode(tokens), true};
    }
    BOOST_REQUIRE_MESSAGE(token < v.tokenizer->vocab_size() && !v.tokenizer->is_special(token),
                          v.name << ": special or padding token " << token << " allowed");
    tokens.push_back(token);
  }
  return {v.tokenizer->decode(tokens), false};
}

std::shared_ptr<const TokenGrammar> compile(const Vocabulary& v, OutputConstraint c) {
  static std::map<std::string, std::unique_ptr<grammar::GrammarCompiler>> compilers;
  auto& compiler = compilers[v.name];
  if (!compiler) compiler = std::make_unique<grammar::GrammarCompiler>(*v.tokenizer, v.vocab_size, std::vector<int32_t>{v.stop});
  std::string error;
  auto g = compiler->compile(c, error);
  BOOST_REQUIRE_MESSAGE(g, v.name << ": " << error);
  return g;
}

OutputConstraint constraint(OutputConstraint::Kind kind, std::string text) {
  OutputConstraint c;
  c.kind = kind;
  c.text = std::move(text);
  c.param = "the test's constraint";
  if (kind == OutputConstraint::Kind::ToolCalls) c.dialect = text::ToolDialect::Hermes;
  return c;
}

// Two tools whose arguments are easy to check: a bounded string and an enum, two bounded integers.
const std::string kTwoTools = R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["C", "F"]}},
      "required": ["city", "unit"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
      "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"type": "integer", "minimum": 0, "maximum": 99}},
      "required": ["a", "b"], "additionalProperties": false}}}])";

simdjson::dom::element parse(simdjson::dom::parser& parser, const std::string& text) {
  simdjson::dom::element e;
  BOOST_REQUIRE_MESSAGE(!parser.parse(text).get(e), "not JSON: " << text);
  return e;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(constrained_decoding)

// A Pydantic-shaped schema: required fields, an enum, bounded integers and strings, a nullable field, an
// array with bounds, a nested object through $ref, and no other properties.
BOOST_AUTO_TEST_CASE(random_wishes_yield_output_that_validates_against_the_schema) {
  const std::string schema = R"({
    "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "integer", "minimum": -5, "maximum": 5},
                                                         "y": {"type": "boolean"}},
                        "required": ["x", "y"], "additionalProperties": false}},
    "type": "object",
    "properties": {
      "name": {"type": "string", "minLength": 1, "maxLength": 6},
      "colour": {"enum": ["red", "green", "blue"]},
      "age": {"type": "integer", "minimum": 0, "maximum": 120},
      "nick": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]},
      "tags": {"type": "array", "items": {"const": "t"}, "minItems": 1, "maxItems": 3},
      "at": {"$ref": "#/$defs/Point"}
    },
    "required": ["name", "colour", "age", "nick", "tags", "at"],
    "additionalProperties": false})";
  for (const Vocabulary& v : vocabularies())
    for (bool sample : {false, true}) {
      auto g = compile(v, constraint(OutputConstraint::Kind::JsonSchema, schema));
      for (uint64_t seed = 0; seed < 4; ++seed) {
        Walk w = walk(v, *g, seed, sample);
        BOOST_TEST_CONTEXT(v.name << (sample ? " sampled" : " greedy") << " seed " << seed << ": " << w.text) {
          BOOST_REQUIRE(w.ended);
          simdjson::dom::parser parser;
          simdjson::dom::object o = parse(parser, w.text);
          BOOST_TEST(o.size() == 6u);
          std::string_view name, colour;
          BOOST_REQUIRE(!o["name"].get(name));
          // maxLength counts characters, which may take several bytes each
          BOOST_TEST((!name.empty() && name.size() <= 24));
          BOOST_REQUIRE(!o["colour"].get(colour));
          BOOST_TEST((colour == "red" || colour == "green" || colour == "blue"));
          int64_t age = -1;
          BOOST_REQUIRE(!o["age"].get(age));
          BOOST_TEST((age >= 0 && age <= 120));
          BOOST_TEST((o["nick"].is_null() || o["nick"].is_string()));
          simdjson::dom::array tags;
          BOOST_REQUIRE(!o["tags"].get(tags));
          BOOST_TEST((tags.size() >= 1 && tags.size() <= 3));
          int64_t x = 99;
          bool y;
          BOOST_REQUIRE(!o["at"]["x"].get(x));
          BOOST_TEST((x >= -5 && x <= 5));
          BOOST_TEST(!o["at"]["y"].get(y));
        }
      }
    }
}

BOOST_AUTO_TEST_CASE(json_object_mode_yields_a_json_object) {
  for (const Vocabulary& v : vocabularies()) {
    auto g = compile(v, constraint(OutputConstraint::Kind::JsonObject, ""));
    int ended = 0;
    for (uint64_t seed = 0; seed < 6; ++seed) {
      // Random wishes may open strings and arrays without end; an ended walk must be an object.
      Walk w = walk(v, *g, seed, true, 200);
      BOOST_TEST_CONTEXT(v.name << " seed " << seed << ": " << w.text) {
        BOOST_TEST(w.text.starts_with("{"));
        if (!w.ended) continue;
        ++ended;
        simdjson::dom::parser parser;
        BOOST_TEST(parse(parser, w.text).is_object());
      }
    }
    BOOST_TEST_MESSAGE(v.name << ": " << ended << " of 6 random walks closed their object within 200 tokens");
    BOOST_TEST(ended > 0, v.name << ": no walk closed its object, so none was checked");
  }
}

BOOST_AUTO_TEST_CASE(a_gbnf_grammar_is_followed) {
  const std::string gbnf = R"(root ::= answer " " digit digit
answer ::= "yes" | "no" | "maybe"
digit ::= [0-9])";
  for (const Vocabulary& v : vocabularies()) {
    auto g = compile(v, constraint(OutputConstraint::Kind::Gbnf, gbnf));
    std::set<std::string> seen;
    for (uint64_t seed = 0; seed < 8; ++seed) {
      Walk w = walk(v, *g, seed, true);
      BOOST_TEST_CONTEXT(v.name << " seed " << seed << ": " << w.text) {
        BOOST_REQUIRE(w.ended);
        const size_t space = w.text.find(' ');
        BOOST_REQUIRE(space != std::string::npos);
        const std::string answer = w.text.substr(0, space), digits = w.text.substr(space + 1);
        BOOST_TEST((answer == "yes" || answer == "no" || answer == "maybe"));
        BOOST_TEST((digits.size() == 2 && std::isdigit(digits[0]) && std::isdigit(digits[1])));
        seen.insert(answer);
      }
    }
    BOOST_TEST(seen.size() > 1u, v.name << ": the walks all chose the same answer");
  }
}

// tool_choice "required" or a named tool: calls in the <tool_call> format, each naming an offered tool
// (or the one named) with arguments valid against its parameters; one call when parallel calls are off.
BOOST_AUTO_TEST_CASE(required_tool_calls_follow_the_format_and_the_parameters) {
  const std::string& tools = kTwoTools;
  struct Case {
    std::string only;
    bool parallel;
  };
  for (const Vocabulary& v : vocabularies())
    for (const Case& c : {Case{"", true}, Case{"add", true}, Case{"get_weather", false}}) {
      OutputConstraint calls = constraint(OutputConstraint::Kind::ToolCalls, tools);
      calls.only_tool = c.only;
      calls.parallel = c.parallel;
      auto g = compile(v, calls);
      std::set<std::string> names;
      for (uint64_t seed = 0; seed < 4; ++seed) {
        Walk w = walk(v, *g, seed, true, 600);
        BOOST_TEST_CONTEXT(v.name << " only '" << c.only << "' seed " << seed << ": " << w.text) {
          BOOST_REQUIRE(w.ended);
          size_t at = 0, count = 0;
          while (at < w.text.size()) {
            if (count) {
              BOOST_REQUIRE(w.text.compare(at, 1, "\n") == 0);
              ++at;
            }
            BOOST_REQUIRE(w.text.compare(at, 12, "<tool_call>\n") == 0);
            const size_t end = w.text.find("\n</tool_call>", at);
            BOOST_REQUIRE(end != std::string::npos);
            simdjson::dom::parser parser;
            simdjson::dom::object call = parse(parser, w.text.substr(at + 12, end - at - 12));
            std::string_view name;
            BOOST_REQUIRE(!call["name"].get(name));
            names.insert(std::string(name));
            simdjson::dom::object args;
            BOOST_REQUIRE(!call["arguments"].get(args));
            if (name == "add") {
              int64_t a = -1, b = -1;
              BOOST_TEST((!args["a"].get(a) && !args["b"].get(b) && a >= 0 && a <= 99 && b >= 0 && b <= 99));
            } else {
              BOOST_REQUIRE(name == "get_weather");
              std::string_view unit;
              BOOST_TEST((!args["unit"].get(unit) && (unit == "C" || unit == "F") && args["city"].is_string()));
            }
            BOOST_TEST(args.size() == 2u);
            at = end + 13;
            ++count;
          }
          BOOST_TEST(count >= 1u);
          if (!c.parallel) BOOST_TEST(count == 1u);
        }
      }
      if (!c.only.empty()) BOOST_TEST((names == std::set<std::string>{c.only}));
    }
}

// Every dialect's enforced calls, whatever the model wishes, are calls its own parser reads back: the
// grammar and the parser agree on the syntax, and the arguments keep to each tool's parameters.
BOOST_AUTO_TEST_CASE(enforced_calls_in_every_dialect_parse_back) {
  const std::string& tools = kTwoTools;
  using text::ToolDialect;
  for (ToolDialect d : {ToolDialect::Hermes, ToolDialect::QwenXml, ToolDialect::Glm, ToolDialect::Llama3, ToolDialect::MistralJson,
                        ToolDialect::Mistral, ToolDialect::DeepSeekR1, ToolDialect::DeepSeekV31, ToolDialect::Kimi, ToolDialect::Harmony})
    for (const Vocabulary& v : vocabularies()) {
      if (v.name == "llama3") continue;  // two vocabularies suffice here: SentencePiece and Qwen's 151k
      OutputConstraint calls = constraint(OutputConstraint::Kind::ToolCalls, tools);
      calls.dialect = d;
      auto g = compile(v, calls);
      for (uint64_t seed = 0; seed < 3; ++seed) {
        Walk w = walk(v, *g, seed, seed % 2 == 1, 800);
        BOOST_TEST_CONTEXT(text::dialect_name(d) << " " << v.name << " seed " << seed << ": " << w.text) {
          BOOST_REQUIRE(w.ended);
          text::OutputParser parser(false, false, d, true, tools);
          text::ParsedDelta a = parser.push(w.text), b = parser.finish();
          std::vector<ToolCall> found = a.tool_calls;
          found.insert(found.end(), b.tool_calls.begin(), b.tool_calls.end());
          BOOST_TEST(found.size() >= 1u);
          if (text::call_syntax(d).single_call) BOOST_TEST(found.size() == 1u);
          BOOST_TEST((a.content + b.content).find_first_not_of(" \n") == std::string::npos, "content: " << a.content + b.content);
          for (const ToolCall& call : found) {
            simdjson::dom::parser json;
            simdjson::dom::object args = parse(json, call.arguments_json);
            if (call.name == "add") {
              int64_t x = -1, y = -1;
              BOOST_TEST((!args["a"].get(x) && !args["b"].get(y) && x >= 0 && x <= 99 && y >= 0 && y <= 99), call.arguments_json);
            } else {
              BOOST_REQUIRE(call.name == "get_weather");
              std::string_view unit, city;
              BOOST_TEST((!args["unit"].get(unit) && (unit == "C" || unit == "F") && !args["city"].get(city)), call.arguments_json);
              // maxLength counts characters: UTF-8 bytes that do not continue one.
              BOOST_TEST(std::count_if(city.begin(), city.end(), [](char ch) { return (ch & 0xC0) != 0x80; }) <= 8, city);
            }
            BOOST_TEST(args.size() == 2u);
          }
        }
      }
    }
}

// tool_choice "none" with tools rendered: the model may write anything but a call's opener.
BOOST_AUTO_TEST_CASE(no_tool_calls_forbids_the_dialects_opener) {
  const Vocabulary& qwen3 = vocabularies().back();
  OutputConstraint none = constraint(OutputConstraint::Kind::NoToolCalls, "");
  none.dialect = text::ToolDialect::Hermes;
  auto g = compile(qwen3, none);
  auto m = g->start();
  std::vector<float> logits(size_t(qwen3.vocab_size), 0.0f);
  m->mask(logits);
  const int32_t opener = qwen3.tokenizer->token_id("<tool_call>").value();
  BOOST_TEST(std::isinf(logits[size_t(opener)]));  // the opener's own token
  BOOST_TEST(!std::isinf(logits[size_t(qwen3.tokenizer->token_id("Hello").value())]));
  BOOST_TEST(!std::isinf(logits[size_t(qwen3.stop)]));  // an answer may end at once
  for (uint64_t seed = 0; seed < 3; ++seed) {
    Walk w = walk(qwen3, *g, seed, true, 200);
    BOOST_TEST(w.text.find("<tool_call>") == std::string::npos, w.text);
  }
  // Spelled out a piece at a time, it is still refused before it is whole.
  auto spelled = g->start();
  for (std::string_view piece : {"Sure. <", "tool", "_call"}) {
    std::vector<float> l(size_t(qwen3.vocab_size), 0.0f);
    spelled->mask(l);
    const auto ids = qwen3.tokenizer->encode(piece, false, false);
    for (int32_t id : ids) BOOST_REQUIRE(spelled->accept(id));
  }
  std::vector<float> last(size_t(qwen3.vocab_size), 0.0f);
  spelled->mask(last);
  BOOST_TEST(std::isinf(last[size_t(qwen3.tokenizer->encode(">", false, false).at(0))]));
}

// The mask changes nothing else: on the logits transformers computed for a fixture model (qwen2-f32's
// last prompt position, read through the byte tokenizer), a grammar allowing the ten digits leaves the
// scheduler's greedy choice, its logprobs and its sampling (temperature, top-k, top-p) exactly those of
// transformers' distribution with the other tokens removed. The sampled frequencies of 4,000 seeded
// draws are held to the expected ones by a chi-square test.
BOOST_AUTO_TEST_CASE(masked_sampling_is_transformers_distribution_with_the_mask) {
  simdjson::dom::parser parser;
  simdjson::dom::element reference = parser.load(FTLLM_SOURCE_ROOT "/tests/data/models/qwen2-f32/reference.json");
  std::vector<float> logits;
  for (double x : reference["last_logits"].get_array()) logits.push_back(float(x));
  const int64_t vocab = int64_t(logits.size());
  auto bytes = tokenizer::Tokenizer::from_json(read_file(FTLLM_SOURCE_ROOT "/tests/data/tokenizers/bytes/tokenizer.json"), "bytes");
  grammar::GrammarCompiler compiler(*bytes, vocab, {2});
  std::string error;
  auto digits = compiler.compile(constraint(OutputConstraint::Kind::Gbnf, "root ::= [0-9]"), error);
  BOOST_REQUIRE_MESSAGE(digits, error);
  std::vector<int32_t> allowed;
  for (char c = '0'; c <= '9'; ++c) allowed.push_back(bytes->encode(std::string(1, c), false, false).at(0));

  struct Setting {
    float temperature, top_p;
    int32_t top_k;
  };
  for (const Setting& set : {Setting{0, 1, 0}, Setting{1.0f, 1, 0}, Setting{0.7f, 1, 0}, Setting{1.3f, 1, 3}, Setting{1.0f, 0.6f, 0}}) {
    // The oracle: transformers' logits, every token but the digits removed, then temperature, top-k, top-p.
    std::vector<double> expected(size_t(vocab), 0.0);
    const double t = set.temperature > 0 ? set.temperature : 1.0;
    double z = 0;
    for (int32_t id : allowed) z += std::exp(double(logits[size_t(id)]) / t);
    std::vector<int32_t> order = allowed;
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
    double kept = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      const double p = std::exp(double(logits[size_t(order[i])]) / t) / z;
      if ((set.top_k && int32_t(i) >= set.top_k) || (i > 0 && kept >= set.top_p)) break;
      expected[size_t(order[i])] = p;
      kept += p;
    }
    for (double& p : expected) p /= kept;
    const int draws = set.temperature > 0 ? 4000 : 1;
    scheduler::Scheduler s;
    for (int i = 0; i < draws; ++i) {
      GenerationRequest g;
      g.prompt = {1};
      g.max_tokens = 1;
      g.grammar = digits;
      g.logprobs = 10;
      g.sampling.temperature = set.temperature;
      g.sampling.top_k = set.top_k;
      g.sampling.top_p = set.top_p;
      g.sampling.seed = uint64_t(i);
      const std::vector<int32_t> eos = {2};
      s.add(g, eos);
    }
    std::vector<int> counts(size_t(vocab), 0);
    std::vector<std::vector<float>> rows;
    while (!s.idle()) {
      scheduler::StepPlan plan = s.plan();
      rows.assign(plan.items.size(), logits);
      std::vector<float*> ptrs;
      for (auto& r : rows) ptrs.push_back(r.data());
      for (const auto& taken : s.commit(plan, ptrs, vocab)) {
        BOOST_REQUIRE(std::count(allowed.begin(), allowed.end(), taken.token) == 1);
        ++counts[size_t(taken.token)];
        // Logprobs: log-softmax of the masked logits, as transformers' with the mask (not tempered).
        BOOST_REQUIRE(taken.logprob);
        double zl = 0;
        for (int32_t id : allowed) zl += std::exp(double(logits[size_t(id)]));
        BOOST_TEST(taken.logprob->logprob == double(logits[size_t(taken.token)]) - std::log(zl), boost::test_tools::tolerance(1e-4));
        BOOST_TEST(taken.logprob->top.size() == allowed.size());
        for (auto [alt, lp] : taken.logprob->top) BOOST_TEST(std::count(allowed.begin(), allowed.end(), alt) == 1);
      }
      s.take_finished();
    }
    if (set.temperature == 0) {
      BOOST_TEST(counts[size_t(order[0])] == 1);
      continue;
    }
    double chi2 = 0;
    int cells = 0;
    for (int32_t id : allowed) {
      const double e = expected[size_t(id)] * draws;
      if (e == 0) {
        BOOST_TEST(counts[size_t(id)] == 0, "token " << id << " is outside top-k/top-p");
        continue;
      }
      chi2 += (counts[size_t(id)] - e) * (counts[size_t(id)] - e) / e;
      ++cells;
    }
    // 99.99th percentile of chi-square with at most 9 degrees of freedom is 33.7: a sampler off the
    // masked distribution by a few percent lands far beyond it, a right one almost never does (and the
    // seeds are fixed, so it passes or fails the same way each run).
    BOOST_TEST(chi2 < 33.7, "T " << set.temperature << " top_k " << set.top_k << " top_p " << set.top_p << ": chi2 " << chi2
                                 << " over " << cells << " cells");
  }
}

// A model that wants to write `text`: each step it takes the longest allowed token that continues it.
void feed(const Vocabulary& v, TokenMatcher& m, std::string_view text) {
  while (!text.empty()) {
    std::vector<float> logits(size_t(v.vocab_size), 0.0f);
    m.mask(logits);
    int32_t best = -1;
    size_t best_size = 0;
    for (int32_t id = 0; id < v.tokenizer->vocab_size(); ++id) {
      const std::string& bytes = v.tokenizer->token_bytes(id);
      if (!std::isinf(logits[size_t(id)]) && bytes.size() > best_size && text.starts_with(bytes)) best = id, best_size = bytes.size();
    }
    BOOST_REQUIRE_MESSAGE(best >= 0, v.name << ": no allowed token continues \"" << text << "\"");
    BOOST_REQUIRE(m.accept(best));
    text.remove_prefix(best_size);
  }
}

// A template that thinks: the constraint starts after </think>, so the reasoning stays free (and the
// output parser still finds it); when the prompt opened the block, it must be closed first.
BOOST_AUTO_TEST_CASE(thinking_stays_free_and_the_constraint_follows_it) {
  const std::string schema = R"({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false})";
  for (const Vocabulary& v : vocabularies()) {
    OutputConstraint opened = constraint(OutputConstraint::Kind::JsonSchema, schema);
    opened.thinking = OutputConstraint::Thinking::Opened;
    auto g = compile(v, opened);
    auto m = g->start();
    feed(v, *m, "Free thoughts: {not json} and <b>tags</b>.</think>\n\n{\"ok\": true}");
    std::vector<float> logits(size_t(v.vocab_size), 0.0f);
    m->mask(logits);
    BOOST_TEST(!std::isinf(logits[size_t(v.stop)]), v.name << ": the stop token is not allowed after the object");
    BOOST_TEST(m->accept(v.stop));
    BOOST_TEST(m->complete());

    OutputConstraint optional = constraint(OutputConstraint::Kind::JsonSchema, schema);
    optional.thinking = OutputConstraint::Thinking::Optional;
    g = compile(v, optional);
    m = g->start();
    feed(v, *m, "<think>Hmm.</think>\n{\"ok\": false}");
    BOOST_TEST(m->accept(v.stop));
    m = g->start();
    feed(v, *m, "{\"ok\": false}");  // or no thinking at all
    BOOST_TEST(m->accept(v.stop));
    m = g->start();
    logits.assign(size_t(v.vocab_size), 0.0f);
    m->mask(logits);
    const int32_t prose = v.tokenizer->encode("Sure", false, false).at(0);
    BOOST_TEST(std::isinf(logits[size_t(prose)]), v.name << ": prose allowed before the object");
  }
}

// What the grammar cannot enforce is refused by name, never dropped: the request gets a 400 saying so.
BOOST_AUTO_TEST_CASE(what_cannot_be_enforced_is_refused_by_name) {
  const Vocabulary& v = vocabularies()[0];
  grammar::GrammarCompiler compiler(*v.tokenizer, v.vocab_size, {v.stop});
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"({"type": "object", "properties": {"a": {"not": {"type": "string"}}}})", "\"not\" at /properties/a/not"},
      {R"({"type": "array", "uniqueItems": true})", "\"uniqueItems\""},
      {R"({"type": "number", "multipleOf": 0.5})", "multipleOf"},
      {R"({"type": "string", "format": "credit-card"})", "format \"credit-card\""},
      {R"({"type": "string", "nullable": true})", "\"nullable\""},
      {R"({"if": {"type": "string"}, "then": {"maxLength": 2}})", "\"if\""},
      {R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}})", ""},
      {R"({"type": "strin"})", ""},
      {"not json", "not valid JSON"},
  };
  for (auto& [schema, says] : refused) {
    std::string error;
    BOOST_TEST(!compiler.compile(constraint(OutputConstraint::Kind::JsonSchema, schema), error), schema);
    BOOST_TEST(!error.empty(), schema);
    BOOST_TEST(error.find(says) != std::string::npos, schema << " -> " << error);
  }
  std::string error;
  BOOST_TEST(!compiler.compile(constraint(OutputConstraint::Kind::Gbnf, "root ::= missing_rule"), error));
  // The grammar engine's own words, without its log line's time and source position.
  BOOST_TEST(error.find("Rule \"missing_rule\" is not defined") != std::string::npos, error);
  BOOST_TEST(error.starts_with("EBNF parser error"), error);
  BOOST_TEST(!error.ends_with("\n"));
  error.clear();
  BOOST_TEST(!compiler.compile(constraint(OutputConstraint::Kind::Gbnf, "root ::= \"unterminated"), error));
  BOOST_TEST(!error.empty());
}

BOOST_AUTO_TEST_SUITE_END()
