// ftllm-grammar-bench: what constrained decoding costs per vocabulary. Reading the vocabulary into the
// grammar engine (once per model), compiling the 20-property tests/bench/twenty_properties.json (once per
// schema text; the cache makes the second time free), and masking plus accepting one token (every step of
// every constrained sequence), on random model wishes walking through the grammar.
//   ftllm-grammar-bench TOKENIZER_JSON STOP_TOKEN [--steps N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/output_grammar.h"
#include "tokenizer/tokenizer.h"

using namespace ftllm;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The schema with its property names made unique to `variant`, so each compiles afresh (not from the cache).
std::string renamed(std::string schema, int variant) {
  const std::string from = "\"field", to = "\"v" + std::to_string(variant) + "_field";
  for (size_t at = schema.find(from); at != std::string::npos; at = schema.find(from, at + to.size()))
    schema.replace(at, from.size(), to);
  return schema;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return std::fprintf(stderr, "usage: ftllm-grammar-bench TOKENIZER_JSON STOP_TOKEN [--steps N]\n"), 2;
  const int steps = argc > 4 ? std::stoi(argv[4]) : 2000;
  auto tok = tokenizer::Tokenizer::from_json(read_file(argv[1]), argv[1]);
  const std::string schema = read_file(FTLLM_SOURCE_ROOT "/tests/bench/twenty_properties.json");
  const int32_t stop = tok->token_id(argv[2]).value_or(-1);
  if (stop < 0) return std::fprintf(stderr, "no token %s\n", argv[2]), 2;

  auto t0 = Clock::now();
  grammar::GrammarCompiler compiler(*tok, tok->vocab_size(), {stop});
  const double vocabulary_ms = ms_since(t0);

  OutputConstraint c;
  c.kind = OutputConstraint::Kind::JsonSchema;
  c.param = "json_schema";
  std::vector<double> cold, cached;
  std::shared_ptr<const TokenGrammar> g;
  std::string error;
  for (int variant = 0; variant < 5; ++variant) {
    c.text = renamed(schema, variant);
    t0 = Clock::now();
    g = compiler.compile(c, error);
    cold.push_back(ms_since(t0));
    t0 = Clock::now();
    g = compiler.compile(c, error);
    cached.push_back(ms_since(t0));
    if (!g) return std::fprintf(stderr, "%s\n", error.c_str()), 1;
  }
  std::sort(cold.begin(), cold.end());
  std::sort(cached.begin(), cached.end());

  // Random wishes, masked, greedy: the per-token cost the scheduler adds to a constrained sequence.
  std::mt19937_64 rng(1);
  std::normal_distribution<float> noise(0.0f, 3.0f);
  std::vector<float> logits(size_t(tok->vocab_size()));
  std::vector<float> wishes(logits.size() * 8);
  for (float& w : wishes) w = noise(rng);
  double masking_ms = 0;
  int tokens = 0;
  auto matcher = g->start();
  for (int s = 0; s < steps; ++s) {
    std::copy_n(wishes.begin() + int64_t(size_t(s % 8) * logits.size()), logits.size(), logits.begin());
    t0 = Clock::now();
    matcher->mask(logits);
    const int32_t token = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    matcher->accept(token);
    masking_ms += ms_since(t0);
    ++tokens;
    if (token == stop) matcher = g->start();
  }
  std::printf("%s: vocabulary %d tokens read in %.0f ms; 20-property schema compiled in %.1f ms (median of 5, "
              "%.1f-%.1f), %.3f ms from the cache; mask + accept %.1f us per token (%d tokens)\n",
              argv[1], tok->vocab_size(), vocabulary_ms, cold[2], cold.front(), cold.back(), cached[2],
              masking_ms * 1000 / tokens, tokens);
  return 0;
}
