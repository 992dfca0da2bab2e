// libFuzzer target for what the daemon reads from the outside: HTTP requests (the llhttp-based parser,
// fed in two reads at a point the input picks), the config file (TOML), and OpenAI request bodies (chat
// and completions). Any input must parse or be refused with a reason: a crash, a sanitizer report or a
// hang is a bug. The first byte picks the parser; the rest is the input. Run by tests/fuzz/run.sh.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "http/request_parser.h"
#include "openai/request.h"

using namespace ftllm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 2, size - 2);
  switch (data[0] % 4) {
    case 0: {
      http::ParseLimits limits;
      limits.max_header_bytes = 4096;
      limits.max_body_bytes = 1 << 16;
      http::RequestParser parser(limits);
      std::vector<http::Request> out;
      const size_t cut = input.empty() ? 0 : data[1] % (input.size() + 1);
      if (parser.feed(input.data(), cut, out)) parser.feed(input.data() + cut, input.size() - cut, out);
      for (const http::Request& r : out) (void)r.path(), (void)r.header("content-type");
      break;
    }
    case 1: {
      daemon::ConfigResult r = daemon::parse_config(input, "fuzz.conf");
      if (!r.config && !r.error) __builtin_trap();  // neither a config nor a reason
      break;
    }
    default: {
      daemon::GenerationBody body;
      (void)daemon::parse_generation_body(std::string(input), data[0] % 4 == 2, body);
      break;
    }
  }
  return 0;
}
