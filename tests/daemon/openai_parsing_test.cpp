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
  BOOST_TEST(c.request.prompt_ids.size() == 3u);
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

BOOST_AUTO_TEST_SUITE_END()
