// Chat templates against Python jinja2 as transformers renders them (tests/data/chat-templates/golden.json):
// 68 real templates x 7 conversations, byte for byte, errors where Python raised.
#include <simdjson.h>

#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "tokenizer/chat_template.h"

using namespace ftllm;
using tokenizer::ChatRequest;
using tokenizer::ChatTemplate;

namespace {

const std::string kDir = FTLLM_SOURCE_ROOT "/tests/data/chat-templates/";

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

ChatRequest request_of(simdjson::dom::element scenario, simdjson::dom::element special, std::time_t now) {
  ChatRequest r;
  r.messages = tokenizer::json_to_value(simdjson::to_string(scenario["messages"]));
  simdjson::dom::element tools;
  if (!scenario["tools"].get(tools)) r.tools = tokenizer::json_to_value(simdjson::to_string(tools));
  r.add_generation_prompt = bool(scenario["add_generation_prompt"]);
  for (auto [k, v] : special.get_object()) r.kwargs.emplace_back(std::string(k), jinja::Value::string(std::string(std::string_view(v))));
  simdjson::dom::object extra;
  if (!scenario["chat_template_kwargs"].get(extra))
    for (auto [k, v] : extra) r.kwargs.emplace_back(std::string(k), tokenizer::json_to_value(simdjson::to_string(v)));
  r.now = now;
  return r;
}

// Where two renderings part, with a little context, for the report.
std::string first_difference(const std::string& got, const std::string& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  auto around = [&](const std::string& s) {
    std::string part = s.substr(i >= 20 ? i - 20 : 0, 50);
    std::string esc;
    for (char c : part) esc += c == '\n' ? std::string("\\n") : std::string(1, c);
    return esc;
  };
  return "at byte " + std::to_string(i) + ": got [" + around(got) + "] want [" + around(want) + "]";
}

}  // namespace

BOOST_AUTO_TEST_CASE(real_templates_render_as_jinja2_does) {
  simdjson::dom::parser parser;
  simdjson::dom::element golden = parser.load(kDir + "golden.json");
  const std::time_t now = std::time_t(int64_t(golden["now_epoch_utc"]));
  simdjson::dom::element scenarios = golden["scenarios"], special = golden["special_tokens"];

  // Templates the issue names: every conversation must match.
  const std::set<std::string> required = {
      "Qwen-Qwen3-0.6B.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja",
      "meta-llama-Llama-3.3-70B-Instruct.jinja", "deepseek-ai-DeepSeek-V3.1.jinja",
      "mistralai-Mistral-Nemo-Instruct-2407.jinja", "HuggingFaceTB-SmolLM3-3B.jinja"};
  size_t passed = 0, total = 0, templates_all_pass = 0, templates = 0;
  for (auto [file, results] : golden["results"].get_object()) {
    std::string name(file);
    ++templates;
    std::unique_ptr<ChatTemplate> t;
    std::string parse_error;
    try {
      t = std::make_unique<ChatTemplate>(read(kDir + name));
    } catch (const std::exception& e) {
      parse_error = e.what();
    }
    size_t template_passed = 0, template_total = 0;
    for (auto [scenario_name, expected] : results.get_object()) {
      ++total;
      ++template_total;
      bool want_ok = bool(expected["ok"]);
      std::string outcome;
      try {
        if (!t) throw std::runtime_error(parse_error);
        std::string got = t->render(request_of(scenarios[scenario_name], special, now));
        std::string want = want_ok ? std::string(std::string_view(expected["text"])) : "";
        if (want_ok && got == want) outcome = "ok";
        else if (want_ok) outcome = first_difference(got, want);
        else outcome = "rendered, but jinja2 raised " + std::string(std::string_view(expected["error"]));
      } catch (const std::exception& e) {
        outcome = want_ok ? std::string("raised: ") + e.what() : "ok";
      }
      if (outcome == "ok") {
        ++passed;
        ++template_passed;
      } else {
        std::cout << "  FAIL " << name << " / " << scenario_name << ": " << outcome << "\n";
      }
      if (required.count(name)) BOOST_TEST(outcome == "ok", name << " / " << scenario_name << ": " << outcome);
    }
    templates_all_pass += template_passed == template_total;
  }
  std::cout << "chat templates: " << passed << "/" << total << " renderings match; " << templates_all_pass << "/"
            << templates << " templates match on every conversation" << std::endl;
  BOOST_TEST(templates == 68u);
}

BOOST_AUTO_TEST_CASE(template_errors_name_the_line_and_reason) {
  auto error_of = [](const std::string& source, ChatRequest r = {}) {
    try {
      ChatTemplate t(source);
      t.render(r);
    } catch (const jinja::TemplateError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  BOOST_TEST(error_of("a\n{% if %}") == "chat template line 2: the expression ends too early");
  BOOST_TEST(error_of("{% for x in y %}") == "chat template line 1: missing {% endfor %}");
  BOOST_TEST(error_of("x\ny\n{{ raise_exception('Only user and assistant roles are supported') }}") ==
             "chat template line 3: Only user and assistant roles are supported");
  BOOST_TEST(error_of("{{ messages[0].content.missing.deeper }}").find("is undefined") != std::string::npos);
  BOOST_TEST(error_of("{% bogus %}") == "chat template line 1: unknown tag 'bogus'");
  BOOST_TEST(error_of("{{ 1 | nosuchfilter }}") == "chat template line 1: unknown filter 'nosuchfilter'");
  BOOST_TEST(error_of("{{ 'unterminated }}") == "chat template line 1: tag opened with {{ is never closed");
}


// A template is code from a downloaded file: one that loops, recurses or allocates without end must fail
// with a TemplateError naming the limit, never exhaust the daemon's memory, stack or time. Findings of
// tests/fuzz's chat_template_fuzz among them.
BOOST_AUTO_TEST_CASE(runaway_templates_fail_within_the_limits) {
  auto error_of = [](const std::string& source) {
    ChatRequest r;
    r.limits.max_work = 2'000'000;
    r.limits.max_output_bytes = 1 << 20;
    try {
      ChatTemplate t(source);
      return "rendered: " + t.render(r).substr(0, 40);
    } catch (const jinja::TemplateError& e) {
      return std::string(e.what());
    }
  };
  auto has = [](const std::string& s, const char* part) {
    BOOST_TEST_INFO(s);
    BOOST_TEST(s.find(part) != std::string::npos);
  };
  has(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), "nested deeper than 200 levels");
  has(error_of("{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}{% endfor %}{% endfor %}{% endfor %}"),
      "more work than the limit");
  has(error_of("{{ range(100001) | length }}"), "range() too large: 100001 items");
  has(error_of("{{ range(0, 9223372036854775807, 4611686018427387904) | list }}"), "rendered: [0, 4611686018427387904]");
  has(error_of("{{ 'ab' * 1000000000 }}"), "a string over the limit of 1048576 bytes");
  has(error_of("{{ 'x' | center(1000000000) }}"), "over the limit");
  has(error_of("{{ 'a\nb' | indent(1000000000) }}"), "over the limit");
  has(error_of("{% set s = 'ab' * 1000 %}{% for i in range(2000) %}{{ s }}{% endfor %}"), "over the limit");
  has(error_of("{{ 2 ** 62 }}|{{ 2 ** 63 }}"), "integer overflow");
  has(error_of("{{ 2 ** 1000000000000 }}"), "integer overflow");  // by squaring: no trillion-step loop
  has(error_of("{{ 9223372036854775807 + 1 }}"), "integer overflow");
  has(error_of("{{ -9223372036854775807 - 1 }}|{{ (-9223372036854775807 - 1) // -1 }}"), "integer overflow");
  has(error_of("{{ 99999999999999999999 }}"), "the integer 99999999999999999999 does not fit in 64 bits");
  has(error_of("{{ 1e999 }}|{{ (1e300 * 1e300) | int }}"), "cannot convert the float inf to a 64-bit integer");
  has(error_of("{{ 7 % -1 }}|{{ 3 ** 2 }}|{{ -7 // 2 }}"), "rendered: 0|9|-4");
  has(error_of("{{" + std::string(300, '(') + "1" + std::string(300, ')') + "}}"), "nested deeper than 200 levels");
  has(error_of(std::string(300, '-') + "{{" + std::string(300, '-') + "1}}"), "nested deeper than 200 levels");
  std::string ifs;
  for (int k = 0; k < 300; ++k) ifs += "{% if true %}";
  has(error_of(ifs), "nested deeper than 200 levels");
  // A namespace holding itself: tojson stops, and the render frees it (the sanitizer build checks leaks).
  has(error_of("{% set ns = namespace(a=1) %}{% set ns.self = ns %}{{ ns.self.self.a }}{{ ns | tojson }}"),
      "nested deeper than 256 levels");
  has(error_of("{% set ns = namespace(a=1) %}{% set ns.self = ns %}{{ ns.self.self.a }}"), "rendered: 1");
  // The default limits leave real templates far inside them: a long conversation renders.
  ChatRequest big;
  for (int k = 0; k < 2000; ++k)
    big.messages.array->push_back(jinja::Value::dict({{"role", jinja::Value::string(k % 2 ? "assistant" : "user")},
                                                      {"content", jinja::Value::string(std::string(500, 'x'))}}));
  BOOST_TEST(ChatTemplate(read(kDir + "Qwen-Qwen3-0.6B.jinja")).render(big).size() > 1'000'000u);
}
BOOST_AUTO_TEST_CASE(templates_come_from_the_model_files) {
  // tokenizer_config.json's chat_template (Qwen3's is byte-identical to the fixture file).
  std::string from_config = tokenizer::find_chat_template(FTLLM_SOURCE_ROOT "/tests/data/tokenizers/qwen3");
  BOOST_TEST(from_config == read(kDir + "Qwen-Qwen3-0.6B.jinja"));
  // A chat_template.jinja file wins over tokenizer_config.json, as in transformers 5.
  char tmpl[] = "/tmp/ftllm-tmpl-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::ofstream(dir + "/chat_template.jinja") << "{{ messages[0].content }}";
  std::ofstream(dir + "/tokenizer_config.json") << R"({"chat_template": "ignored", "bos_token": {"content": "<s>"}, "eos_token": "</s>"})";
  BOOST_TEST(tokenizer::find_chat_template(dir) == "{{ messages[0].content }}");
  jinja::Object special = tokenizer::special_tokens_of(dir);
  BOOST_REQUIRE_EQUAL(special.size(), 2u);
  BOOST_TEST(special[0].second.s == "<s>");
  BOOST_TEST(special[1].second.s == "</s>");
  std::filesystem::remove_all(dir);
  BOOST_TEST(tokenizer::find_chat_template("/nonexistent").empty());
}

BOOST_AUTO_TEST_CASE(jinja_semantics_that_templates_rely_on) {
  auto render = [](const std::string& source) {
    ChatRequest r;
    r.messages = tokenizer::json_to_value(R"([{"role": "user", "content": "hi"}])");
    return ChatTemplate(source).render(r);
  };
  BOOST_TEST(render("{% set ns = namespace(n=0) %}{% for m in [1,2,3] %}{% set ns.n = ns.n + m %}{% endfor %}{{ ns.n }}") == "6");
  BOOST_TEST(render("{% for x in [1,2,3] if x > 1 %}{{ loop.index }}/{{ loop.length }}{% if not loop.last %},{% endif %}{% endfor %}") == "1/2,2/2");
  BOOST_TEST(render("{{ {'b': 1, 'a': [1, 2.5, none, true]} | tojson }}") == R"({"b": 1, "a": [1, 2.5, null, true]})");
  BOOST_TEST(render("{{ {'a': 'é\"'} | tojson(indent=2) }}") == "{\n  \"a\": \"é\\\"\"\n}");
  BOOST_TEST(render("{{ [1, 'a', none, {'k': false}] }}") == "[1, 'a', None, {'k': False}]");
  BOOST_TEST(render("{{ 'a,b,,c'.split(',') | length }} {{ '  x '.strip() }} {{ 'abc'[::-1] }} {{ 'abc'[1:] }}") == "4 x cba bc");
  BOOST_TEST(render("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m('A') }}{{ m('A', b='C') }}") == "ABAC");
  BOOST_TEST(render("{%- for m in messages -%}\n  {{ m.role }}\n{%- endfor %}") == "user");
  BOOST_TEST(render("  {% if true %}\nx\n  {% endif %}\ny") == "x\ny");
  BOOST_TEST(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ 1 / 2 }} {{ 'x' ~ 1 }}") == "3 -4 1 1024 0.5 x1");
  BOOST_TEST(render("{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join('|') }}") == "hi");
  BOOST_TEST(render("{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}") == "13");
  BOOST_TEST(render("{{ undefined_thing is defined }} {{ none is none }} {{ 'abc' is string }} {{ {} is mapping }}") == "False True True True");
  BOOST_TEST(render("{% set x %}in{{ 1 + 1 }}{% endset %}{{ x }}") == "in2");
  BOOST_TEST(render("{% filter upper %}shout{% endfilter %}") == "SHOUT");
  BOOST_TEST(render("{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}inside{% endcall %}") == "[inside]");
}
