#include "tool_dialect.h"

#include <iterator>

namespace ftllm::text {

namespace {

bool has(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

}  // namespace

ToolDialect detect_tool_dialect(std::string_view t) {
  if (has(t, "<|channel|>") && has(t, "to=")) return ToolDialect::Harmony;
  if (has(t, kKimiSectionBegin)) return ToolDialect::Kimi;
  if (has(t, kDsCallsBegin)) return has(t, "```json") ? ToolDialect::DeepSeekR1 : ToolDialect::DeepSeekV31;
  if (has(t, "[TOOL_CALLS]")) return has(t, "[ARGS]") ? ToolDialect::Mistral : ToolDialect::MistralJson;
  if (has(t, "<tool_call>") && has(t, "<arg_key>")) return ToolDialect::Glm;
  if (has(t, "<tool_call>") && has(t, "<function=") && has(t, "<parameter=")) return ToolDialect::QwenXml;
  // MiniMax writes <invoke name=...> inside its <tool_call>, Apriel a JSON array in <tool_calls>: dialects
  // of their own, not parsed.
  if (has(t, "<tool_call>") && !has(t, "<invoke") && !has(t, "<tool_calls>")) return ToolDialect::Hermes;
  if (has(t, "<|start_header_id|>") && has(t, "\"parameters\": ")) return ToolDialect::Llama3;
  return ToolDialect::None;
}

namespace {

// What each dialect is called, the fixed strings it writes, and those that begin a call.
struct Facts {
  std::string_view name;
  std::vector<std::string> markers, openers;
};

const Facts& facts(ToolDialect d) {
  static const std::vector<std::string> tool_call = {"<tool_call>"}, mistral = {"[TOOL_CALLS]", "[CALL_ID]", "[ARGS]"},
                                        deepseek = {kDsCallsBegin, kDsCallsEnd, kDsCallBegin, kDsCallEnd, kDsSep};
  static const Facts all[] = {  // in ToolDialect's order
      {"none", {}, {}},
      {"hermes", {"<tool_call>", "</tool_call>"}, tool_call},
      {"qwen3-coder", {"<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>"}, tool_call},
      {"glm-4.5", {"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"}, tool_call},
      {"llama-3", {"<|python_tag|>"}, {"<|python_tag|>", "{"}},
      {"mistral-nemo", mistral, {"[TOOL_CALLS]"}},
      {"mistral", mistral, {"[TOOL_CALLS]"}},
      {"deepseek-r1", deepseek, {kDsCallsBegin}},
      {"deepseek-v3.1", deepseek, {kDsCallsBegin}},
      {"kimi-k2", {kKimiSectionBegin, kKimiSectionEnd, kKimiCallBegin, kKimiArgBegin, kKimiCallEnd}, {kKimiSectionBegin}},
      {"gpt-oss", {"<|channel|>", "<|message|>", "<|constrain|>", "<|start|>", "<|end|>", "<|call|>"},
       {"<|channel|>commentary to=", " to=functions."}},
  };
  static_assert(std::size(all) == size_t(ToolDialect::Harmony) + 1);
  return all[size_t(d)];
}

}  // namespace

std::string_view dialect_name(ToolDialect d) { return facts(d).name; }
const std::vector<std::string>& dialect_markers(ToolDialect d) { return facts(d).markers; }
const std::vector<std::string>& dialect_openers(ToolDialect d) { return facts(d).openers; }

bool dialect_names_calls(ToolDialect d) {
  return d == ToolDialect::Kimi || d == ToolDialect::Mistral || d == ToolDialect::MistralJson;
}

CallSyntax call_syntax(ToolDialect d) {
  switch (d) {
    case ToolDialect::None: return {};
    case ToolDialect::Hermes:
      return {.separator = "\n", .begin = "<tool_call>\n{\"name\": ", .name_end = ", \"arguments\": ", .call_end = "}\n</tool_call>",
              .name_is_json_string = true};
    case ToolDialect::QwenXml:
      return {.separator = "\n", .begin = "<tool_call>\n<function=", .name_end = ">\n", .call_end = "\n</function>\n</tool_call>",
              .args_style = "qwen_xml"};
    case ToolDialect::Glm:
      return {.separator = "\n", .begin = "<tool_call>", .name_end = "\n", .call_end = "\n</tool_call>", .args_style = "glm_xml"};
    case ToolDialect::Llama3:  // its templates refuse more than one call per message
      return {.begin = "{\"name\": ", .name_end = ", \"parameters\": ", .call_end = "}", .name_is_json_string = true,
              .single_call = true};
    case ToolDialect::MistralJson:
      return {.section_open = "[TOOL_CALLS][", .section_close = "]", .separator = ", ", .begin = "{\"name\": ",
              .name_end = ", \"arguments\": ", .call_end = "}", .name_is_json_string = true};
    case ToolDialect::Mistral: return {.begin = "[TOOL_CALLS]", .name_end = "[ARGS]"};
    case ToolDialect::DeepSeekR1:
      return {.section_open = kDsCallsBegin, .section_close = kDsCallsEnd, .separator = "\n",
              .begin = kDsCallBegin + "function" + kDsSep, .name_end = "\n```json\n", .call_end = "\n```" + kDsCallEnd};
    case ToolDialect::DeepSeekV31:
      return {.section_open = kDsCallsBegin, .section_close = kDsCallsEnd, .begin = kDsCallBegin, .name_end = kDsSep,
              .call_end = kDsCallEnd};
    case ToolDialect::Kimi:
      return {.section_open = kKimiSectionBegin, .section_close = kKimiSectionEnd, .begin = kKimiCallBegin + "functions.",
              .name_end = ":", .index_end = kKimiArgBegin, .call_end = kKimiCallEnd};
    case ToolDialect::Harmony:  // a call ends the turn (<|call|> is a stop token)
      return {.begin = "<|channel|>commentary to=functions.", .name_end = " <|constrain|>json<|message|>", .single_call = true};
  }
  return {};
}

}  // namespace ftllm::text
