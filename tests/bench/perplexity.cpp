// ftllm-perplexity: a model's perplexity over a text file, computed as llama.cpp's llama-perplexity does so
// the two can be compared on the same model file and text. A program, not a test.
//
//   ftllm-perplexity MODEL -f TEXT [-c CTX] [--chunks N] [-t THREADS]
//
// The text is tokenized whole (with the tokenizer's BOS when it adds one) and cut into chunks of CTX
// tokens; each chunk starts with BOS when the model uses one, and only the second half of each chunk is
// scored, so every scored token sees at least CTX/2 tokens of context.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "runner/model_instance.h"
#include "../common/model_run.h"
#include "tokenizer/tokenizer.h"

using namespace ftllm;

namespace {

// -log p(target) under the softmax of `logits`, in double precision.
double negative_log_likelihood(const std::vector<float>& logits, int32_t target) {
  double max = logits[0];
  for (float v : logits) max = std::max(max, double(v));
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - max);
  return std::log(sum) - (double(logits[size_t(target)]) - max);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, text_file;
  int64_t ctx = 512, max_chunks = 0;
  int threads = 0;
  std::string dtype = "auto", kernels = "auto";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "-f") text_file = value();
    else if (a == "-c") ctx = std::stoll(value());
    else if (a == "--chunks") max_chunks = std::stoll(value());
    else if (a == "-t") threads = std::stoi(value());
    else if (a == "--dtype") dtype = value();
    else if (a == "--kernels") kernels = value();
    else if (a.starts_with("-")) return std::fprintf(stderr, "unknown option %s\n", a.c_str()), 2;
    else model = a;
  }
  if (model.empty() || text_file.empty() || ctx < 4)
    return std::fprintf(stderr, "usage: ftllm-perplexity MODEL -f TEXT [-c CTX] [--chunks N] [-t THREADS] [--dtype D] [--kernels K]\n"), 2;

  ModelLoadOptions o;
  o.path = model;
  o.threads = threads;
  o.context_length = ctx;
  o.max_sequences = 1;
  o.dtype = dtype;
  o.kernels = kernels;
  std::unique_ptr<ModelInstance> m;
  std::string text;
  try {
    m = ModelInstance::load(o);
    text = read_text_file(text_file);
  } catch (const std::exception& e) {
    return std::fprintf(stderr, "ftllm-perplexity: %s\n", e.what()), 1;
  }
  const auto* tok = m->text().tokenizer.get();
  if (!tok) return std::fprintf(stderr, "ftllm-perplexity: %s has no tokenizer\n", model.c_str()), 1;
  std::vector<int32_t> tokens = tok->encode(text, true, false);
  std::vector<int32_t> plain = tok->encode(text, false, false);
  bool adds_bos = tokens.size() > plain.size();
  int32_t bos = adds_bos ? tokens[0] : -1;

  int64_t chunks = int64_t(tokens.size()) / ctx;
  if (max_chunks > 0) chunks = std::min(chunks, max_chunks);
  if (chunks == 0) return std::fprintf(stderr, "ftllm-perplexity: the text has fewer than %lld tokens\n", (long long)ctx), 1;
  std::printf("%zu tokens, %lld chunks of %lld, BOS %s\n", tokens.size(), (long long)chunks, (long long)ctx,
              adds_bos ? "added" : "not used");

  int64_t first = ctx / 2;
  std::vector<int64_t> wanted;
  for (int64_t p = first - 1; p < ctx - 1; ++p) wanted.push_back(p);
  double nll = 0, nll2 = 0;
  int64_t count = 0;
  auto start = std::chrono::steady_clock::now();
  for (int64_t c = 0; c < chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + c * ctx, tokens.begin() + (c + 1) * ctx);
    if (adds_bos) chunk[0] = bos;
    auto logits = test::prompt_logits(*m, chunk, wanted);
    for (size_t i = 0; i < wanted.size(); ++i) {
      double v = negative_log_likelihood(logits[i], chunk[size_t(wanted[i] + 1)]);
      nll += v, nll2 += v * v, ++count;
    }
    std::printf("[%lld] %.4f\n", (long long)(c + 1), std::exp(nll / double(count)));
    std::fflush(stdout);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The same error estimate llama-perplexity prints: the standard error of the mean NLL, carried through exp.
  double mean = nll / double(count), var = nll2 / double(count) - mean * mean;
  double ppl = std::exp(mean), err = ppl * std::sqrt(std::max(var, 0.0) / double(count - 1));
  std::printf("Final estimate: PPL = %.4f +/- %.5f (%lld tokens scored, %.1f tokens/s)\n", ppl, err, (long long)count,
              double(chunks * ctx) / seconds);
  return 0;
}
