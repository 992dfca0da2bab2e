// The ways models write tool calls, read off their chat templates (as llama.cpp detects them): how to find
// calls in generated text, whole or still growing, and the syntax a call must follow when constrained
// decoding enforces one. One place knows each dialect's markers; the parser and the grammar both ask it.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ftllm::text {

enum class ToolDialect {
  None,         // no tool calls are parsed
  Hermes,       // <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> (Hermes, Qwen2.5/3, SmolLM3 ...)
  QwenXml,      // <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call>
  Glm,          // <tool_call>NAME\n<arg_key>P</arg_key>\n<arg_value>VALUE</arg_value>\n</tool_call> (GLM-4.5+)
  Llama3,       // {"name": ..., "parameters": {...}} as the whole answer, or after <|python_tag|>
  MistralJson,  // [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "..."}, ...] (Mistral Nemo, v3 tokenizers)
  Mistral,      // [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}, once per call (Mistral Small 3.2, Devstral, Ministral)
  DeepSeekR1,   // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>...
  DeepSeekV31,  // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
  Kimi,         // <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>...
  Harmony,      // gpt-oss: <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>
};

// Markers that more than the parser need: DeepSeek's (fullwidth bars, "▁" for spaces) and Kimi's.
inline const std::string kDsCallsBegin = "<｜tool▁calls▁begin｜>", kDsCallsEnd = "<｜tool▁calls▁end｜>",
                         kDsCallBegin = "<｜tool▁call▁begin｜>", kDsCallEnd = "<｜tool▁call▁end｜>", kDsSep = "<｜tool▁sep｜>";
inline const std::string kKimiSectionBegin = "<|tool_calls_section_begin|>", kKimiSectionEnd = "<|tool_calls_section_end|>",
                         kKimiCallBegin = "<|tool_call_begin|>", kKimiArgBegin = "<|tool_call_argument_begin|>",
                         kKimiCallEnd = "<|tool_call_end|>";

// The dialect a chat template writes tool calls in (None when it writes none we know).
ToolDialect detect_tool_dialect(std::string_view template_source);
std::string_view dialect_name(ToolDialect d);
// The fixed strings a dialect writes. Those that are special tokens of a model must stay in its decoded
// text while calls are parsed, and be producible under constrained decoding.
const std::vector<std::string>& dialect_markers(ToolDialect d);
// The strings that begin a tool call in free text (the ones tool_choice "none" forbids).
const std::vector<std::string>& dialect_openers(ToolDialect d);
// Whether call ids are the model's business: Kimi writes functions.NAME:IDX; Mistral's templates require
// nine alphanumeric characters (the parser makes them when the model writes none). Others: "" (the API
// layer names them).
bool dialect_names_calls(ToolDialect d);

// A call as far as the text shows it. `args` is the arguments' JSON text as written (or, for dialects that
// write parameters one by one, as built from those complete so far): it only ever grows, so a stream can
// send its new bytes. `arguments` is the whole arguments object, serialised, once the call is complete.
struct CallProgress {
  std::string id, name, args, arguments;
  bool complete = false;
};

// What a scan of a tool-call section (text beginning at one of the dialect's openers) found.
struct SectionScan {
  std::vector<CallProgress> calls;  // in order; only the last may be incomplete
  bool closed = false;              // the section has ended: it took `consumed` bytes
  bool failed = false;              // the text does not follow the dialect: it was never a tool call
  size_t consumed = 0;              // bytes through the section's end, or through its last complete call
};

// Each tool's parameter types by name, for dialects that write values as bare text (a string parameter's
// value is taken as written; others are read as JSON).
using ToolParameterTypes = std::map<std::string, std::map<std::string, std::vector<std::string>>, std::less<>>;
ToolParameterTypes tool_parameter_types(const std::string& tools_json);

// Where the last scan of a growing section stopped inside a value still being written, so the next scan
// of the same section (the same text and more) resumes there: a long argument costs its length once, not
// once per token.
struct ScanMemo {
  size_t json_start = std::string_view::npos, json_at = 0;  // a JSON value: its start, where scanning stopped
  int json_depth = 0;
  bool json_in_string = false;
  size_t until_start = std::string_view::npos, until_at = 0;  // a search for `until_end` from `until_start`
  std::string until_end;
};

// `final`: the answer has ended (a call that runs to the end, such as Llama 3's built-in tools, is whole).
// `memo`, kept by the caller for one section, makes scanning it again as it grows cost only the new text.
SectionScan scan_tool_section(ToolDialect d, std::string_view text, const ToolParameterTypes& types, bool final,
                              ScanMemo* memo = nullptr);
// A call id as Mistral's templates require them: nine random letters and digits.
std::string nine_character_call_id();

// How a call is written, for constrained decoding: [section_open] call (separator call)* [section_close],
// where a call is begin + NAME + name_end [+ digits + index_end] + arguments (JSON, or parameters in
// `args_style`: "qwen_xml", "glm_xml") + call_end.
struct CallSyntax {
  std::string section_open{}, section_close{}, separator{};
  std::string begin{}, name_end{}, index_end{}, call_end{};
  std::string args_style = "json";
  bool name_is_json_string = false;  // the name is written as a JSON string (quoted)
  bool single_call = false;          // the template allows one call per answer
};
CallSyntax call_syntax(ToolDialect d);

}  // namespace ftllm::text
