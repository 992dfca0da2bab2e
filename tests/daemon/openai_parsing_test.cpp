// OpenAI request bodies, validated field by field.
#include <boost/test/unit_test.hpp>

#include "openai/request.h"

using namespace ftllm::daemon;

BOOST_AUTO_TEST_SUITE(openai_parsing)

BOOST_AUTO_TEST_CASE(request_bodies_are_validated_by_field) {
  GenerationBody b;
  auto err = parse_generation_body(R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
                                       "max_completion_tokens": 7, "temperature": 0.5, "stop": "x", "stream": true,
                                       "stream_options": {"include_usage": true}, "seed": 3, "unknown_field": 1})",
                                   true, b);
  BOOST_REQUIRE(!err);
  BOOST_TEST(b.request.chat.messages_json == R"([{"role":"user","content":"ab"}])");
  BOOST_TEST(b.request.generation.max_tokens == 7);
  BOOST_TEST(b.request.generation.sampling.temperature == 0.5f);
  BOOST_TEST(*b.request.generation.sampling.seed == 3u);
  BOOST_TEST(b.request.stop == std::vector<std::string>{"x"}, boost::test_tools::per_element());
  BOOST_TEST((b.stream && b.include_usage));
  GenerationBody c;
  BOOST_TEST(parse_generation_body(R"({"model": "m", "prompt": [1, 2, 3]})", false, c).has_value() == false);
  BOOST_TEST((c.request.input == ftllm::TextRequest::Input::Tokens));
  BOOST_REQUIRE_EQUAL(c.request.token_prompts.size(), 1u);
  BOOST_TEST(c.request.token_prompts[0].size() == 3u);
  GenerationBody several;
  BOOST_REQUIRE(!parse_generation_body(R"({"model": "m", "prompt": ["a", "b", "c"], "n": 2})", false, several));
  BOOST_TEST(several.request.prompts == std::vector<std::string>({"a", "b", "c"}), boost::test_tools::per_element());
  BOOST_TEST(several.request.choice_count() == 6u);
  GenerationBody id_lists;
  BOOST_REQUIRE(!parse_generation_body(R"({"model": "m", "prompt": [[1, 2], [3]]})", false, id_lists));
  BOOST_TEST(id_lists.request.token_prompts.size() == 2u);
  BOOST_TEST((id_lists.request.input == ftllm::TextRequest::Input::Tokens));
  GenerationBody mixed;
  BOOST_TEST(parse_generation_body(R"({"model": "m", "prompt": ["a", [1]]})", false, mixed)->param == "prompt");
  GenerationBody lb;
  BOOST_REQUIRE(!parse_generation_body(R"({"model": "m", "prompt": "x", "logit_bias": {"50256": -100, "7": 2.5}})", false, lb));
  BOOST_REQUIRE_EQUAL(lb.request.generation.sampling.logit_bias.size(), 2u);
  BOOST_TEST(lb.request.generation.sampling.logit_bias[0].first == 50256);
  BOOST_TEST(lb.request.generation.sampling.logit_bias[1].second == 2.5f);
  GenerationBody lb_bad;
  auto lb_err = parse_generation_body(R"({"model": "m", "prompt": "x", "logit_bias": {"abc": 1}})", false, lb_bad);
  BOOST_REQUIRE(lb_err);
  BOOST_TEST(lb_err->param == "logit_bias");
  GenerationBody ids;
  BOOST_REQUIRE(!parse_generation_body(R"({"model": "m", "prompt": "x", "stop_token_ids": [2, 7]})", false, ids));
  BOOST_TEST(ids.request.generation.stop_token_ids == std::vector<int32_t>({2, 7}), boost::test_tools::per_element());
  auto ids_err = parse_generation_body(R"({"model": "m", "prompt": "x", "stop_token_ids": [-1]})", false, ids);
  BOOST_REQUIRE(ids_err);
  BOOST_TEST(ids_err->param == "stop_token_ids");
  GenerationBody e;
  auto bad = parse_generation_body(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_p": 2})", true, e);
  BOOST_REQUIRE(bad);
  BOOST_TEST(bad->param == "top_p");
  BOOST_TEST(bad->status == 400);
}

// A tool round trip as the OpenAI SDK and LangChain send it: the assistant's null content beside its tool
// calls is rendered as "" and its arguments string as the object it holds (the golden "tools" conversation of
// the template fixtures has exactly this shape); what OpenAI refuses is a 400 naming the field.
BOOST_AUTO_TEST_CASE(messages_are_read_as_openai_defines_them) {
  GenerationBody b;
  BOOST_REQUIRE(!parse_generation_body(R"({"model": "m", "messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "22 C"}]})", true, b));
  BOOST_TEST(b.request.chat.messages_json ==
             R"([{"role":"user","content":"Weather in Paris?"},)"
             R"({"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function",)"
             R"("function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},)"
             R"({"role":"tool","tool_call_id":"call_1","content":"22 C"}])");
  auto refused = [](const std::string& messages) {
    GenerationBody g;
    auto e = parse_generation_body(R"({"model": "m", "messages": )" + messages + "}", true, g);
    return e ? e->param : std::string("accepted");
  };
  BOOST_TEST(refused(R"([{"role": "user", "content": null}])") == "messages[0].content");
  BOOST_TEST(refused(R"([{"role": "user"}])") == "messages[0].content");
  BOOST_TEST(refused(R"([{"role": "assistant", "content": null}])") == "messages[0].content");
  BOOST_TEST(refused(R"([{"role": "wizard", "content": "x"}])") == "messages[0].role");
  BOOST_TEST(refused(R"([{"role": "tool", "content": "22 C"}])") == "messages[0].tool_call_id");
  BOOST_TEST(refused(R"([{"role": "assistant", "content": null, "tool_calls": [{"function": {"arguments": "{}"}}]}])") ==
             "messages[0].tool_calls[0].function.name");
  BOOST_TEST(refused(R"([{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "x"}])") == "accepted");
}

// Where OpenAI is strict: stream_options only with stream, tool_choice a mode or one of the tools.
BOOST_AUTO_TEST_CASE(strict_where_openai_is_strict) {
  auto param = [](const std::string& extra) {
    GenerationBody g;
    auto e = parse_generation_body(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], )" + extra + "}", true, g);
    return e ? e->param : std::string("accepted");
  };
  BOOST_TEST(param(R"("stream_options": {"include_usage": true})") == "stream_options");
  BOOST_TEST(param(R"("stream": true, "stream_options": {"include_usage": true})") == "accepted");
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}])";
  BOOST_TEST(param(tools + R"(, "tool_choice": "required")") == "accepted");
  BOOST_TEST(param(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})") == "accepted");
  BOOST_TEST(param(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_time"}})") == "tool_choice");
  BOOST_TEST(param(R"("tool_choice": {"type": "function", "function": {"name": "get_weather"}})") == "tool_choice");
  BOOST_TEST(param(tools + R"(, "tool_choice": "sometimes")") == "tool_choice");
}

BOOST_AUTO_TEST_SUITE_END()
