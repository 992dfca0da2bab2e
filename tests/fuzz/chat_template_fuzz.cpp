// libFuzzer target for the chat-template engine: template text and the messages it is rendered with.
// The input is the template, a NUL byte, then the messages as JSON (a default conversation when absent
// or not JSON). Any template must render or fail with a TemplateError: a crash, a sanitizer report, a
// hang or a huge allocation is a bug, as templates come from model files users download. The render
// limits are lowered so a runaway template ends in well under libFuzzer's timeout. Run by tests/fuzz/run.sh.
#include <cstdint>
#include <string>
#include <string_view>

#include "tokenizer/chat_template.h"

using namespace ftllm;

namespace {

const char* kDefaultMessages =
    R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},)"
    R"({"role":"assistant","content":"Hello","tool_calls":[{"type":"function","function":{"name":"f","arguments":{"a":1}}}]},)"
    R"({"role":"tool","content":"42"},{"role":"user","content":[{"type":"text","text":"again"}]}])";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string source(input.substr(0, nul));
  tokenizer::ChatRequest request;
  request.now = 1700000000;
  request.limits.max_output_bytes = 1 << 20;
  request.limits.max_work = 1'000'000;
  request.kwargs.emplace_back("bos_token", jinja::Value::string("<s>"));
  request.kwargs.emplace_back("eos_token", jinja::Value::string("</s>"));
  try {
    request.messages = tokenizer::json_to_value(nul == std::string_view::npos ? kDefaultMessages : input.substr(nul + 1));
  } catch (const jinja::TemplateError&) {
    request.messages = tokenizer::json_to_value(kDefaultMessages);
  }
  request.tools = tokenizer::json_to_value(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])");
  try {
    const tokenizer::ChatTemplate t(source);
    const std::string out = t.render(request);
    if (out.size() > request.limits.max_output_bytes) __builtin_trap();  // the limit did not hold
  } catch (const jinja::TemplateError&) {
  }
  return 0;
}
