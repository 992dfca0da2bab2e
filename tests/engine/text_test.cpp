// A generation's text: stop strings and the reasoning / tool-call parser fed at every split of the text,
// and a choice's tokens turned into text events.
#include <simdjson.h>

#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cctype>
#include <map>

#include "core/mapped_file.h"
#include "text/choice_text.h"
#include "text/output_parser.h"
#include "text/prompt.h"
#include "text/stop_text.h"

using namespace ftllm;
using namespace ftllm::text;

BOOST_AUTO_TEST_SUITE(generated_text)

namespace {

// What a parser makes of `text` pushed in two pieces, split at `cut`, and finished.
ParsedDelta parsed_in_two(OutputParser& p, const std::string& text, size_t cut) {
  ParsedDelta all;
  for (const ParsedDelta& d : {p.push(text.substr(0, cut)), p.push(text.substr(cut)), p.finish()}) {
    all.reasoning += d.reasoning;
    all.content += d.content;
    all.tool_calls.insert(all.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
  }
  return all;
}

}  // namespace

BOOST_AUTO_TEST_CASE(stop_strings_never_leak_at_any_split) {
  const std::string text = "Hello, world! More text.";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    StopText s({"world", "nope"});
    std::string out = s.push(text.substr(0, cut));
    out += s.push(text.substr(cut));
    out += s.flush();
    BOOST_TEST(out == "Hello, ", "split " << cut);
    BOOST_TEST(s.stopped());
  }
  StopText none({"zzz"});
  std::string out = none.push("abc zz");
  BOOST_TEST(out == "abc ");  // "zz" might begin "zzz": held back
  out += none.push("y");
  out += none.flush();
  BOOST_TEST(out == "abc zzy");
  BOOST_TEST(!none.stopped());
}

BOOST_AUTO_TEST_CASE(reasoning_and_content_split_at_any_offset) {
  const std::string text = "<think>\nThe user greets me.\n</think>\n\nHello! How can I help?";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    OutputParser p(true, false);
    ParsedDelta a = p.push(text.substr(0, cut)), b = p.push(text.substr(cut)), c = p.finish();
    BOOST_TEST(a.reasoning + b.reasoning + c.reasoning == "\nThe user greets me.\n", "split " << cut);
    BOOST_TEST(a.content + b.content + c.content == "Hello! How can I help?", "split " << cut);
  }
  // DeepSeek-R1: the prompt already opened <think>.
  OutputParser r1(true, true);
  ParsedDelta d = r1.push("thinking...</think>answer");
  BOOST_TEST(d.reasoning == "thinking...");
  BOOST_TEST(d.content == "answer");
  // Without a reasoning template the tags are plain text.
  OutputParser plain(false, false);
  BOOST_TEST(plain.push("<think>x</think>").content == "<think>x</think>");
}

BOOST_AUTO_TEST_CASE(tool_calls_are_parsed_at_any_offset) {
  const std::string text =
      "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
      "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    OutputParser p(false, false, ToolDialect::Hermes, true);
    const ParsedDelta got = parsed_in_two(p, text, cut);
    const std::vector<ToolCall>& calls = got.tool_calls;
    const std::string& content = got.content;
    BOOST_REQUIRE_EQUAL(calls.size(), 2u);
    BOOST_TEST(calls[0].name == "get_weather");
    BOOST_TEST(calls[0].arguments_json == R"({"city":"Paris"})");
    BOOST_TEST(calls[1].name == "get_time");
    BOOST_TEST(content == "Let me check.");
    BOOST_TEST(p.saw_tool_call());
  }
  // Streamed, each call's first fragment names it and the rest are its arguments as written, growing:
  // pushed a byte at a time, the pieces join to the arguments, and the name never waits for them.
  {
    OutputParser p(false, false, ToolDialect::Hermes, true);
    std::vector<ParsedDelta> deltas;
    for (char c : text) deltas.push_back(p.push(std::string(1, c)));
    deltas.push_back(p.finish());
    std::vector<std::string> names, arguments;
    size_t pieces = 0;
    for (const ParsedDelta& d : deltas)
      for (const ToolCallFragment& f : d.fragments) {
        if (!f.name.empty()) {
          BOOST_REQUIRE_EQUAL(f.index, names.size());
          names.push_back(f.name);
          arguments.emplace_back();
        }
        BOOST_REQUIRE(f.index < names.size());
        arguments[f.index] += f.arguments;
        pieces += !f.arguments.empty();
      }
    BOOST_TEST(names == std::vector<std::string>({"get_weather", "get_time"}), boost::test_tools::per_element());
    BOOST_TEST(arguments == std::vector<std::string>({R"({"city": "Paris"})", "{}"}), boost::test_tools::per_element());
    BOOST_TEST(pieces > 10u);  // byte by byte, not whole
  }
  // Whitespace that separates calls (one per line, as the templates and enforced tool choice write them)
  // is not content; an answer without calls keeps its whitespace.
  const std::vector<std::pair<std::string, std::string>> spaced = {
      {"<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>\n", ""},
      {"\n\n<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>", ""},
      {"Calling. \n<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call> then\n", "Calling. then"},
      {"No call here. \n\n", "No call here. \n\n"}};
  for (const auto& [answer, want] : spaced)
    for (size_t cut = 0; cut <= answer.size(); ++cut) {
      OutputParser p(false, false, ToolDialect::Hermes, true);
      const std::string content = parsed_in_two(p, answer, cut).content;
      BOOST_TEST(content == want, "cut at " << cut << " of " << answer);
    }
  OutputParser broken(false, false, ToolDialect::Hermes, true);
  ParsedDelta d = broken.push("<tool_call>not json</tool_call>");
  BOOST_TEST(d.tool_calls.empty());
  BOOST_TEST(d.content == "<tool_call>not json</tool_call>");
}

// gpt-oss answers in channels: analysis is reasoning, final is content, a commentary message to a
// function is a call (in the order the model writes its header, and in the template's).
BOOST_AUTO_TEST_CASE(harmony_channels_split_at_any_offset) {
  const std::vector<std::string> texts = {
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
      "<|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>",
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json"
      "<|message|>{\"city\": \"Paris\"}"};
  for (const std::string& text : texts)
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      OutputParser p(true, false, ToolDialect::Harmony, true);
      const ParsedDelta got = parsed_in_two(p, text, cut);
      BOOST_TEST(got.reasoning == "Need weather.", "cut " << cut);
      BOOST_TEST(got.content == "", "cut " << cut << ": " << got.content);
      BOOST_REQUIRE_EQUAL(got.tool_calls.size(), 1u);
      BOOST_TEST(got.tool_calls[0].name == "get_weather");
      BOOST_TEST(got.tool_calls[0].arguments_json == R"({"city":"Paris"})");
    }
  const std::string answer = "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Hi there.<|return|>";
  for (size_t cut = 0; cut <= answer.size(); ++cut) {
    OutputParser p(true, false, ToolDialect::Harmony, false);
    const ParsedDelta got = parsed_in_two(p, answer, cut);
    BOOST_TEST(got.reasoning == "Easy.", "cut " << cut);
    BOOST_TEST(got.content == "Hi there.", "cut " << cut);
  }
  // The analysis ends where the grammar ends it, at the next assistant header: an <|end|> and a header
  // that is not one (a random model's, cut off by max_tokens) stay reasoning, not content; cut off
  // right after <|end|>, the framing is dropped.
  const std::vector<std::pair<std::string, std::string>> unfinished = {
      {"<|channel|>analysis<|message|>Hm.<|end|><|start|>latest<|cak x", "Hm.<|end|><|start|>latest<|cak x"},
      {"<|channel|>analysis<|message|>Hm.<|end|>", "Hm."},
      {"<|channel|>analysis<|message|>Hm.<|end|><|start|>assi", "Hm."}};
  for (const auto& [text, want] : unfinished)
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      OutputParser p(true, false, ToolDialect::Harmony, true);
      const ParsedDelta got = parsed_in_two(p, text, cut);
      BOOST_TEST(got.reasoning == want, "cut " << cut << ": " << got.reasoning);
      BOOST_TEST(got.content == "", "cut " << cut << ": " << got.content);
    }
}

namespace {

const std::string kData = std::string(FTLLM_SOURCE_ROOT) + "/tests/data/";

// Qwen3's tokenizer with a template from the fixtures.
ModelText qwen3_text(const std::string& template_file) {
  ModelText t;
  t.tokenizer = tokenizer::Tokenizer::from_json(read_text_file(kData + "tokenizers/qwen3/tokenizer.json"), "qwen3");
  if (!template_file.empty())
    t.chat_template = std::make_unique<tokenizer::ChatTemplate>(read_text_file(kData + "chat-templates/" + template_file));
  return t;
}

TextRequest chat(const std::string& tools_json = "") {
  TextRequest r;
  r.chat.messages_json = R"([{"role": "user", "content": "Hi"}])";
  r.chat.tools_json = tools_json;
  return r;
}

}  // namespace

// Every template's own rendering of tool calls (tests/tools/make_tool_call_fixtures.py, jinja2 the way
// transformers renders), parsed back in the dialect read off the template: the same calls, whole, split
// at every byte, and streamed a byte at a time with arguments that grow into the same object.
BOOST_AUTO_TEST_CASE(each_templates_tool_calls_parse_back_in_its_dialect) {
  // The dialects the issue names, by template; any other template is held to whatever dialect it is
  // detected as (and must then parse back).
  const std::map<std::string, std::string> named = {
      {"Qwen-Qwen3-0.6B.jinja", "hermes"}, {"Qwen-Qwen2.5-7B-Instruct.jinja", "hermes"},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "hermes"}, {"Qwen3-Coder.jinja", "qwen3-coder"},
      {"Qwen3.5-4B.jinja", "qwen3-coder"}, {"meta-llama-Llama-3.1-8B-Instruct.jinja", "llama-3"},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", "llama-3"}, {"meta-llama-Llama-3.3-70B-Instruct.jinja", "llama-3"},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral-nemo"}, {"Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral"},
      {"unsloth-mistral-Devstral-Small-2507.jinja", "mistral"}, {"mistralai-Ministral-3-14B-Reasoning-2512.jinja", "mistral"},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "deepseek-r1"}, {"deepseek-ai-DeepSeek-V3.1.jinja", "deepseek-v3.1"},
      {"GLM-4.6.jinja", "glm-4.5"}, {"GLM-4.7-Flash.jinja", "glm-4.5"}, {"moonshotai-Kimi-K2.jinja", "kimi-k2"},
      {"openai-gpt-oss-120b.jinja", "gpt-oss"}};
  const std::string json = read_text_file(kData + "tool-calls/transcripts.json");
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.parse(json);
  const std::string tools = simdjson::to_string(root["tools"]);
  size_t parsed = 0, named_seen = 0;
  for (simdjson::dom::element c : root["cases"].get_array()) {
    const std::string file{std::string_view(c["template"])};
    const std::string text{std::string_view(c["text"])};
    const std::string source = read_text_file(kData + "chat-templates/" + file);
    const ToolDialect dialect = detect_tool_dialect(source);
    if (auto it = named.find(file); it != named.end()) {
      BOOST_TEST(dialect_name(dialect) == it->second, file);
      ++named_seen;
    }
    if (dialect == ToolDialect::None) continue;
    ++parsed;
    std::vector<ToolCall> want;
    for (simdjson::dom::element call : c["calls"].get_array())
      want.push_back({std::string(std::string_view(call["name"])), simdjson::to_string(call["arguments"]), ""});
    const bool reasoning = source.find("<think>") != std::string::npos || dialect == ToolDialect::Harmony;
    BOOST_TEST_CONTEXT(file << " (" << dialect_name(dialect) << "): " << text) {
      for (size_t cut = 0; cut <= text.size(); ++cut) {
        OutputParser p(reasoning, false, dialect, true, tools);
        const ParsedDelta got = parsed_in_two(p, text, cut);
        const std::vector<ToolCall>& calls = got.tool_calls;
        const std::string& content = got.content;
        if (calls.size() != want.size()) {
          BOOST_ERROR("cut at " << cut << ": " << calls.size() << " calls, content: " << content);
          break;
        }
        for (size_t i = 0; i < want.size(); ++i) {
          BOOST_TEST(calls[i].name == want[i].name, "cut at " << cut);
          BOOST_TEST(calls[i].arguments_json == want[i].arguments_json, "cut at " << cut);
        }
        BOOST_TEST(content.find("get_weather") == std::string::npos, "cut at " << cut << ", content: " << content);
        // Kimi's ids are its own; Mistral's are nine letters or digits, the model's when it wrote them.
        if (dialect == ToolDialect::Kimi) BOOST_TEST(calls[0].id == "functions.get_weather:0");
        if (dialect_names_calls(dialect) && dialect != ToolDialect::Kimi)
          for (const ToolCall& call : calls)
            BOOST_TEST((call.id.size() == 9 && std::all_of(call.id.begin(), call.id.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)); })), call.id);
        // A streamed call's id goes out with its name; Nemo writes its id after the arguments, too late.
        if (text.find("[CALL_ID]") != std::string::npos) BOOST_TEST(calls[0].id == "abcDEF123");
      }
      OutputParser p(reasoning, false, dialect, true, tools);
      std::vector<ParsedDelta> deltas;
      for (char ch : text) deltas.push_back(p.push(std::string(1, ch)));
      deltas.push_back(p.finish());
      std::vector<std::string> names, arguments;
      for (const ParsedDelta& d : deltas)
        for (const ToolCallFragment& f : d.fragments) {
          if (!f.name.empty()) names.push_back(f.name), arguments.emplace_back();
          BOOST_REQUIRE(f.index < names.size());
          arguments[f.index] += f.arguments;
        }
      BOOST_REQUIRE_EQUAL(names.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        simdjson::dom::parser args_parser;
        simdjson::dom::element args;
        BOOST_REQUIRE_MESSAGE(!args_parser.parse(arguments[i]).get(args), "streamed arguments: " << arguments[i]);
        BOOST_TEST(simdjson::to_string(args) == want[i].arguments_json);
      }
    }
  }
  BOOST_TEST(named_seen == named.size());
  BOOST_TEST_MESSAGE(parsed << " templates' tool calls parsed back");
}


// The answer's format is read off the model's template: <think> reasoning, a prompt that already opened
// it, <tool_call> blocks only when tools were offered.
BOOST_AUTO_TEST_CASE(prompts_carry_the_format_their_template_answers_in) {
  const ModelText qwen3 = qwen3_text("Qwen-Qwen3-0.6B.jinja");
  Prompt p = build_prompt(qwen3, "q", 4096, chat());
  BOOST_REQUIRE((p.refusal == Refusal::None));
  BOOST_TEST(p.format.chat);
  BOOST_TEST(p.format.reasoning);
  BOOST_TEST(!p.format.starts_in_reasoning);
  BOOST_TEST(!p.format.tools);
  std::string rendered;
  BOOST_REQUIRE(render_chat(qwen3, "q", chat().chat, rendered).ok);
  BOOST_TEST(p.ids == qwen3.tokenizer->encode(rendered, false, true));
  const std::string tool = R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])";
  BOOST_TEST(build_prompt(qwen3, "q", 4096, chat(tool)).format.tools);
  BOOST_TEST(build_prompt(qwen3_text("llama-cpp-deepseek-r1.jinja"), "r1", 4096, chat()).format.starts_in_reasoning);
  BOOST_TEST(!build_prompt(qwen3_text("Qwen-Qwen2.5-7B-Instruct.jinja"), "q25", 4096, chat()).format.reasoning);

  TextRequest text;
  text.input = TextRequest::Input::Text;
  text.prompts = {"Hello"};
  Prompt t = build_prompt(qwen3, "q", 4096, text);
  BOOST_TEST(!t.format.chat);
  BOOST_TEST(t.ids == qwen3.tokenizer->encode("Hello", true, true));
}

BOOST_AUTO_TEST_CASE(prompts_are_refused_with_the_field_at_fault) {
  const Prompt none = build_prompt(qwen3_text(""), "q", 4096, chat());
  BOOST_TEST((none.refusal == Refusal::ChatTemplate));
  BOOST_TEST(none.error == "model q has no chat template; start it with --chat_template FILE, or use /v1/completions");
  BOOST_TEST(none.param == "messages");
  const Prompt tight = build_prompt(qwen3_text("Qwen-Qwen3-0.6B.jinja"), "q", 5, chat());
  BOOST_TEST((tight.refusal == Refusal::ContextExceeded));
  BOOST_TEST(tight.error.find("is loaded with a context of 5 tokens") != std::string::npos, tight.error);
  TextRequest ids;
  ids.input = TextRequest::Input::Tokens;
  ids.token_prompts = {{}};
  BOOST_TEST((build_prompt(ModelText{}, "w", 4096, ids).refusal == Refusal::InvalidPrompt));
  ids.token_prompts = {{1, 2, 3}};
  BOOST_TEST((build_prompt(ModelText{}, "w", 4096, ids).refusal == Refusal::None));  // weights only: ids still serve
  TextRequest text;
  text.input = TextRequest::Input::Text;
  text.prompts = {"x"};
  const Prompt no_tokenizer = build_prompt(ModelText{}, "w", 4096, text);
  BOOST_TEST((no_tokenizer.refusal == Refusal::InvalidPrompt));
  BOOST_TEST(no_tokenizer.param == "prompt");
}

// A choice's tokens, one step at a time, become the text a client sees: reasoning apart, nothing of a
// stop string or after it, and the stop said at the end; every token is still reported.
BOOST_AUTO_TEST_CASE(choice_tokens_become_text_cut_at_stop_strings) {
  const ModelText qwen3 = qwen3_text("Qwen-Qwen3-0.6B.jinja");
  const std::vector<int32_t> ids = qwen3.tokenizer->encode("<think>\nhm\n</think>\n\nHello there END of it", false, true);
  OutputFormat format;
  format.chat = format.reasoning = true;
  ChoiceText choice(qwen3.tokenizer.get(), 2, format, {" END"}, false);
  std::string reasoning, content;
  size_t tokens = 0;
  bool stopped_early = false;
  for (size_t i = 0; i < ids.size(); ++i) {
    GenerationEvent e;
    e.tokens = {ids[i]};
    TextEvent t = choice.on(e);
    BOOST_TEST(t.choice == 2u);
    reasoning += t.reasoning;
    content += t.content;
    tokens += t.tokens.size();
    stopped_early = stopped_early || (choice.stopped() && i + 1 < ids.size());
  }
  GenerationEvent end;
  end.finished = true;
  end.result.finish = FinishReason::Cancelled;
  TextEvent last = choice.on(end);
  reasoning += last.reasoning;
  content += last.content;
  BOOST_TEST(stopped_early);  // the caller can cancel before the rest is generated
  BOOST_TEST(reasoning == "\nhm\n");
  BOOST_TEST(content == "Hello there");
  BOOST_TEST(tokens == ids.size());
  BOOST_TEST(last.finished);
  BOOST_TEST(last.stopped);
}

BOOST_AUTO_TEST_SUITE_END()
