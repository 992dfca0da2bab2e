// ftllm-tokenizer-bench: encode throughput of a tokenizer.json on a text file, in MB/s.
//   ftllm-tokenizer-bench TOKENIZER_JSON TEXT_FILE [--repeat N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) return std::fprintf(stderr, "usage: ftllm-tokenizer-bench TOKENIZER_JSON TEXT_FILE [--repeat N]\n"), 2;
  int repeat = argc > 4 ? std::stoi(argv[4]) : 5;
  auto read = [](const char* p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  auto tok = ftllm::tokenizer::Tokenizer::from_json(read(argv[1]), argv[1]);
  std::string text = read(argv[2]);
  std::vector<double> rates;
  size_t tokens = 0;
  for (int r = 0; r < repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    tokens = tok->encode(text, false).size();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(double(text.size()) / 1e6 / s);
  }
  std::sort(rates.begin(), rates.end());
  std::printf("ftllm encode: %.2f MB/s (%zu bytes -> %zu tokens, median of %d)\n", rates[rates.size() / 2], text.size(),
              tokens, repeat);
  return 0;
}
