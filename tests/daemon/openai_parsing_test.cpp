// Stop strings and the reasoning / tool-call parser, fed at every split of the text.
#include <boost/test/unit_test.hpp>

#include "openai/output_parser.h"
#include "openai/request.h"
#include "openai/stop_text.h"

using namespace ftllm::daemon;

BOOST_AUTO_TEST_SUITE(openai_parsing)

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
    OutputParser p(true, false, false);
    ParsedDelta a = p.push(text.substr(0, cut)), b = p.push(text.substr(cut)), c = p.finish();
    BOOST_TEST(a.reasoning + b.reasoning + c.reasoning == "\nThe user greets me.\n", "split " << cut);
    BOOST_TEST(a.content + b.content + c.content == "Hello! How can I help?", "split " << cut);
  }
  // DeepSeek-R1: the prompt already opened <think>.
  OutputParser r1(true, true, false);
  ParsedDelta d = r1.push("thinking...</think>answer");
  BOOST_TEST(d.reasoning == "thinking...");
  BOOST_TEST(d.content == "answer");
  // Without a reasoning template the tags are plain text.
  OutputParser plain(false, false, false);
  BOOST_TEST(plain.push("<think>x</think>").content == "<think>x</think>");
}

BOOST_AUTO_TEST_CASE(tool_calls_are_parsed_at_any_offset) {
  const std::string text =
      "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
      "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    OutputParser p(false, false, true);
    std::vector<ToolCall> calls;
    std::string content;
    for (const ParsedDelta& d : {p.push(text.substr(0, cut)), p.push(text.substr(cut)), p.finish()}) {
      calls.insert(calls.end(), d.tool_calls.begin(), d.tool_calls.end());
      content += d.content;
    }
    BOOST_REQUIRE_EQUAL(calls.size(), 2u);
    BOOST_TEST(calls[0].name == "get_weather");
    BOOST_TEST(calls[0].arguments_json == R"({"city":"Paris"})");
    BOOST_TEST(calls[1].name == "get_time");
    BOOST_TEST(content == "Let me check.");
    BOOST_TEST(p.saw_tool_call());
  }
  OutputParser broken(false, false, true);
  ParsedDelta d = broken.push("<tool_call>not json</tool_call>");
  BOOST_TEST(d.tool_calls.empty());
  BOOST_TEST(d.content == "<tool_call>not json</tool_call>");
}

BOOST_AUTO_TEST_CASE(request_bodies_are_validated_by_field) {
  GenerationBody b;
  auto err = parse_generation_body(R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
                                       "max_completion_tokens": 7, "temperature": 0.5, "stop": "x", "stream": true,
                                       "stream_options": {"include_usage": true}, "seed": 3, "unknown_field": 1})",
                                   true, b);
  BOOST_REQUIRE(!err);
  BOOST_TEST(b.chat_input.messages_json == R"([{"role":"user","content":"ab"}])");
  BOOST_TEST(b.generation.max_tokens == 7);
  BOOST_TEST(b.generation.sampling.temperature == 0.5f);
  BOOST_TEST(*b.generation.sampling.seed == 3u);
  BOOST_TEST(b.stop == std::vector<std::string>{"x"}, boost::test_tools::per_element());
  BOOST_TEST((b.stream && b.include_usage));
  GenerationBody c;
  BOOST_TEST(parse_generation_body(R"({"model": "m", "prompt": [1, 2, 3]})", false, c).has_value() == false);
  BOOST_TEST(c.prompt_is_ids);
  BOOST_TEST(c.prompt_ids.size() == 3u);
  GenerationBody lb;
  BOOST_REQUIRE(!parse_generation_body(R"({"model": "m", "prompt": "x", "logit_bias": {"50256": -100, "7": 2.5}})", false, lb));
  BOOST_REQUIRE_EQUAL(lb.generation.sampling.logit_bias.size(), 2u);
  BOOST_TEST(lb.generation.sampling.logit_bias[0].first == 50256);
  BOOST_TEST(lb.generation.sampling.logit_bias[1].second == 2.5f);
  GenerationBody lb_bad;
  auto lb_err = parse_generation_body(R"({"model": "m", "prompt": "x", "logit_bias": {"abc": 1}})", false, lb_bad);
  BOOST_REQUIRE(lb_err);
  BOOST_TEST(lb_err->param == "logit_bias");
  GenerationBody e;
  auto bad = parse_generation_body(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_p": 2})", true, e);
  BOOST_REQUIRE(bad);
  BOOST_TEST(bad->param == "top_p");
  BOOST_TEST(bad->status == 400);
}

BOOST_AUTO_TEST_SUITE_END()
