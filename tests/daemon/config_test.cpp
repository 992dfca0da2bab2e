// Config parsing: the shipped default, every kind of error with its line, and the overrides.
#include <boost/test/unit_test.hpp>
#include <type_traits>
#include <variant>

#include "config.h"
#include "options.h"

using namespace ftllm::daemon;

namespace {

ConfigError expect_error(const std::string& text) {
  ConfigResult r = parse_config(text, "test.conf");
  BOOST_REQUIRE_MESSAGE(!r.config, "expected an error for:\n" + text);
  BOOST_REQUIRE(r.error);
  return *r.error;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(config)

BOOST_AUTO_TEST_CASE(shipped_default_config_is_valid_and_matches_builtin_defaults) {
  ConfigResult r = load_config_file(FTLLM_SOURCE_ROOT "/config/ftllmd.conf");
  BOOST_REQUIRE_MESSAGE(r.config.has_value(), (r.error ? r.error->to_string() : ""));
  Config builtin;
  BOOST_TEST(r.config->listen.to_string() == "127.0.0.1:8080");
  BOOST_TEST(r.config->listen.to_string() == builtin.listen.to_string());
  BOOST_TEST(r.config->admin_socket == "/run/ftllmd/admin.sock");
  BOOST_TEST(r.config->admin_socket_mode == 0660u);
  BOOST_TEST(r.config->admin_socket_group == "ftllm");
  BOOST_TEST(r.config->api_key.empty());
  BOOST_TEST(r.config->max_body_bytes == builtin.max_body_bytes);
  BOOST_TEST(r.config->max_header_bytes == builtin.max_header_bytes);
  BOOST_TEST(int(r.config->log_level) == int(LogLevel::Info));
}

BOOST_AUTO_TEST_CASE(valid_file_sets_every_key) {
  ConfigResult r = parse_config(R"(
[server]
listen = "[::1]:9000"
api_key = "sk-test"
max_header_bytes = 8192
max_body_bytes = 1048576
max_connections = 10

[admin]
socket = "/tmp/x/admin.sock"
socket_group = ""
socket_mode = "0600"

[log]
level = "debug"
)",
                                "test.conf");
  BOOST_REQUIRE_MESSAGE(r.config.has_value(), (r.error ? r.error->to_string() : ""));
  const Config& c = *r.config;
  BOOST_TEST(c.listen.host == "::1");
  BOOST_TEST(c.listen.port == 9000);
  BOOST_TEST(c.listen.to_string() == "[::1]:9000");
  BOOST_TEST(c.api_key == "sk-test");
  BOOST_TEST(c.max_header_bytes == 8192u);
  BOOST_TEST(c.max_body_bytes == 1048576u);
  BOOST_TEST(c.max_connections == 10u);
  BOOST_TEST(c.admin_socket == "/tmp/x/admin.sock");
  BOOST_TEST(c.admin_socket_group == "");
  BOOST_TEST(c.admin_socket_mode == 0600u);
  BOOST_TEST(int(c.log_level) == int(LogLevel::Debug));
}

BOOST_AUTO_TEST_CASE(model_entries_preload_in_order) {
  ConfigResult r = parse_config(R"(
[[model]]
path = "/models/a.gguf"
name = "a"
threads = 2

[[model]]
path = "/models/b"
context_length = 4096
moe_experts = 4
moe_device = "numa"
cuda_se = true
device = "numa"
gpu_memory = 0.5
)",
                                "m.conf");
  BOOST_REQUIRE_MESSAGE(r.config.has_value(), (r.error ? r.error->to_string() : ""));
  BOOST_REQUIRE_EQUAL(r.config->models.size(), 2u);
  BOOST_TEST(r.config->models[0].name == "a");
  BOOST_TEST(r.config->models[0].threads == 2);
  BOOST_TEST(r.config->models[1].path == "/models/b");
  BOOST_TEST(r.config->models[1].context_length == 4096);
  BOOST_TEST(r.config->models[1].moe_experts == 4);
  BOOST_TEST(r.config->models[1].moe_device == "numa");
  BOOST_TEST(r.config->models[1].cuda_se);
  BOOST_TEST(r.config->models[1].device == "numa");
  BOOST_TEST(r.config->models[0].moe_experts == 0);
  BOOST_TEST(r.config->models[1].gpu_memory == 0.5);
  BOOST_TEST(r.config->models[0].gpu_memory == 0.9);
  BOOST_TEST(expect_error("[[model]]\npath = \"p\"\ngpu_memory = 1.5\n").reason ==
             "model.gpu_memory must be a share of the GPU's free memory in (0, 1]");
  BOOST_TEST(expect_error("[[model]]\npath = \"p\"\ncuda_se = 1\n").reason == "model.cuda_se must be true or false");
  ConfigError e = expect_error("[[model]]\nname = \"x\"\n");
  BOOST_TEST(e.reason == "a [[model]] needs a path");
  e = expect_error("[[model]]\npath = \"p\"\nthreds = 2\n");
  BOOST_TEST(e.line == 3u);
  BOOST_TEST(e.reason.find("unknown key \"threds\" in [[model]]") == 0u);
  BOOST_TEST(expect_error("[[model]]\npath = \"p\"\nthreads = 0\n").reason == "model.threads must be a positive integer");
}

BOOST_AUTO_TEST_CASE(empty_file_gives_defaults) {
  ConfigResult r = parse_config("# nothing\n", "empty.conf");
  BOOST_REQUIRE(r.config);
  BOOST_TEST(r.config->listen.port == 8080);
}

BOOST_AUTO_TEST_CASE(toml_syntax_error_names_line_and_column) {
  ConfigError e = expect_error("[server]\nlisten = \"127.0.0.1:8080\"\napi_key = \n");
  BOOST_TEST(e.line == 3u);
  BOOST_TEST(e.to_string().starts_with("test.conf:3:"));
}

BOOST_AUTO_TEST_CASE(unterminated_string_is_reported) {
  ConfigError e = expect_error("[log]\nlevel = \"info\n");
  BOOST_TEST(e.line == 2u);
}

BOOST_AUTO_TEST_CASE(unknown_section_is_named_with_the_known_ones) {
  ConfigError e = expect_error("[server]\n\n[sever2]\nx = 1\n");
  BOOST_TEST(e.line == 3u);
  BOOST_TEST(e.reason.find("unknown section [sever2]") != std::string::npos);
  BOOST_TEST(e.reason.find("[server]") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(unknown_key_is_named_with_the_known_ones) {
  ConfigError e = expect_error("[server]\nlisten = \"127.0.0.1:1\"\nlisen = \"x\"\n");
  BOOST_TEST(e.line == 3u);
  BOOST_TEST(e.column == 1u);
  BOOST_TEST(e.reason.find("unknown key \"lisen\" in [server]") != std::string::npos);
  BOOST_TEST(e.reason.find("listen") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(cors_origins_are_origins) {
  ConfigResult r = parse_config("[server]\ncors_origins = [\"https://chat.example.com\", \"http://localhost:3000\"]\n", "t.conf");
  BOOST_REQUIRE(r.config);
  BOOST_TEST(r.config->cors_origins == (std::vector<std::string>{"https://chat.example.com", "http://localhost:3000"}),
             boost::test_tools::per_element());
  BOOST_TEST(parse_config("[server]\ncors_origins = [\"*\"]\n", "t.conf").config->cors_origins.size() == 1u);
  BOOST_TEST(parse_config("", "t.conf").config->cors_origins.empty());  // none by default
  ConfigError e = expect_error("[server]\ncors_origins = [\"https://chat.example.com/app\"]\n");
  BOOST_TEST(e.reason.find("scheme://host[:port] with no path") != std::string::npos, e.reason);
  e = expect_error("[server]\ncors_origins = \"*\"\n");
  BOOST_TEST(e.reason.find("must be an array of origins") != std::string::npos, e.reason);
  e = expect_error("[server]\ncors_origins = [\"chat.example.com\"]\n");
  BOOST_TEST(e.line == 2u);
}

BOOST_AUTO_TEST_CASE(wrong_type_names_the_key) {
  ConfigError e = expect_error("[server]\nmax_body_bytes = \"big\"\n");
  BOOST_TEST(e.line == 2u);
  BOOST_TEST(e.reason == "server.max_body_bytes must be an integer");
  e = expect_error("[server]\nlisten = 8080\n");
  BOOST_TEST(e.reason == "server.listen must be a string");
}

BOOST_AUTO_TEST_CASE(section_that_is_not_a_table) {
  ConfigError e = expect_error("server = 1\n");
  BOOST_TEST(e.line == 1u);
  BOOST_TEST(e.reason.find("must be a [section]") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(bad_values_are_explained) {
  BOOST_TEST(expect_error("[server]\nlisten = \"127.0.0.1\"\n").reason.find("HOST:PORT") != std::string::npos);
  BOOST_TEST(expect_error("[server]\nlisten = \"127.0.0.1:70000\"\n").reason.find("0 to 65535") != std::string::npos);
  BOOST_TEST(expect_error("[server]\nlisten = \"example.com:80\"\n").reason.find("not an IPv4 or IPv6") != std::string::npos);
  BOOST_TEST(expect_error("[server]\nlisten = \"[::1:80\"\n").reason.find("[IPV6]:PORT") != std::string::npos);
  BOOST_TEST(expect_error("[server]\nmax_connections = 0\n").reason.find("between 1 and") != std::string::npos);
  BOOST_TEST(expect_error("[admin]\nsocket = \"relative.sock\"\n").reason.find("absolute path") != std::string::npos);
  BOOST_TEST(expect_error("[admin]\nsocket_mode = \"0999\"\n").reason.find("octal") != std::string::npos);
  BOOST_TEST(expect_error("[log]\nlevel = \"loud\"\n").reason.find("error, warn, info, debug") != std::string::npos);
  BOOST_TEST(expect_error("[log]\n\nlevel = \"loud\"\n").line == 3u);
}

BOOST_AUTO_TEST_CASE(unreadable_file_names_the_path) {
  ConfigResult r = load_config_file("/nonexistent/ftllmd.conf");
  BOOST_REQUIRE(r.error);
  BOOST_TEST(r.error->line == 0u);
  BOOST_TEST(r.error->to_string() == "/nonexistent/ftllmd.conf: cannot read the file: No such file or directory");
}

BOOST_AUTO_TEST_CASE(command_line_overrides_the_file) {
  OptionsResult o = parse_options({"--config", "/etc/x.conf", "--listen=0.0.0.0:81", "--admin-socket", "/tmp/a.sock",
                                   "--api_key", "k", "--log-level", "warn"});
  BOOST_REQUIRE(o.error.empty());
  BOOST_TEST(*o.options.config_path == "/etc/x.conf");
  Config c;
  BOOST_TEST(apply_overrides(o.options, c).empty());
  BOOST_TEST(c.listen.to_string() == "0.0.0.0:81");
  BOOST_TEST(c.admin_socket == "/tmp/a.sock");
  BOOST_TEST(c.api_key == "k");
  BOOST_TEST(int(c.log_level) == int(LogLevel::Warn));
}

BOOST_AUTO_TEST_CASE(command_line_errors) {
  BOOST_TEST(parse_options({"--bogus"}).error == "unknown option --bogus");
  BOOST_TEST(parse_options({"--listen"}).error == "option --listen needs a value");
  BOOST_TEST(parse_options({"model-dir"}).options.models == std::vector<std::string>{"model-dir"}, boost::test_tools::per_element());
  BOOST_TEST(parse_options({"-x"}).error == "unknown option -x");
  OptionsResult o = parse_options({"--listen", "nonsense"});
  Config c;
  BOOST_TEST(apply_overrides(o.options, c).find("--listen nonsense") == 0u);
}

BOOST_AUTO_TEST_CASE(moe_options_reach_the_load) {
  OptionsResult o = parse_options({"m", "--moe_experts", "4", "--moe_device", "numa", "--cuda_se"});
  BOOST_REQUIRE(o.error.empty());
  std::vector<ftllm::ModelLoadOptions> loads;
  const Config config;
  BOOST_TEST(model_load_options(o.options, config, loads).empty());
  BOOST_REQUIRE_EQUAL(loads.size(), 1u);
  BOOST_TEST(loads[0].moe_experts == 4);
  BOOST_TEST(loads[0].moe_device == "numa");
  BOOST_TEST(loads[0].cuda_se);
  loads.clear();
  BOOST_TEST(model_load_options(parse_options({"m", "--moe_experts", "0"}).options, config, loads) ==
             "--moe_experts needs a positive number of experts, not 0");
}

BOOST_AUTO_TEST_CASE(gpu_options_reach_the_load) {
  std::vector<ftllm::ModelLoadOptions> loads;
  const Config config;
  BOOST_TEST(model_load_options(parse_options({"m", "--device", "{'cuda:0':3,'cpu':1}", "--gpu_memory", "0.75"}).options,
                                config, loads)
                 .empty());
  BOOST_REQUIRE_EQUAL(loads.size(), 1u);
  BOOST_TEST(loads[0].device == "{'cuda:0':3,'cpu':1}");
  BOOST_TEST(loads[0].gpu_memory == 0.75);
  for (const char* bad : {"0", "1.2", "half", "0.5x"})
    BOOST_TEST(model_load_options(parse_options({"m", "--gpu_memory", bad}).options, config, loads) ==
               std::string("--gpu_memory needs a share of the GPU's free memory in (0, 1], not ") + bad);
}

// Every load option of the table reaches ModelLoadOptions through each surface it names: the command
// line by its flag, a [[model]] table by its key (the admin API's JSON is checked by the integration tests).
BOOST_AUTO_TEST_CASE(every_load_option_reaches_the_load_through_its_surfaces) {
  using T = ftllm::LoadOption::Type;
  const Config config;
  for (const ftllm::LoadOption& option : ftllm::load_options()) {
    const std::string text = option.type() == T::String ? "x" : option.type() == T::Integer ? "3" : option.type() == T::Number ? "0.5" : "";
    const std::string toml = option.type() == T::String ? "\"x\"" : option.type() == T::Flag ? "true" : text;
    auto holds = [&](const ftllm::ModelLoadOptions& m) {
      return std::visit(
          [&](auto field) {
            using V = std::decay_t<decltype(m.*field)>;
            if constexpr (std::is_same_v<V, std::string>) return m.*field == "x";
            else if constexpr (std::is_same_v<V, bool>) return m.*field;
            else if constexpr (std::is_same_v<V, double>) return m.*field == 0.5;
            else return m.*field == 3;
          },
          option.field);
    };
    if (option.surfaces & ftllm::kCommandLine) {
      std::vector<std::string> args{"m", option.flag};
      if (option.type() != T::Flag) args.push_back(text);
      OptionsResult o = parse_options(args);
      BOOST_TEST_REQUIRE(o.error.empty(), option.key << ": " << o.error);
      std::vector<ftllm::ModelLoadOptions> loads;
      BOOST_TEST(model_load_options(o.options, config, loads).empty());
      BOOST_TEST((loads.size() == 1 && holds(loads[0])), option.flag);
      BOOST_TEST(usage().find(option.synopsis()) != std::string::npos, option.flag);
    } else {
      BOOST_TEST(parse_options({"m", option.flag, text}).error == std::string("unknown option ") + option.flag);
    }
    ConfigResult r = parse_config("[[model]]\npath = \"p\"\n" + std::string(option.key) + " = " + toml + "\n", "m.conf");
    if (option.surfaces & ftllm::kConfigFile) {
      BOOST_TEST_REQUIRE(r.config.has_value(), option.key << ": " << (r.error ? r.error->to_string() : ""));
      BOOST_TEST(holds(r.config->models.at(0)), option.key);
    } else {
      BOOST_TEST((r.error && r.error->reason.find("unknown key") == 0), option.key);
    }
  }
}

// Found by fuzzing: what the TOML library (toml++ 3.x) would assert on or reach an unreachable point with
// is refused with its place, not parsed: a NUL byte, "[;", characters such as U+0498 outside or inside
// strings. Comments may hold anything, and an escape in a string says what the character cannot.
BOOST_AUTO_TEST_CASE(inputs_the_toml_library_cannot_take_are_refused_with_their_place) {
  auto error_of = [](std::string_view text) {
    ConfigResult r = parse_config(text, "f.conf");
    BOOST_REQUIRE(!r.config);
    return r.error->to_string();
  };
  BOOST_TEST(error_of(std::string_view("[server]\nlisten = \"a\0\"\n", 22)) == "f.conf:2:12: a NUL byte; a config file is text");
  BOOST_TEST(error_of("[;\x01\r").find("f.conf:") == 0);  // toml++ asserted on it
  BOOST_TEST(error_of("n = 3\"2\xd2\x98\"\n").find("f.conf:1:8: the character U+0498") != std::string::npos);
  BOOST_TEST(error_of("[server]\napi_key = \"caf\xc3\xa9\"\n").find("write it as \\u00E9 in a string") != std::string::npos);
  ConfigResult ok = parse_config("# caf\xc3\xa9 \xd2\x98\n[server]\napi_key = \"caf\\u00E9\"\n", "f.conf");
  BOOST_REQUIRE(ok.config);
  BOOST_TEST(ok.config->api_key == "caf\xc3\xa9");
}

BOOST_AUTO_TEST_SUITE_END()
