// The OpenAI API as clients meet it: the real ftllmd serving the real SmolLM2-135M-Instruct GGUF, driven
// with curl, raw sockets and the official OpenAI Python SDK.
#include <signal.h>
#include <simdjson.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "../common/real_model.h"
#include "daemon_process.h"

using namespace ftllm::test;

namespace {

struct Reply {
  int status = 0;
  std::string body;
};

std::string write_temp(const std::string& content) {
  static std::atomic<int> n = 0;  // client threads write bodies side by side (TSan found two with one name)
  std::string path = "/tmp/ftllm-body-" + std::to_string(getpid()) + "-" + std::to_string(n++);
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

const std::thread::id kMainThread = std::this_thread::get_id();  // static initialisation runs on main

Reply http(const std::string& method, const std::string& url, const std::string& body = "", const std::string& extra = "") {
  std::string file = write_temp(body);
  CommandResult r = run_command("curl -s -S -N --max-time " + std::to_string(120 * kSanitizerSlowdown) + " -X " + method + " -H 'Content-Type: application/json' " + extra +
                                " --data-binary @" + file + " -w '\\n%{http_code}' " + url);
  std::remove(file.c_str());
  // Client threads call this too, and Boost.Test's checks are for the main thread alone (a failed one
  // would throw past std::thread; even a passing one writes the shared checkpoint): there a failure comes
  // back as status 0, which every caller's status check reports.
  if (r.exit_code != 0) {
    if (std::this_thread::get_id() != kMainThread) return {0, "curl failed: " + r.err};
    BOOST_FAIL("curl failed: " + r.err);
  }
  size_t nl = r.out.rfind('\n');
  return {std::stoi(r.out.substr(nl + 1)), r.out.substr(0, nl)};
}

// The daemon with the real model, started once for the whole suite.
DaemonProcess& daemon_with_model() {
  static TempDir dir;
  // A float32 KV cache: the chat test compares token for token with llama.cpp, whose f16 cache rounds
  // the queries too.
  static DaemonProcess d(dir, {smollm2_gguf_path(), "--name", "smollm2", "-t", "2", "--ctx", "512", "--max_sequences", "16",
                               "--kv_dtype", "f32"});
  return d;
}

std::string chat_body(const std::string& content, const std::string& extra) {
  return R"({"model": "smollm2", "messages": [{"role": "user", "content": ")" + content + "\"}]" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

// Concatenated deltas of an SSE stream, its finish reason, and the usage chunk's completion_tokens.
struct StreamResult {
  std::string text, finish;
  int64_t completion_tokens = -1;
  bool done = false;
};
StreamResult read_stream(const std::string& sse, bool chat) {
  StreamResult r;
  simdjson::dom::parser parser;
  size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    size_t end = sse.find("\n\n", pos);
    std::string data = sse.substr(pos + 6, end - pos - 6);
    pos = end;
    if (data == "[DONE]") {
      r.done = true;
      continue;
    }
    simdjson::dom::element e = parser.parse(data);
    simdjson::dom::array choices = e["choices"];
    for (auto c : choices) {
      std::string_view piece;
      if (chat ? !c["delta"]["content"].get(piece) : !c["text"].get(piece)) r.text += piece;
      std::string_view f;
      if (!c["finish_reason"].get(f)) r.finish = f;
    }
    int64_t n;
    if (!e["usage"]["completion_tokens"].get(n)) r.completion_tokens = n;
  }
  return r;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(openai_api)

BOOST_AUTO_TEST_CASE(chat_answers_exactly_as_llamacpp_greedy) {
  std::string gguf = smollm2_gguf_path();
  BOOST_REQUIRE_MESSAGE(!gguf.empty(), "SmolLM2 GGUF not found under .venv: run scripts/setup.sh");
  DaemonProcess& d = daemon_with_model();
  simdjson::dom::parser parser;
  simdjson::dom::element ref = parser.load(FTLLM_SOURCE_ROOT "/tests/data/smollm2.json");
  simdjson::dom::parser parser2;
  simdjson::dom::element llama = parser2.load(FTLLM_SOURCE_ROOT "/tests/data/smollm2_llamacpp.json");
  std::string question(std::string_view(ref["messages"].at(0)["content"]));
  Reply r = http("POST", d.base_url() + "/v1/chat/completions", chat_body(question, R"("max_tokens": 32, "temperature": 0)"));
  BOOST_REQUIRE_EQUAL(r.status, 200);
  simdjson::dom::parser p2;
  simdjson::dom::element doc = p2.parse(r.body);
  // Template, tokenizer, engine (int8 activations, as llama.cpp computes) and detokenizer together
  // reproduce llama.cpp's 32 greedy tokens on the same prompt ids.
  BOOST_TEST(std::string_view(doc["choices"].at(0)["message"]["content"]) == std::string_view(llama["text"]));
  BOOST_TEST(std::string_view(doc["choices"].at(0)["finish_reason"]) == "length");
  BOOST_TEST(int64_t(doc["usage"]["prompt_tokens"]) == int64_t(ref["prompt"].get_array().size()));
  BOOST_TEST(int64_t(doc["usage"]["completion_tokens"]) == 32);
  BOOST_TEST(int64_t(doc["usage"]["total_tokens"]) == int64_t(ref["prompt"].get_array().size()) + 32);
  BOOST_TEST(std::string_view(doc["object"]) == "chat.completion");
}

BOOST_AUTO_TEST_CASE(logprobs_agree_with_transformers_logits) {
  // The reference kernels, over a float32 KV cache, compute in float32 what transformers computes over
  // the dequantized weights.
  TempDir dir;
  DaemonProcess d(dir, {smollm2_gguf_path(), "--name", "smollm2", "-t", "2", "--ctx", "256", "--kernels", "scalar", "--kv_dtype", "f32"});
  simdjson::dom::parser parser;
  simdjson::dom::element ref = parser.load(FTLLM_SOURCE_ROOT "/tests/data/smollm2.json");
  std::string question(std::string_view(ref["messages"].at(0)["content"]));
  Reply r = http("POST", d.base_url() + "/v1/chat/completions",
                 chat_body(question, R"("max_tokens": 1, "temperature": 0, "logprobs": true, "top_logprobs": 5)"));
  BOOST_REQUIRE_EQUAL(r.status, 200);
  simdjson::dom::parser p2;
  simdjson::dom::element lp = p2.parse(r.body)["choices"].at(0)["logprobs"]["content"].at(0);
  simdjson::dom::array top = lp["top_logprobs"];
  BOOST_REQUIRE_EQUAL(top.size(), 5u);
  // Log-softmax differences are logit differences: compare with transformers' top logits.
  auto ref_logits = ref["top_logits"].get_array();
  double first = double(top.at(0)["logprob"]);
  BOOST_TEST(double(lp["logprob"]) == first);
  for (size_t i = 1; i < 5; ++i)
    BOOST_TEST(double(top.at(i)["logprob"]) - first == double(ref_logits.at(i)) - double(ref_logits.at(0)),
               boost::test_tools::tolerance(1e-4));
  BOOST_TEST(first < 0.0);
}

BOOST_AUTO_TEST_CASE(logit_bias_steers_the_output) {
  DaemonProcess& d = daemon_with_model();
  // " Paris" is 7042 in SmolLM2's vocabulary; banning it changes the greedy answer, boosting "." forces it.
  Reply banned = http("POST", d.base_url() + "/v1/completions",
                      R"({"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 1, "temperature": 0, "logit_bias": {"7042": -100}})");
  BOOST_TEST(banned.body.find(R"("text":" Paris")") == std::string::npos, banned.body);
  Reply plain = http("POST", d.base_url() + "/v1/completions",
                     R"({"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 1, "temperature": 0})");
  BOOST_TEST(plain.body.find(R"("text":" Paris")") != std::string::npos, plain.body);
  Reply forced = http("POST", d.base_url() + "/v1/completions",
                      R"({"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 1, "temperature": 0, "logit_bias": {"47": 100}})");
  BOOST_TEST(forced.body.find(R"("text":"?")") != std::string::npos, forced.body);
}

BOOST_AUTO_TEST_CASE(stream_equals_whole_for_the_same_seed) {
  DaemonProcess& d = daemon_with_model();
  for (bool chat : {true, false}) {
    std::string body = chat ? chat_body("Tell me about cats.", R"("max_tokens": 24, "temperature": 0.9, "seed": 42)")
                            : R"({"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 24, "temperature": 0.9, "seed": 42)";
    if (!chat) body += "}";
    std::string url = d.base_url() + (chat ? "/v1/chat/completions" : "/v1/completions");
    Reply whole = http("POST", url, body);
    BOOST_REQUIRE_EQUAL(whole.status, 200);
    std::string stream_body = body.substr(0, body.size() - 1) + R"(, "stream": true, "stream_options": {"include_usage": true}})";
    Reply streamed = http("POST", url, stream_body);
    BOOST_REQUIRE_EQUAL(streamed.status, 200);
    StreamResult s = read_stream(streamed.body, chat);
    simdjson::dom::parser parser;
    simdjson::dom::element doc = parser.parse(whole.body);
    std::string_view want = chat ? std::string_view(doc["choices"].at(0)["message"]["content"]) : std::string_view(doc["choices"].at(0)["text"]);
    BOOST_TEST(s.text == want);
    BOOST_TEST(s.finish == std::string_view(doc["choices"].at(0)["finish_reason"]));
    BOOST_TEST(s.completion_tokens == int64_t(doc["usage"]["completion_tokens"]));
    BOOST_TEST(s.done);
    // As OpenAI sends them: every chunk before the usage chunk carries "usage": null.
    BOOST_TEST(streamed.body.find(R"("finish_reason":null},"usage":null})") == std::string::npos);  // not inside the choice
    BOOST_TEST(streamed.body.find(R"("finish_reason":null}],"usage":null})") != std::string::npos, streamed.body.substr(0, 300));
  }
}

BOOST_AUTO_TEST_CASE(n_choices_each_sample_on_their_own) {
  DaemonProcess& d = daemon_with_model();
  Reply r = http("POST", d.base_url() + "/v1/chat/completions",
                 chat_body("Name a fruit.", R"("n": 3, "max_tokens": 8, "temperature": 1.0, "seed": 5, "ignore_eos": true)"));
  BOOST_REQUIRE_EQUAL(r.status, 200);
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(r.body);
  simdjson::dom::array choices = doc["choices"];
  BOOST_REQUIRE_EQUAL(choices.size(), 3u);
  for (size_t i = 0; i < 3; ++i) BOOST_TEST(int64_t(choices.at(i)["index"]) == int64_t(i));
  BOOST_TEST(int64_t(doc["usage"]["completion_tokens"]) == 24);
  // Choice i is the single choice of the same request with seed + i.
  Reply second = http("POST", d.base_url() + "/v1/chat/completions",
                      chat_body("Name a fruit.", R"("max_tokens": 8, "temperature": 1.0, "seed": 6, "ignore_eos": true)"));
  simdjson::dom::parser p2;
  BOOST_TEST(std::string_view(p2.parse(second.body)["choices"].at(0)["message"]["content"]) ==
             std::string_view(choices.at(1)["message"]["content"]));
  // Streamed: every choice's deltas carry its index, and one [DONE] ends them all.
  Reply s = http("POST", d.base_url() + "/v1/chat/completions",
                 chat_body("Name a fruit.", R"("n": 2, "max_tokens": 4, "stream": true, "ignore_eos": true)"));
  BOOST_TEST(s.body.find(R"("index":0)") != std::string::npos);
  BOOST_TEST(s.body.find(R"("index":1)") != std::string::npos);
  size_t done = 0;
  for (size_t at = 0; (at = s.body.find("[DONE]", at)) != std::string::npos; ++at) ++done;
  BOOST_TEST(done == 1u);
}

BOOST_AUTO_TEST_CASE(stop_strings_never_leak) {
  DaemonProcess& d = daemon_with_model();
  for (bool stream : {false, true}) {
    std::string body = R"({"model": "smollm2", "prompt": "Count: 1, 2, 3, 4, 5, 6,", "max_tokens": 30, "temperature": 0, "stop": [", 9", "never"])";
    if (stream) body += R"(, "stream": true)";
    Reply r = http("POST", d.base_url() + "/v1/completions", body + "}");
    BOOST_REQUIRE_EQUAL(r.status, 200);
    std::string text;
    std::string finish;
    if (stream) {
      StreamResult s = read_stream(r.body, false);
      text = s.text;
      finish = s.finish;
    } else {
      simdjson::dom::parser parser;
      simdjson::dom::element doc = parser.parse(r.body);
      text = std::string_view(doc["choices"].at(0)["text"]);
      finish = std::string_view(doc["choices"].at(0)["finish_reason"]);
      // The engine ends the sequence once the stop string appears instead of running to max_tokens.
      BOOST_TEST(int64_t(doc["usage"]["completion_tokens"]) < 20, r.body);
    }
    BOOST_TEST(text.find(", 9") == std::string::npos, text);
    BOOST_TEST(text.find("7, 8") != std::string::npos, text);
    BOOST_TEST(finish == "stop");
  }
}

// Several prompts in one completion request: one choice per prompt (times n) with its index, each the same
// text as that prompt alone gives, the usage counting every prompt.
BOOST_AUTO_TEST_CASE(completions_take_an_array_of_prompts) {
  DaemonProcess& d = daemon_with_model();
  simdjson::dom::parser parser;
  auto alone = [&](const std::string& prompt) {
    Reply r = http("POST", d.base_url() + "/v1/completions",
                   R"({"model": "smollm2", "max_tokens": 6, "temperature": 0, "prompt": ")" + prompt + "\"}");
    simdjson::dom::element doc = parser.parse(r.body);
    return std::make_pair(std::string(std::string_view(doc["choices"].at(0)["text"])), int64_t(doc["usage"]["prompt_tokens"]));
  };
  const auto [capital, capital_tokens] = alone("The capital of France is");
  const auto [count, count_tokens] = alone("One, two, three,");
  Reply both = http("POST", d.base_url() + "/v1/completions",
                    R"({"model": "smollm2", "max_tokens": 6, "temperature": 0, "n": 2, "prompt": ["The capital of France is", "One, two, three,"]})");
  BOOST_REQUIRE_EQUAL(both.status, 200);
  simdjson::dom::element doc = parser.parse(both.body);
  simdjson::dom::array choices = doc["choices"];
  BOOST_REQUIRE_EQUAL(choices.size(), 4u);
  for (int64_t i = 0; i < 4; ++i) {
    BOOST_TEST(int64_t(choices.at(size_t(i))["index"]) == i);
    BOOST_TEST(std::string(std::string_view(choices.at(size_t(i))["text"])) == (i < 2 ? capital : count), both.body);
  }
  BOOST_TEST(int64_t(doc["usage"]["prompt_tokens"]) == capital_tokens + count_tokens);
}

// vLLM's stop_token_ids end a generation at that token, as an end-of-sequence token would.
BOOST_AUTO_TEST_CASE(stop_token_ids_end_the_generation) {
  DaemonProcess& d = daemon_with_model();
  const std::string body = R"({"model": "smollm2", "prompt": "Count: 1, 2, 3, 4, 5, 6,", "max_tokens": 12, "temperature": 0)";
  simdjson::dom::parser parser;
  Reply free_run = http("POST", d.base_url() + "/v1/completions", body + R"(, "logprobs": 0})");
  BOOST_REQUIRE_EQUAL(free_run.status, 200);
  simdjson::dom::element doc = parser.parse(free_run.body);
  const std::string third(std::string_view(doc["choices"].at(0)["logprobs"]["tokens"].at(2)));
  Reply ids = http("POST", d.base_url() + "/tokenize", R"({"model": "smollm2", "content": ")" + third + "\"}");
  const int64_t third_id = int64_t(parser.parse(ids.body)["tokens"].at(0));
  Reply stopped = http("POST", d.base_url() + "/v1/completions", body + R"(, "stop_token_ids": [)" + std::to_string(third_id) + "]}");
  BOOST_REQUIRE_EQUAL(stopped.status, 200);
  doc = parser.parse(stopped.body);
  BOOST_TEST(int64_t(doc["usage"]["completion_tokens"]) == 3, stopped.body);
  BOOST_TEST(std::string_view(doc["choices"].at(0)["finish_reason"]) == "stop");
}

BOOST_AUTO_TEST_CASE(helper_routes_in_llama_server_shapes) {
  DaemonProcess& d = daemon_with_model();
  Reply t = http("POST", d.base_url() + "/tokenize", R"({"model": "smollm2", "content": "Hello world"})");
  BOOST_REQUIRE_EQUAL(t.status, 200);
  BOOST_TEST(t.body == R"({"tokens":[19556,905]})");
  Reply dt = http("POST", d.base_url() + "/detokenize", R"({"model": "smollm2", "tokens": [19556, 905]})");
  BOOST_TEST(dt.body == R"({"content":"Hello world"})");
  // Ids the vocabulary does not have are named, here and in logit_bias, not ignored.
  Reply bad_ids = http("POST", d.base_url() + "/detokenize", R"({"model": "smollm2", "tokens": [19556, 999999]})");
  BOOST_TEST(bad_ids.status == 400);
  BOOST_TEST(bad_ids.body.find("token id 999999 is outside the vocabulary of 49152") != std::string::npos, bad_ids.body);
  Reply bad_bias = http("POST", d.base_url() + "/v1/completions",
                        R"({"model": "smollm2", "prompt": "x", "max_tokens": 1, "logit_bias": {"999999": 5}})");
  BOOST_TEST(bad_bias.status == 400);
  BOOST_TEST(bad_bias.body.find(R"("param":"logit_bias")") != std::string::npos, bad_bias.body);
  Reply a = http("POST", d.base_url() + "/apply-template", R"({"messages": [{"role": "user", "content": "Hi"}]})");
  BOOST_REQUIRE_EQUAL(a.status, 200);
  BOOST_TEST(a.body.find(R"(<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n)") != std::string::npos, a.body);
  Reply m = http("GET", d.base_url() + "/v1/models/smollm2");
  BOOST_TEST(m.body.find(R"("id":"smollm2")") != std::string::npos);
  BOOST_TEST(http("GET", d.base_url() + "/v1/models/other").status == 404);
}

BOOST_AUTO_TEST_CASE(every_error_has_its_status_and_names_the_field) {
  DaemonProcess& d = daemon_with_model();
  const std::string chat = d.base_url() + "/v1/chat/completions";
  auto expect = [&](const std::string& body, int status, const std::string& needle) {
    Reply r = http("POST", chat, body);
    BOOST_TEST(r.status == status, body << " -> " << r.body);
    BOOST_TEST(r.body.find(needle) != std::string::npos, body << " -> " << r.body);
  };
  expect(R"({"model": "nope", "messages": [{"role": "user", "content": "x"}]})", 404, "loaded models: smollm2");
  expect(R"({"model": "smollm2", "messages": )", 400, "invalid_json");
  expect(R"({"model": "smollm2"})", 400, R"("param":"messages")");
  expect(R"({"model": "smollm2", "messages": []})", 400, "must not be empty");
  expect(chat_body("x", R"("temperature": "hot")"), 400, R"("param":"temperature")");
  expect(chat_body("x", R"("max_tokens": 0)"), 400, R"("param":"max_tokens")");
  expect(chat_body("x", R"("n": 17)"), 400, R"("param":"n")");
  expect(chat_body("x", R"("stop": 5)"), 400, R"("param":"stop")");
  expect(chat_body("x", R"("top_logprobs": 3)"), 400, R"("param":"top_logprobs")");
  expect(chat_body("x", R"("logprobs": true, "top_logprobs": 50)"), 400, R"("param":"top_logprobs")");
  expect(R"({"model": "smollm2", "messages": [{"content": "no role"}]})", 400, "role");
  std::string long_text;
  for (int i = 0; i < 700; ++i) long_text += "word ";
  expect(chat_body(long_text, ""), 400, "context_length_exceeded");
  expect(chat_body(long_text, ""), 400, "is loaded with a context of 512 tokens");
  BOOST_TEST(http("GET", chat).status == 405);
  // After all of that the daemon still answers.
  BOOST_TEST(http("POST", chat, chat_body("Hi", R"("max_tokens": 2)")).status == 200);
}

BOOST_AUTO_TEST_CASE(parallel_streams_do_not_cross_talk) {
  DaemonProcess& d = daemon_with_model();
  const int kClients = 16;
  std::vector<std::string> prompts, alone(kClients);
  for (int i = 0; i < kClients; ++i) prompts.push_back("Write the number " + std::to_string(i * 7) + " in words.");
  for (int i = 0; i < kClients; ++i) {
    Reply r = http("POST", d.base_url() + "/v1/chat/completions", chat_body(prompts[size_t(i)], R"("max_tokens": 12, "temperature": 0)"));
    simdjson::dom::parser parser;
    alone[size_t(i)] = std::string_view(parser.parse(r.body)["choices"].at(0)["message"]["content"]);
  }
  // All at once, streaming: each must get exactly what it got alone (decoding is batch-invariant).
  std::vector<std::string> together(kClients);
  std::vector<std::jthread> threads;
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      Reply r = http("POST", d.base_url() + "/v1/chat/completions",
                     chat_body(prompts[size_t(i)], R"("max_tokens": 12, "temperature": 0, "stream": true)"));
      together[size_t(i)] = read_stream(r.body, true).text;
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) BOOST_TEST(together[size_t(i)] == alone[size_t(i)], "client " << i);
}

BOOST_AUTO_TEST_CASE(a_client_that_disconnects_frees_its_sequence) {
  DaemonProcess& d = daemon_with_model();
  // A long stream cut off once it has started: head takes its first bytes and exits, and curl, writing
  // more, gets SIGPIPE and closes the connection (however slow the build, the generation is running).
  run_command("curl -s -N -d '" + chat_body("Tell a long story.", R"("max_tokens": 400, "ignore_eos": true, "stream": true)") +
              "' " + d.base_url() + "/v1/chat/completions | head -c 300 > /dev/null");
  int64_t running = -1;
  for (int i = 0; i < 50 && running != 0; ++i) {
    CommandResult s = run_command(env_or_fail("FTLLMCTL") + " --socket " + d.socket_path() + " status --json");
    simdjson::dom::parser parser;
    running = int64_t(parser.parse(s.out)["models"].at(0)["requests_running"]);
    if (running) usleep(100000);
  }
  BOOST_TEST(running == 0);
  BOOST_TEST(d.log().find("finish=client closed") != std::string::npos);
  BOOST_TEST(http("POST", d.base_url() + "/v1/chat/completions", chat_body("Hi", R"("max_tokens": 2)")).status == 200);
}

BOOST_AUTO_TEST_CASE(the_official_openai_sdk_works_unchanged) {
  DaemonProcess& d = daemon_with_model();
  CommandResult r = run_command(std::string(FTLLM_SOURCE_ROOT) + "/.venv/bin/python " + FTLLM_SOURCE_ROOT +
                                "/tests/integration/openai_sdk_check.py " + d.base_url() + " smollm2");
  BOOST_TEST_MESSAGE(r.out);
  BOOST_TEST(r.exit_code == 0, r.out + r.err);
  BOOST_TEST(r.out.find("ALL OK") != std::string::npos);
}

// Constrained decoding end to end, with Python's jsonschema as the oracle (structured_output_check.py):
// 200 generated schemas plus Pydantic and zod shapes, the SDK's parse(), json_object, GBNF, the 400s.
BOOST_AUTO_TEST_CASE(structured_output_validates_against_every_schema) {
  DaemonProcess& d = daemon_with_model();
  const int schemas = kSanitizerSlowdown > 1 ? 20 : 200;
  CommandResult r = run_command(std::string(FTLLM_SOURCE_ROOT) + "/.venv/bin/python " + FTLLM_SOURCE_ROOT +
                                "/tests/integration/structured_output_check.py " + d.base_url() + " smollm2 " +
                                std::to_string(schemas));
  BOOST_TEST_MESSAGE(r.out);
  BOOST_TEST(r.exit_code == 0, r.out + r.err);
  BOOST_TEST(r.out.find("ALL OK") != std::string::npos);
}

// The same property on every random-weight fixture architecture (f32), every schema on each: their
// wishes are noise, read through a tokenizer of bytes alone (tests/data/tokenizers/bytes), and what they
// write must still validate; so must their required and named tool calls (ChatML's <tool_call>).
BOOST_AUTO_TEST_CASE(structured_output_holds_on_every_fixture_architecture) {
  TempDir dir;
  const std::string data = std::string(FTLLM_SOURCE_ROOT) + "/tests/data/";
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(data + "models")) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with("-f32")) continue;
    const std::string model = dir.file(name);
    std::filesystem::create_directory(model);
    for (const char* file : {"config.json", "generation_config.json", "model.safetensors"})
      std::filesystem::create_symlink(entry.path() / file, model + "/" + file);
    std::filesystem::create_symlink(data + "tokenizers/bytes/tokenizer.json", model + "/tokenizer.json");
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  BOOST_REQUIRE(names.size() >= 10u);
  const std::string chatml = " --chat_template " + data + "chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja";
  DaemonProcess d(dir, {dir.file(names[0]), "--name", names[0], "-t", "2", "--ctx", "2048", "--chat_template",
                        data + "chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja"});
  std::string list = names[0];
  for (size_t i = 1; i < names.size(); ++i) {
    CommandResult load = run_command(env_or_fail("FTLLMCTL") + " --socket " + d.socket_path() + " load " + dir.file(names[i]) +
                                     " --name " + names[i] + " -t 2 --ctx 2048" + chatml);
    BOOST_REQUIRE_MESSAGE(load.exit_code == 0, load.out + load.err);
    list += "," + names[i];
  }
  const int schemas = kSanitizerSlowdown > 1 ? 20 : 200;
  CommandResult r = run_command(std::string(FTLLM_SOURCE_ROOT) + "/.venv/bin/python " + FTLLM_SOURCE_ROOT +
                                "/tests/integration/structured_output_check.py " + d.base_url() + " " + list + " " +
                                std::to_string(schemas) + " schemas");
  BOOST_TEST_MESSAGE(r.out);
  BOOST_TEST(r.exit_code == 0, r.out + r.err);
  BOOST_TEST(r.out.find("ALL OK") != std::string::npos);
  std::string hermes;
  for (const std::string& name : names) hermes += " " + name + "=hermes";
  r = run_command(std::string(FTLLM_SOURCE_ROOT) + "/.venv/bin/python " + FTLLM_SOURCE_ROOT +
                  "/tests/integration/tool_dialects_check.py " + d.base_url() + hermes);
  BOOST_TEST_MESSAGE(r.out);
  BOOST_TEST(r.exit_code == 0, r.out + r.err);
  BOOST_TEST(r.out.find("ALL OK") != std::string::npos);
}

// tool_choice required or named, enforced in the <tool_call> format of the template given (SmolLM2 speaks
// ChatML, as Qwen2.5's template does): every answer is calls of the allowed tools with valid arguments.
// Then LangChain's structured output and tool round trip on the same daemon, Anthropic's Messages API and
// OpenAI's Responses API.
BOOST_AUTO_TEST_CASE(tool_choice_is_enforced_in_the_models_tool_call_format) {
  TempDir dir;
  DaemonProcess d(dir, {smollm2_gguf_path(), "--name", "smollm2", "-t", "2", "--ctx", "1024", "--chat_template",
                        std::string(FTLLM_SOURCE_ROOT) + "/tests/data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja"});
  CommandResult r = run_command(std::string(FTLLM_SOURCE_ROOT) + "/.venv/bin/python " + FTLLM_SOURCE_ROOT +
                                "/tests/integration/tool_choice_check.py " + d.base_url() + " smollm2");
  BOOST_TEST_MESSAGE(r.out);
  BOOST_TEST(r.exit_code == 0, r.out + r.err);
  BOOST_TEST(r.out.find("ALL OK") != std::string::npos);
  // Anthropic's Messages API on the same daemon through the anthropic SDK (anthropic_check.py): whole and
  // streamed, stop sequences, structured output, a tool round trip, count_tokens, its error shape.
  CommandResult messages = run_command(std::string(FTLLM_SOURCE_ROOT) + "/.venv/bin/python " + FTLLM_SOURCE_ROOT +
                                       "/tests/integration/anthropic_check.py " + d.base_url() + " smollm2");
  BOOST_TEST(messages.exit_code == 0, messages.out + messages.err);
  BOOST_TEST(messages.out == "ok\n");
  // The Responses API through the OpenAI SDK (responses_check.py): items, typed events, function calls.
  CommandResult responses = run_command(std::string(FTLLM_SOURCE_ROOT) + "/.venv/bin/python " + FTLLM_SOURCE_ROOT +
                                        "/tests/integration/responses_check.py " + d.base_url() + " smollm2");
  BOOST_TEST(responses.exit_code == 0, responses.out + responses.err);
  BOOST_TEST(responses.out == "ok\n");
  // LangChain as agents use it: with_structured_output, and bind_tools through a whole tool round trip.
  r = run_command(std::string(FTLLM_SOURCE_ROOT) + "/.venv/bin/python " + FTLLM_SOURCE_ROOT +
                  "/tests/integration/langchain_check.py " + d.base_url() + " smollm2");
  BOOST_TEST_MESSAGE(r.out);
  BOOST_TEST(r.exit_code == 0, r.out + r.err);
  BOOST_TEST(r.out.find("ALL OK") != std::string::npos);
}

// Every tool-call dialect end to end: SmolLM2 loaded once per real template (its vocabulary spells each
// dialect's markers in ordinary tokens, which the grammar enforces and the parser reads), driven by the
// OpenAI SDK through required, named, streamed, round-tripped and forbidden calls.
BOOST_AUTO_TEST_CASE(tool_calls_round_trip_in_every_dialect) {
  const std::vector<std::pair<std::string, std::string>> dialects = {
      {"Qwen3-Coder.jinja", "qwen3-coder"}, {"GLM-4.6.jinja", "glm-4.5"},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", "llama-3"}, {"mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral-nemo"},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral"}, {"deepseek-ai-DeepSeek-V3.1.jinja", "deepseek-v3.1"},
      {"moonshotai-Kimi-K2.jinja", "kimi-k2"}, {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "deepseek-r1"},
      {"openai-gpt-oss-120b.jinja", "gpt-oss"}};
  const std::string templates = std::string(FTLLM_SOURCE_ROOT) + "/tests/data/chat-templates/";
  TempDir dir;
  DaemonProcess d(dir, {smollm2_gguf_path(), "--name", "m0", "-t", "2", "--ctx", "1024", "--chat_template", templates + dialects[0].first});
  std::string args = " m0=" + dialects[0].second;
  for (size_t i = 1; i < dialects.size(); ++i) {
    const std::string name = "m" + std::to_string(i);
    CommandResult load = run_command(env_or_fail("FTLLMCTL") + " --socket " + d.socket_path() + " load " + smollm2_gguf_path() +
                                     " --name " + name + " -t 2 --ctx 1024 --chat_template " + templates + dialects[i].first);
    BOOST_REQUIRE_MESSAGE(load.exit_code == 0, load.out + load.err);
    args += " " + name + "=" + dialects[i].second;
  }
  CommandResult r = run_command(std::string(FTLLM_SOURCE_ROOT) + "/.venv/bin/python " + FTLLM_SOURCE_ROOT +
                                "/tests/integration/tool_dialects_check.py " + d.base_url() + args);
  BOOST_TEST_MESSAGE(r.out);
  BOOST_TEST(r.exit_code == 0, r.out + r.err);
  BOOST_TEST(r.out.find("ALL OK") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(malformed_requests_leave_the_daemon_serving) {
  DaemonProcess& d = daemon_with_model();
  const std::vector<std::string> corpus = {
      "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 5\r\n\r\n{\"a\":",
      "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 3\r\n\r\nnul",
      "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n[]",
      // prompts of two kinds (several prompts of one kind are valid, as OpenAI has them)
      "POST /v1/completions HTTP/1.1\r\nContent-Length: 38\r\n\r\n{\"model\":\"smollm2\",\"prompt\":[[1],\"x\"]}",
      "POST /v1/completions HTTP/1.1\r\nContent-Length: 37\r\n\r\n{\"model\":\"smollm2\",\"prompt\":[-1, 5]} ",
      "POST /tokenize HTTP/1.1\r\nContent-Length: 4\r\n\r\n\"x\"\n",
      "POST /detokenize HTTP/1.1\r\nContent-Length: 33\r\n\r\n{\"model\":\"smollm2\",\"tokens\":[1e9]}",
      "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n",
      "GET /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: -4\r\n\r\n",
      "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  // a TLS hello to a plain-HTTP port
  };
  for (const std::string& raw : corpus) {
    // Each is answered (a request cut short would wait out the client's 5 s, then read as nothing).
    std::string reply = raw_reply(d.port(), raw);
    BOOST_TEST(reply.starts_with("HTTP/1.1 4"), raw.substr(0, 40) << " -> " << reply.substr(0, 80));
    BOOST_TEST(http("GET", d.base_url() + "/health").status == 200);
  }
  BOOST_TEST(http("POST", d.base_url() + "/v1/chat/completions", chat_body("Hi", R"("max_tokens": 2)")).status == 200);
}

BOOST_AUTO_TEST_CASE(metrics_count_requests_tokens_and_latency) {
  DaemonProcess& d = daemon_with_model();
  BOOST_REQUIRE_EQUAL(http("POST", d.base_url() + "/v1/chat/completions", chat_body("Hi", R"("max_tokens": 4, "ignore_eos": true)")).status, 200);
  Reply m = http("GET", d.base_url() + "/metrics");
  BOOST_REQUIRE_EQUAL(m.status, 200);
  auto value_of = [&](const std::string& series) {
    size_t at = m.body.find("\n" + series + " ");
    BOOST_REQUIRE_MESSAGE(at != std::string::npos, series + " missing from:\n" + m.body);
    return std::stod(m.body.substr(at + series.size() + 2));
  };
  BOOST_TEST(value_of(R"(ftllm_requests_total{endpoint="/v1/chat/completions",status="200"})") >= 1);
  BOOST_TEST(value_of(R"(ftllm_generation_tokens_total{model="smollm2"})") >= 4);
  BOOST_TEST(value_of(R"(ftllm_time_to_first_token_seconds_count{model="smollm2"})") >= 1);
  BOOST_TEST(value_of(R"(ftllm_inter_token_latency_seconds_count{model="smollm2"})") >= 3);
  BOOST_TEST(value_of(R"(ftllm_requests_running{model="smollm2"})") == 0);
  BOOST_TEST(m.body.find("ftllm_kv_cache_usage_ratio{model=\"smollm2\"}") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_full_queue_answers_503_with_retry_after) {
  TempDir dir;
  std::string conf = dir.file("ftllmd.conf");
  std::ofstream(conf) << "[server]\nmax_waiting = 1\n";
  DaemonProcess d(dir, {smollm2_gguf_path(), "--name", "smollm2", "--config", conf, "-t", "1", "--ctx", "512", "--max_sequences", "1"});
  // One running, one waiting: the third is refused. Each sent once /metrics shows the one before in
  // place (a request sent earlier could itself be the one refused, or wait and be answered after both).
  // Client threads are std::jthreads here and below: a failed check (an exception) joins them rather than
  // ending the whole program.
  auto wait_for = [&](const std::string& series) {
    for (int i = 0; i < 500 * kSanitizerSlowdown; ++i) {
      if (http("GET", d.base_url() + "/metrics").body.find(series) != std::string::npos) return;
      usleep(10000);
    }
    BOOST_FAIL("/metrics never showed " + series);
  };
  std::vector<std::jthread> busy;
  busy.reserve(2);
  auto send_busy = [&] {
    // Long enough to hold the one slot through the checks below (fewer tokens where each is slower).
    const std::string tokens = kSanitizerSlowdown > 1 ? "120" : "300";
    busy.emplace_back([&, tokens] {
      http("POST", d.base_url() + "/v1/chat/completions", chat_body("Go", R"("max_tokens": )" + tokens + R"(, "ignore_eos": true)"));
    });
  };
  send_busy();
  wait_for("ftllm_requests_running{model=\"smollm2\"} 1\n");
  // The waiting one streams: it gets its headers, but no chunk (not even the role's) before its first token.
  const std::string waiting_out = dir.file("waiting.sse");
  busy.emplace_back([&] {
    run_command("curl -s -N --max-time " + std::to_string(120 * kSanitizerSlowdown) + " -H 'Content-Type: application/json' -d '" +
                chat_body("Wait", R"("max_tokens": 2, "stream": true)") + "' " + d.base_url() + "/v1/chat/completions > " + waiting_out);
  });
  wait_for("ftllm_requests_waiting{model=\"smollm2\"} 1\n");
  // The server-wide gauges an endpoint picker reads say the same.
  const std::string now = http("GET", d.base_url() + "/metrics").body;
  BOOST_TEST(now.find("ftllm_server_requests_waiting 1\n") != std::string::npos, now);
  BOOST_TEST(now.find("ftllm_server_requests_running 1\n") != std::string::npos, now);
  auto value_after = [&](const std::string& name) {  // the sample's value, not the HELP line's
    const size_t at = now.find("\n" + name);
    return at == std::string::npos ? -1.0 : std::stod(now.substr(at + 1 + name.size()));
  };
  const double kv_used = value_after("ftllm_server_kv_cache_usage_ratio ");
  BOOST_TEST(kv_used > 0.0, now);  // the running one's pages
  BOOST_TEST(kv_used == value_after("ftllm_kv_cache_usage_ratio{model=\"smollm2\"} "), now);  // one model: the same
  usleep(300000);
  std::stringstream so_far;
  so_far << std::ifstream(waiting_out).rdbuf();
  BOOST_TEST(so_far.str().find("data:") == std::string::npos, so_far.str());
  const Reply refused = http("POST", d.base_url() + "/v1/chat/completions", chat_body("Me too", R"("max_tokens": 1)"), "-i");
  BOOST_TEST(refused.body.find("HTTP/1.1 503") != std::string::npos, refused.body);
  BOOST_TEST(refused.body.find("Retry-After: 1") != std::string::npos);
  BOOST_TEST(refused.body.find("queue_full") != std::string::npos);
  for (auto& t : busy) t.join();
  // The waiting request's time to first token counts its wait behind the 300-token one.
  const std::string metrics = http("GET", d.base_url() + "/metrics").body;
  auto series = [&](const std::string& name) {
    const size_t at = metrics.find(name);
    BOOST_REQUIRE_MESSAGE(at != std::string::npos, name);
    return std::stod(metrics.substr(at + name.size() + 1));
  };
  BOOST_TEST(series(R"(ftllm_time_to_first_token_seconds_count{model="smollm2"})") -
                 series(R"(ftllm_time_to_first_token_seconds_bucket{model="smollm2",le="0.5"})") >= 1.0,
             metrics);
  std::stringstream answered;
  answered << std::ifstream(waiting_out).rdbuf();
  BOOST_TEST(answered.str().find(R"("role":"assistant")") != std::string::npos, answered.str());
  BOOST_TEST(answered.str().find("[DONE]") != std::string::npos);
}

// A browser page on another origin: its preflight is answered, its requests (plain and streamed) carry
// the origin it may read them from, an origin the config does not list gets none and a 403 preflight.
BOOST_AUTO_TEST_CASE(cors_lets_the_configured_origins_call_the_api) {
  TempDir dir;
  std::string conf = dir.file("ftllmd.conf");
  std::ofstream(conf) << "[server]\ncors_origins = [\"https://chat.example.com\"]\n";
  DaemonProcess d(dir, {smollm2_gguf_path(), "--name", "smollm2", "--config", conf, "-t", "1", "--ctx", "512"});
  const std::string preflight = "-X OPTIONS -H 'Access-Control-Request-Method: POST' "
                                "-H 'Access-Control-Request-Headers: authorization, content-type' ";
  CommandResult ok = run_command("curl -s -i " + preflight + "-H 'Origin: https://chat.example.com' " + d.base_url() + "/v1/chat/completions");
  BOOST_TEST(ok.out.find("HTTP/1.1 204") == 0u, ok.out);
  BOOST_TEST(ok.out.find("Access-Control-Allow-Origin: https://chat.example.com\r\n") != std::string::npos, ok.out);
  BOOST_TEST(ok.out.find("Access-Control-Allow-Methods: POST\r\n") != std::string::npos, ok.out);
  BOOST_TEST(ok.out.find("Access-Control-Allow-Headers: authorization, content-type\r\n") != std::string::npos, ok.out);
  BOOST_TEST(ok.out.find("Credentials") == std::string::npos, ok.out);
  CommandResult other = run_command("curl -s -i " + preflight + "-H 'Origin: https://evil.example.com' " + d.base_url() + "/v1/chat/completions");
  BOOST_TEST(other.out.find("HTTP/1.1 403") == 0u, other.out);
  BOOST_TEST(other.out.find("Access-Control-Allow-Origin") == std::string::npos, other.out);
  // Without preflight headers OPTIONS is still a method the path does not take.
  BOOST_TEST(run_command("curl -s -o /dev/null -w '%{http_code}' -X OPTIONS " + d.base_url() + "/v1/models").out == "405");

  const Reply plain = http("POST", d.base_url() + "/v1/chat/completions", chat_body("Hi", R"("max_tokens": 2)"),
                           "-i -H 'Origin: https://chat.example.com'");
  BOOST_TEST(plain.body.find("Access-Control-Allow-Origin: https://chat.example.com\r\n") != std::string::npos, plain.body);
  BOOST_TEST(plain.body.find("Vary: Origin\r\n") != std::string::npos, plain.body);
  const Reply streamed = http("POST", d.base_url() + "/v1/chat/completions", chat_body("Hi", R"("max_tokens": 2, "stream": true)"),
                              "-i -H 'Origin: https://chat.example.com'");
  BOOST_TEST(streamed.body.find("Access-Control-Allow-Origin: https://chat.example.com\r\n") != std::string::npos, streamed.body);
  BOOST_TEST(streamed.body.find("data: [DONE]") != std::string::npos);
  const Reply foreign = http("GET", d.base_url() + "/v1/models", "", "-i -H 'Origin: https://evil.example.com'");
  BOOST_TEST(foreign.status == 200);
  BOOST_TEST(foreign.body.find("Access-Control-Allow-Origin") == std::string::npos, foreign.body);
}

// ftllmctl chat at a terminal: Ctrl-C stops a streaming reply (the request is cancelled) and the chat goes
// on; Ctrl-C twice at the prompt leaves (chat_interrupt_check.py).
BOOST_AUTO_TEST_CASE(ctrl_c_stops_a_chat_reply_and_twice_leaves) {
  DaemonProcess& d = daemon_with_model();
  CommandResult r = run_command(std::string(FTLLM_SOURCE_ROOT) + "/.venv/bin/python " + FTLLM_SOURCE_ROOT +
                                "/tests/integration/chat_interrupt_check.py " + env_or_fail("FTLLMCTL") + " " + d.socket_path() +
                                " " + d.base_url() + " smollm2");
  BOOST_TEST(r.exit_code == 0, r.out << r.err);
  BOOST_TEST(r.out == "ok\n");
}

// Ollama's API through the `ollama` client library (ollama_check.py): SmolLM2 for chat and generate, the
// embedding fixture (with the byte tokenizer its reference texts were tokenized with) for /api/embed.
BOOST_AUTO_TEST_CASE(ollama_clients_chat_generate_list_and_embed) {
  TempDir dir;
  const std::string fixture = std::string(FTLLM_SOURCE_ROOT) + "/tests/data/embedding/qwen3-last-normalized";
  const std::string emb = dir.file("emb");
  std::filesystem::copy(fixture, emb, std::filesystem::copy_options::recursive);
  std::filesystem::copy_file(std::string(FTLLM_SOURCE_ROOT) + "/tests/data/tokenizers/bytes/tokenizer.json", emb + "/tokenizer.json");
  DaemonProcess e(dir, {emb, "--name", "emb", "-t", "1", "--ctx", "128", "--kv_dtype", "f32"});
  DaemonProcess& d = daemon_with_model();
  CommandResult r = run_command(std::string(FTLLM_SOURCE_ROOT) + "/.venv/bin/python " + FTLLM_SOURCE_ROOT +
                                "/tests/integration/ollama_check.py " + d.base_url() + " smollm2 " + e.base_url() + " emb " + fixture +
                                "/reference.json");
  BOOST_TEST(r.exit_code == 0, r.out << r.err);
  BOOST_TEST(r.out == "ok\n");
}

// The WebUI at GET / in headless Chromium (webui_check.py, Selenium): the API key asked for after a 401,
// a streamed answer with its numbers, a long one stopped, the conversation found after a reload, phone
// width. Screenshots go to webui-screenshots/ in the build directory. --webui off leaves the page out.
BOOST_AUTO_TEST_CASE(webui_chats_in_a_real_browser) {
  TempDir dir;
  DaemonProcess d(dir, {smollm2_gguf_path(), "--name", "smollm2", "-t", "2", "--ctx", "1024", "--api_key", "sk-ui"});
  const Reply page = http("GET", d.base_url() + "/");
  BOOST_TEST(page.status == 200);
  BOOST_TEST(page.body.find("<title>ftllm</title>") != std::string::npos);
  const std::string shots = (std::filesystem::current_path() / "webui-screenshots").string();
  std::filesystem::create_directories(shots);
  CommandResult r = run_command(std::string(FTLLM_SOURCE_ROOT) + "/.venv/bin/python " + FTLLM_SOURCE_ROOT +
                                "/tests/integration/webui_check.py " + d.base_url() + " smollm2 sk-ui " + shots);
  BOOST_TEST(r.exit_code == 0, r.out << r.err);
  BOOST_TEST(r.out == "ok\n");
  BOOST_TEST(std::filesystem::file_size(shots + "/webui-phone.png") > 10000u);
  TempDir off_dir;
  DaemonProcess off(off_dir, {"--webui", "off"});
  BOOST_TEST(http("GET", off.base_url() + "/").status == 404);
}

// Wrong types and missing fields in each API's bodies: a 4xx in that API's own error shape, never a 5xx,
// and the daemon serves on.
BOOST_AUTO_TEST_CASE(each_api_answers_bad_bodies_in_its_own_error_shape) {
  DaemonProcess& d = daemon_with_model();
  const std::string anthropic = R"({"type":"error","error":{"type":")", ollama = R"({"error":")", openai = R"({"error":{"message":")";
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"/v1/messages", "not json", anthropic},
      {"/v1/messages", R"({"model": "smollm2", "messages": [{"role": "user", "content": "x"}]})", anthropic},  // no max_tokens
      {"/v1/messages", R"({"model": "smollm2", "max_tokens": "8", "messages": []})", anthropic},
      {"/v1/messages", R"({"model": "smollm2", "max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image"}]}]})", anthropic},
      {"/v1/messages", R"({"model": "smollm2", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "magic"}})", anthropic},
      {"/v1/messages/count_tokens", R"({"model": "smollm2", "messages": 3})", anthropic},
      {"/api/chat", "[1, 2]", ollama},
      {"/api/chat", R"({"model": "smollm2"})", ollama},
      {"/api/chat", R"({"model": "smollm2", "messages": [{"role": "user", "content": "x"}], "options": [1]})", ollama},
      {"/api/chat", R"({"model": "smollm2", "messages": [{"role": "user", "content": "x"}], "stream": "yes"})", ollama},
      {"/api/generate", R"({"model": "smollm2", "prompt": 5})", ollama},
      {"/api/generate", R"({"model": "smollm2", "prompt": "x", "format": 7})", ollama},
      {"/api/embed", R"({"model": "smollm2", "input": "x"})", ollama},
      {"/api/show", R"({"model": "nope"})", ollama},
      {"/v1/responses", R"({"model": "smollm2"})", openai},
      {"/v1/responses", R"({"model": "smollm2", "input": 5})", openai},
      {"/v1/responses", R"({"model": "smollm2", "input": [{"type": "image_generation_call"}]})", openai},
      {"/v1/responses", R"({"model": "smollm2", "input": "x", "max_output_tokens": -1})", openai},
      {"/v1/responses", R"({"model": "smollm2", "input": "x", "text": {"format": {"type": "xml"}}})", openai},
  };
  for (const auto& [path, body, shape] : cases) {
    const Reply r = http("POST", d.base_url() + path, body);
    BOOST_TEST((r.status >= 400 && r.status < 500), path << " " << body << " -> " << r.status << " " << r.body);
    BOOST_TEST(r.body.find(shape) == 0u, path << " " << body << " -> " << r.body);
  }
  BOOST_TEST(http("POST", d.base_url() + "/v1/chat/completions", chat_body("Hi", R"("max_tokens": 2)")).status == 200);
}

// /v1/embeddings on a decoder embedding model (tests/data/embedding: sentence-transformers' layout, its
// vectors the oracle) through the OpenAI SDK; what is wrong with a request, and a chat model, get a 400
// saying why.
BOOST_AUTO_TEST_CASE(embeddings_match_sentence_transformers_through_the_sdk) {
  TempDir dir;
  const std::string fixture = std::string(FTLLM_SOURCE_ROOT) + "/tests/data/embedding/qwen3-last-normalized";
  DaemonProcess d(dir, {fixture, "--name", "emb", "-t", "1", "--ctx", "128", "--kv_dtype", "f32"});
  CommandResult r = run_command(std::string(FTLLM_SOURCE_ROOT) + "/.venv/bin/python " + FTLLM_SOURCE_ROOT +
                                "/tests/integration/embeddings_check.py " + d.base_url() + " emb " + fixture + "/reference.json");
  BOOST_TEST(r.exit_code == 0, r.out << r.err);
  BOOST_TEST(r.out == "ok\n");
  auto post = [&](const std::string& body) { return http("POST", d.base_url() + "/v1/embeddings", body); };
  for (auto [body, says] : std::vector<std::pair<std::string, std::string>>{
           {R"({"model": "emb", "input": [[1, 2], 3]})", "'input' must be"},
           {R"({"model": "emb", "input": {"text": "x"}})", "'input' must be"},
           {R"({"model": "emb", "input": []})", "'input' is empty"},
           {R"({"model": "emb", "input": [[1, 99999]]})", "outside the vocabulary"},
           {R"({"model": "emb", "input": [[]]})", "input 0 is empty"},
           {R"({"model": "emb", "input": [[1, 2]], "encoding_format": "hex"})", "'encoding_format'"},
           {R"({"model": "emb", "input": [[1, 2]], "dimensions": 0})", "'dimensions' must be a positive integer"},
           {R"({"model": "emb", "input": [[1, 2]], "dimensions": 65})", "this model's embeddings have 64"},
           {R"({"model": "emb", "input": "no tokenizer here"})", "tokenizer"}}) {
    const Reply reply = post(body);
    BOOST_TEST(reply.status == 400, body << " -> " << reply.status << " " << reply.body);
    BOOST_TEST(reply.body.find(says) != std::string::npos, body << " -> " << reply.body);
  }
  const Reply chat = http("POST", daemon_with_model().base_url() + "/v1/embeddings", R"({"model": "smollm2", "input": "Hello"})");
  BOOST_TEST(chat.status == 400);
  BOOST_TEST(chat.body.find("is not an embedding model") != std::string::npos, chat.body);
}

// Clients that send a request and go away while it waits leave the queue at once: 20 of them against a
// queue of 4 do not make a live client's request a 503.
BOOST_AUTO_TEST_CASE(requests_of_clients_gone_leave_the_queue) {
  TempDir dir;
  std::string conf = dir.file("ftllmd.conf");
  std::ofstream(conf) << "[server]\nmax_waiting = 4\n";
  DaemonProcess d(dir, {smollm2_gguf_path(), "--name", "smollm2", "--config", conf, "-t", "1", "--ctx", "512", "--max_sequences", "1"});
  // Long enough to hold the one slot while the others come and go (fewer tokens where each is slower).
  const std::string tokens = kSanitizerSlowdown > 1 ? "150" : "450";
  std::jthread busy([&] {
    http("POST", d.base_url() + "/v1/chat/completions", chat_body("Go", R"("max_tokens": )" + tokens + R"(, "ignore_eos": true)"));
  });
  for (int i = 0; i < 500 * kSanitizerSlowdown && http("GET", d.base_url() + "/metrics").body.find("ftllm_requests_running{model=\"smollm2\"} 1\n") == std::string::npos; ++i)
    usleep(10000);
  const std::string gone = write_temp(chat_body("Gone", R"("max_tokens": 5)"));
  std::vector<std::jthread> leavers;
  for (int i = 0; i < 20; ++i)
    leavers.emplace_back([&] {
      run_command("curl -s -o /dev/null --max-time 0.2 -H 'Content-Type: application/json' --data-binary @" + gone + " " +
                  d.base_url() + "/v1/chat/completions");
    });
  for (auto& t : leavers) t.join();
  std::remove(gone.c_str());
  const Reply live = http("POST", d.base_url() + "/v1/chat/completions", chat_body("Still here", R"("max_tokens": 3)"));
  BOOST_TEST(live.status == 200, live.body);
  busy.join();
  BOOST_TEST(http("GET", d.base_url() + "/metrics").body.find("ftllm_requests_waiting{model=\"smollm2\"} 0\n") != std::string::npos);
}

// A thread's time on a CPU and its time ready to run while the machine ran others, in seconds (the first
// two fields of its schedstat); nullopt where the kernel keeps no such account.
struct SchedTimes {
  double cpu = 0, waiting = 0;
};
std::optional<SchedTimes> sched_times(const std::string& schedstat) {
  std::ifstream in(schedstat);
  uint64_t cpu_ns = 0, wait_ns = 0;
  if (!(in >> cpu_ns >> wait_ns)) return std::nullopt;
  return SchedTimes{double(cpu_ns) * 1e-9, double(wait_ns) * 1e-9};
}

// A thread's CPU time in the kernel, in seconds (stime, field 15 of its stat, in clock ticks): page faults
// and reclaim done on its behalf, which its schedstat time counts with its own work.
double system_seconds(const std::string& stat) {
  std::ifstream in(stat);
  std::string line;
  std::getline(in, line);
  const size_t close = line.rfind(')');  // the name in parentheses may hold spaces
  if (close == std::string::npos) return 0;
  std::istringstream fields(line.substr(close + 1));
  std::string skip;
  for (int field = 3; field < 15; ++field) fields >> skip;  // state .. utime
  double ticks = 0;
  fields >> ticks;
  return ticks / double(sysconf(_SC_CLK_TCK));
}

// Sixteen chat bodies of the maximum size (16 MiB) are parsed, rendered and tokenized by workers, not
// the event loop: /health, asked over a kept-alive connection meanwhile, keeps answering within 50 ms (it
// waited 2.2 s behind one 10 MB body when the loop tokenized). The last stall found was the loop reading:
// libuv reads a readable connection up to 32 times 64 KiB a turn, so sixteen senders kept it copying (and
// faulting in) ~20 MB for 15-20 ms a turn, 33-59 ms for the slowest /health; now a connection reads 256 KiB
// a turn (Server::kReadPerTurn) and the slowest was 5-28 ms in 14 of 15 quiet runs.
// What the machine withholds is not the daemon's doing: in CI other test programs share the two cores, and
// there one /health took 125 ms. So each answer's time is counted less the time the loop thread (the daemon's
// main thread) and this prober stood ready on the run queue meanwhile, as the kernel accounts it (schedstat);
// where the kernel keeps no such account, less the worst lateness of a thread of this test that only sleeps.
// 99 in 100 answers must come within 50 ms so counted, and every one within 250 ms: in a CI run with builds
// beside it one of ~1,900 took 58 ms, the loop blocked in the kernel rather than working (locally, under
// stress-ng --cpu 4, the slowest was 8-10 ms); work on the loop, the defect this guards against, took seconds.
constexpr double kSlowestHealth = 0.05 * kSanitizerSlowdown;

BOOST_AUTO_TEST_CASE(big_bodies_do_not_block_the_event_loop) {
  TempDir dir;
  DaemonProcess d(dir, {smollm2_gguf_path(), "--name", "smollm2", "-t", "1", "--ctx", "512"});
  // The default max_body_bytes, sixteen times; in a sanitized build four 4 MiB bodies (the full load
  // took it 7.5 minutes), enough to check the workers and the loop side by side; under ThreadSanitizer,
  // whose tokenizer is three times slower again, four of 1 MiB (33 s; 4 MiB took 112 s).
#if defined(__SANITIZE_THREAD__)
  const size_t limit = 1024 * 1024;
#else
  const size_t limit = kSanitizerSlowdown > 1 ? 4 * 1024 * 1024 : 16 * 1024 * 1024;
#endif
  const size_t bodies = kSanitizerSlowdown > 1 ? 4 : 16;
  std::string words;
  while (words.size() + 18 < limit - 256) words += "lighthouse keeper ";
  const std::string body = chat_body(words, R"("max_tokens": 4)");
  BOOST_REQUIRE(body.size() <= limit);
  BOOST_REQUIRE(body.size() > limit - 512);
  const std::string big = dir.file("big.json");
  std::ofstream(big) << body;
  std::vector<std::jthread> senders;
  std::vector<CommandResult> answers(bodies);
  std::atomic<int> answered = 0;
  for (size_t i = 0; i < answers.size(); ++i)
    senders.emplace_back([&, i] {
      // The senders run niced: on a real server the clients are other machines, not sixteen processes
      // taking this machine's two cores from the daemon and from the /health prober.
      answers[i] = run_command("nice -n 10 curl -s -S --max-time " + std::to_string(300 * kSanitizerSlowdown) +
                               " -H 'Content-Type: application/json' --data-binary @" + big + " " + d.base_url() +
                               "/v1/chat/completions");
      ++answered;
    });
  const std::string loop_task = "/proc/" + std::to_string(d.pid()) + "/task/" + std::to_string(d.pid());
  const std::string loop_stat = loop_task + "/schedstat";
  const std::string own_stat = "/proc/thread-self/schedstat";
  const bool accounted = sched_times(loop_stat) && sched_times(own_stat);
  // The fallback's control: how late a thread that only sleeps 20 ms at a time wakes meanwhile.
  std::atomic<bool> probing = true;
  double worst_lateness = 0;
  std::jthread control([&] {
    while (!accounted && probing) {
      const auto t0 = std::chrono::steady_clock::now();
      usleep(20000);
      const double late = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - 0.02;
      worst_lateness = std::max(worst_lateness, late);
    }
  });
  auto loop_and_own = [&] {
    if (!accounted) return std::pair<SchedTimes, SchedTimes>{};
    return std::pair{*sched_times(loop_stat), *sched_times(own_stat)};
  };
  struct Probe {
    double wait, held, loop_cpu, loop_kernel;  // the answer's time; less the run-queue waits; the loop's CPU time
                                               // meanwhile, and the part of it spent in the kernel
  };
  const std::string loop_task_stat = loop_task + "/stat";
  const int fd = connect_loopback(d.port());
  std::vector<Probe> probes;
  while (answered < int(answers.size())) {
    const auto before = loop_and_own();
    const double kernel_before = system_seconds(loop_task_stat);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string ask = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    BOOST_REQUIRE(::send(fd, ask.data(), ask.size(), MSG_NOSIGNAL) == ssize_t(ask.size()));
    std::string reply;
    char buf[4096];
    while (reply.find(R"({"status":"ok"})") == std::string::npos) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      BOOST_REQUIRE(n > 0);
      reply.append(buf, size_t(n));
    }
    const double wait = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto after = loop_and_own();
    const double withheld = (after.first.waiting - before.first.waiting) + (after.second.waiting - before.second.waiting);
    probes.push_back({wait, wait - withheld, after.first.cpu - before.first.cpu, system_seconds(loop_task_stat) - kernel_before});
    usleep(20000);
  }
  ::close(fd);
  probing = false;
  control.join();
  for (auto& t : senders) t.join();
  BOOST_TEST(probes.size() > 10u);
  auto by = [&](double Probe::*field) {
    return *std::max_element(probes.begin(), probes.end(), [&](const Probe& a, const Probe& b) { return a.*field < b.*field; });
  };
  const Probe slowest = by(&Probe::wait), most_held = by(&Probe::held);
  BOOST_TEST_MESSAGE(probes.size() << " /health beside " << bodies << " bodies of " << (limit >> 20) << " MiB: slowest "
                                   << slowest.wait * 1000 << " ms; less the run-queue waits, slowest " << most_held.held * 1000
                                   << " ms (the loop ran " << most_held.loop_cpu * 1000 << " ms meanwhile, "
                                   << most_held.loop_kernel * 1000 << " ms of it in the kernel)"
                                   << (accounted ? "" : " (no schedstat)") << "; a sleeping thread woke at most "
                                   << worst_lateness * 1000 << " ms late");
  if (accounted) {
    std::vector<double> held;
    for (const Probe& p : probes) held.push_back(p.held);
    std::sort(held.begin(), held.end());
    const double p99 = held[held.size() * 99 / 100];
    BOOST_TEST(p99 < kSlowestHealth, "99th percentile " << p99 << " s");
    // The slowest, less what the kernel did on the loop's behalf: once in CI, beside the sanitized tests,
    // one answer took 1.4 s with the loop 1.24 s on a CPU (its own work on the loop takes seconds of user time).
    const Probe worst = *std::max_element(probes.begin(), probes.end(), [](const Probe& a, const Probe& b) {
      return a.held - a.loop_kernel < b.held - b.loop_kernel;
    });
    BOOST_TEST(worst.held - worst.loop_kernel < 5 * kSlowestHealth,
               worst.held << " s, the loop ran " << worst.loop_cpu << " s meanwhile, " << worst.loop_kernel << " s of it in the kernel");
  } else {
    BOOST_TEST(slowest.wait < kSlowestHealth + worst_lateness);
  }
  for (const CommandResult& a : answers)
    BOOST_TEST(a.out.find("context_length_exceeded") != std::string::npos, a.out.substr(0, 300) + a.err);
}

BOOST_AUTO_TEST_CASE(api_key_is_required_when_set) {
  TempDir dir;
  DaemonProcess d(dir, {smollm2_gguf_path(), "--name", "smollm2", "--api_key", "sk-test", "-t", "1", "--ctx", "128"});
  BOOST_TEST(http("POST", d.base_url() + "/v1/chat/completions", chat_body("Hi", "")).status == 401);
  BOOST_TEST(http("POST", d.base_url() + "/tokenize", R"({"content": "x"})").status == 401);
  BOOST_TEST(http("POST", d.base_url() + "/v1/chat/completions", chat_body("Hi", R"("max_tokens": 2)"),
                  "-H 'Authorization: Bearer sk-test'").status == 200);
}

BOOST_AUTO_TEST_CASE(health_says_loading_until_the_model_is_resident) {
  // Start without waiting for READY: poll /health from the first moment it answers.
  TempDir dir;
  std::string log = dir.file("log");
  std::string cmd = env_or_fail("FTLLMD") + " " + smollm2_gguf_path() + " --name smollm2 -t 1 --listen 127.0.0.1:18765 --admin-socket " +
                    dir.file("s.sock") + " >/dev/null 2>" + log + " & echo $!";
  CommandResult started = run_command(cmd);
  int pid = std::stoi(started.out);
  bool saw_loading = false, saw_ok = false, chat_said_loading = false, chat_answered = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!saw_ok && std::chrono::steady_clock::now() < deadline) {
    CommandResult h = run_command("curl -s http://127.0.0.1:18765/health");
    saw_loading |= h.out.find(R"({"status":"loading","loading":["smollm2"]})") != std::string::npos;
    saw_ok |= h.out == R"({"status":"ok"})";
    // A request for the model meanwhile: 503 with Retry-After while it loads (it was a 404 "not loaded,
    // loaded models: smollm2" when the load finished between reading the request and queueing it).
    CommandResult chat = run_command("curl -s -i -H 'Content-Type: application/json' --data-binary '" +
                                     chat_body("Hi", R"("max_tokens": 1)") + "' http://127.0.0.1:18765/v1/chat/completions");
    if (chat.out.find("model_loading") != std::string::npos) {
      chat_said_loading = true;
      BOOST_TEST(chat.out.find("HTTP/1.1 503") == 0u, chat.out);
      BOOST_TEST(chat.out.find("Retry-After: 1") != std::string::npos, chat.out);
    } else if (!chat.out.empty()) {
      BOOST_TEST(chat.out.find("HTTP/1.1 200") == 0u, chat.out);
      chat_answered = true;
    }
  }
  ::kill(pid, SIGTERM);
  BOOST_TEST(saw_ok);
  BOOST_TEST(saw_loading);  // the GGUF takes a few hundred milliseconds to load
  BOOST_TEST(chat_said_loading);
  BOOST_TEST(chat_answered);
}

BOOST_AUTO_TEST_CASE(thinking_templates_send_reasoning_content) {
  // A template that opens <think> for the answer (as DeepSeek-R1's does): what the model writes before
  // </think> is reasoning, streamed and whole. --chat_template overrides the model's own.
  TempDir dir;
  std::string tmpl = dir.file("think.jinja");
  std::ofstream(tmpl) << "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                         "{%- if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}";
  DaemonProcess d(dir, {smollm2_gguf_path(), "--name", "smollm2", "--chat_template", tmpl, "-t", "1", "--ctx", "256"});
  Reply a = http("POST", d.base_url() + "/apply-template", R"({"messages": [{"role": "user", "content": "Hi"}]})");
  BOOST_TEST(a.body.find(R"(<think>\n)") != std::string::npos, a.body);
  Reply whole = http("POST", d.base_url() + "/v1/chat/completions", chat_body("Why is the sky blue?", R"("max_tokens": 6, "temperature": 0)"));
  simdjson::dom::parser parser;
  simdjson::dom::element msg = parser.parse(whole.body)["choices"].at(0)["message"];
  std::string_view reasoning;
  BOOST_REQUIRE_MESSAGE(!msg["reasoning_content"].get(reasoning), whole.body);
  BOOST_TEST(!reasoning.empty());
  BOOST_TEST(std::string_view(msg["content"]) == "");
  Reply streamed = http("POST", d.base_url() + "/v1/chat/completions",
                        chat_body("Why is the sky blue?", R"("max_tokens": 6, "temperature": 0, "stream": true)"));
  std::string joined;
  simdjson::dom::parser p2;
  for (size_t pos = 0; (pos = streamed.body.find("data: {", pos)) != std::string::npos; ++pos) {
    size_t end = streamed.body.find("\n\n", pos);
    simdjson::dom::element e = p2.parse(streamed.body.substr(pos + 6, end - pos - 6));
    for (auto c : e["choices"].get_array()) {
      std::string_view piece;
      if (!c["delta"]["reasoning_content"].get(piece)) joined += piece;
    }
  }
  BOOST_TEST(joined == reasoning);
  // The same reasoning through the Responses, Anthropic and Ollama APIs (thinking_check.py).
  CommandResult others = run_command(std::string(FTLLM_SOURCE_ROOT) + "/.venv/bin/python " + FTLLM_SOURCE_ROOT +
                                     "/tests/integration/thinking_check.py " + d.base_url() + " smollm2");
  BOOST_TEST(others.exit_code == 0, others.out << others.err);
  BOOST_TEST(others.out == "ok\n");
}

// 64 clients at once on a pool of 128 pages (8 sequences of 256 tokens; up to 32 run), each sampling
// with its own seed (so no two share pages): requests wait for pages, running ones are sent back to the
// queue when the pool runs short, and every one completes; those asked again alone give the same answer.
// A sanitized build sends 24 (still ~210 pages of work for 128: the same waits and preemptions, a third of
// the tokens).
BOOST_AUTO_TEST_CASE(sixty_four_clients_on_a_small_pool_all_get_their_own_answer) {
  TempDir dir;
  DaemonProcess d(dir, {smollm2_gguf_path(), "--name", "smollm2", "-t", "2", "--ctx", "256"});
  const std::vector<std::string> questions = {"Name a fruit.", "Count to five.", "What is rain?", "Say hello to Ada."};
  auto body = [&](size_t i) {
    return chat_body(questions[i % questions.size()],
                     R"("max_tokens": 100, "temperature": 0.8, "ignore_eos": true, "seed": )" + std::to_string(i));
  };
  auto content = [](const std::string& reply) {
    simdjson::dom::parser p;
    std::string_view c;
    return p.parse(reply)["choices"].at(0)["message"]["content"].get(c) ? std::string("<no content>") : std::string(c);
  };
  std::vector<Reply> replies(kSanitizerSlowdown > 1 ? 24 : 64);
  std::vector<std::jthread> clients;
  for (size_t i = 0; i < replies.size(); ++i)
    clients.emplace_back([&, i] { replies[i] = http("POST", d.base_url() + "/v1/chat/completions", body(i)); });
  for (auto& c : clients) c.join();
  for (size_t i = 0; i < replies.size(); ++i) {
    BOOST_TEST(replies[i].status == 200, replies[i].body);
    simdjson::dom::parser p;
    BOOST_TEST(int64_t(p.parse(replies[i].body)["usage"]["completion_tokens"]) == 100, "client " << i);
  }
  const std::string metrics = http("GET", d.base_url() + "/metrics").body;
  const std::string preemptions = "ftllm_preemptions_total{model=\"smollm2\"} ";
  const size_t at = metrics.find(preemptions);
  BOOST_REQUIRE(at != std::string::npos);
  BOOST_TEST(std::stoll(metrics.substr(at + preemptions.size())) > 0);
  BOOST_TEST(metrics.find("ftllm_requests_running{model=\"smollm2\"} 0\n") != std::string::npos);
  for (size_t i : {size_t(0), replies.size() / 3, replies.size() * 2 / 3, replies.size() - 1})
    BOOST_TEST(content(http("POST", d.base_url() + "/v1/chat/completions", body(i)).body) == content(replies[i].body), "client " << i);
}

// A chat sent twice: the second reads the prompt's rows from the prefix cache and says so in usage,
// /metrics and `ftllmctl status`, with the same answer; --prefix_cache off computes it again.
BOOST_AUTO_TEST_CASE(a_repeated_prompt_is_read_from_the_prefix_cache) {
  std::string question;
  for (int i = 0; i < 60; ++i) question += "Item " + std::to_string(i) + " is on the list. ";
  const std::string body = chat_body(question + "How many items are there?", R"("max_tokens": 8, "temperature": 0)");
  auto ask = [&](const DaemonProcess& d, const std::string& b) {
    Reply r = http("POST", d.base_url() + "/v1/chat/completions", b);
    BOOST_REQUIRE_EQUAL(r.status, 200);
    return r.body;
  };
  auto cached_of = [](simdjson::dom::element usage) { return int64_t(usage["prompt_tokens_details"]["cached_tokens"]); };
  for (const char* setting : {"on", "off"}) {
    TempDir dir;
    DaemonProcess d(dir, {smollm2_gguf_path(), "--name", "smollm2", "-t", "2", "--ctx", "1024", "--prefix_cache", setting});
    const bool on = std::string(setting) == "on";
    simdjson::dom::parser p1, p2, p3;
    simdjson::dom::element first = p1.parse(ask(d, body)), second = p2.parse(ask(d, body));
    const int64_t prompt = int64_t(first["usage"]["prompt_tokens"]);
    BOOST_TEST(prompt > 500);
    BOOST_TEST(cached_of(first["usage"]) == 0);
    // Whole 16-token pages, then the rows of the page the prompt ends in, copied (the first request left
    // it cached, full or not); the last prompt token always computed.
    const int64_t found = on ? prompt - 1 : 0;
    BOOST_TEST(cached_of(second["usage"]) == found);
    BOOST_TEST(std::string_view(first["choices"].at(0)["message"]["content"]) ==
               std::string_view(second["choices"].at(0)["message"]["content"]));
    // A stream's usage chunk says the same.
    std::string streamed = ask(d, body.substr(0, body.size() - 1) + R"(, "stream": true, "stream_options": {"include_usage": true}})");
    const size_t usage_at = streamed.rfind("data: {");
    BOOST_REQUIRE(usage_at != std::string::npos);
    simdjson::dom::element last = p3.parse(streamed.substr(usage_at + 6, streamed.find("\n\n", usage_at) - usage_at - 6));
    BOOST_TEST(cached_of(last["usage"]) == found);

    const std::string metrics = http("GET", d.base_url() + "/metrics").body;
    auto series = [&](const std::string& name) {
      const size_t at = metrics.find("\n" + name + "{model=\"smollm2\"} ");
      BOOST_REQUIRE_MESSAGE(at != std::string::npos, name + " missing");
      return std::stoll(metrics.substr(metrics.find("} ", at) + 2));
    };
    BOOST_TEST(series("ftllm_prefix_cache_queries_total") == 3 * prompt);
    BOOST_TEST(series("ftllm_prefix_cache_hits_total") == 2 * found);
    BOOST_TEST((series("ftllm_kv_cache_cached_blocks") > 0) == on);

    CommandResult status = run_command(env_or_fail("FTLLMCTL") + " --socket " + d.socket_path() + " status");
    BOOST_TEST(status.exit_code == 0);
    BOOST_TEST(status.out.find("CACHED PAGES") != std::string::npos, status.out);
    BOOST_TEST(status.out.find(on ? "% hit)" : " off ") != std::string::npos, status.out);
  }
}

BOOST_AUTO_TEST_CASE(a_bad_model_on_the_command_line_stops_startup_with_the_reason) {
  CommandResult r = run_command(env_or_fail("FTLLMD") + " /nonexistent/model.gguf --listen 127.0.0.1:0 --admin-socket /tmp/ftllm-x.sock");
  BOOST_TEST(r.exit_code == 1);
  BOOST_TEST(r.err.find("cannot load /nonexistent/model.gguf") != std::string::npos, r.err);
  r = run_command(env_or_fail("FTLLMD") + " " + smollm2_gguf_path() + " --prefix_cache maybe --listen 127.0.0.1:0 --admin-socket /tmp/ftllm-x.sock");
  BOOST_TEST(r.exit_code == 1);
  BOOST_TEST(r.err.find("--prefix_cache takes on or off, not \"maybe\"") != std::string::npos, r.err);
}

BOOST_AUTO_TEST_SUITE_END()
