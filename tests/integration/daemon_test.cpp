// ftllmd as users meet it: started for real, driven with curl, ftllmctl and raw sockets.
#define BOOST_TEST_MODULE integration
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <simdjson.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <fstream>

#include "daemon_process.h"
#include "ftllm_version.h"

using namespace ftllm::test;

namespace {

struct HttpResult {
  int status = 0;
  std::string body;
};

// curl, as a user would run it. The status code comes on the last line.
HttpResult curl(const std::string& args) {
  CommandResult r = run_command("curl -s -S --max-time 10 -w '\\n%{http_code}' " + args);
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, "curl " << args << " failed: " << r.err);
  size_t nl = r.out.rfind('\n');
  return {std::stoi(r.out.substr(nl + 1)), r.out.substr(0, nl)};
}

simdjson::dom::element parse_json(simdjson::dom::parser& parser, const std::string& text) {
  simdjson::dom::element doc;
  auto error = parser.parse(text).get(doc);
  BOOST_REQUIRE_MESSAGE(!error, "not JSON: " << text);
  return doc;
}

std::string ftllmctl(const std::string& args) { return env_or_fail("FTLLMCTL") + " " + args; }

void expect_serving(const DaemonProcess& d) {
  HttpResult health = curl(d.base_url() + "/health");
  BOOST_TEST(health.status == 200);
  BOOST_TEST(health.body == R"({"status":"ok"})");
}

}  // namespace

BOOST_AUTO_TEST_CASE(ready_health_and_models) {
  TempDir dir;
  DaemonProcess d(dir);
  BOOST_TEST(d.ready_message().find("STATUS=serving") != std::string::npos);
  BOOST_TEST(d.port() > 0);

  expect_serving(d);
  HttpResult models = curl(d.base_url() + "/v1/models");
  BOOST_TEST(models.status == 200);
  simdjson::dom::parser parser;
  auto doc = parse_json(parser, models.body);
  BOOST_TEST(std::string_view(doc["object"]) == "list");
  BOOST_TEST(simdjson::dom::array(doc["data"]).size() == 0u);
}

BOOST_AUTO_TEST_CASE(admin_socket_has_the_configured_mode) {
  TempDir dir;
  DaemonProcess d(dir);
  struct stat st {};
  BOOST_REQUIRE(::stat(d.socket_path().c_str(), &st) == 0);
  BOOST_TEST(S_ISSOCK(st.st_mode));
  BOOST_TEST((st.st_mode & 0777) == 0660u);
}

BOOST_AUTO_TEST_CASE(ftllmctl_status_table_and_json) {
  TempDir dir;
  DaemonProcess d(dir);
  CommandResult table = run_command(ftllmctl("--socket " + d.socket_path() + " status"));
  BOOST_TEST_REQUIRE(table.exit_code == 0, table.err);
  BOOST_TEST(table.out.find("ftllmd " FTLLM_VERSION ", pid " + std::to_string(d.pid())) == 0u);
  BOOST_TEST(table.out.find("http://127.0.0.1:" + std::to_string(d.port())) != std::string::npos);
  BOOST_TEST(table.out.find("numa:0") != std::string::npos);
  BOOST_TEST(table.out.find("models: none loaded") != std::string::npos);

  // The environment variable works as well as --socket; --json prints the daemon's reply.
  CommandResult json = run_command("FTLLMD_SOCKET=" + d.socket_path() + " " + ftllmctl("status --json"));
  BOOST_TEST_REQUIRE(json.exit_code == 0, json.err);
  simdjson::dom::parser parser;
  auto doc = parse_json(parser, json.out);
  BOOST_TEST(std::string_view(doc["version"]) == FTLLM_VERSION);
  BOOST_TEST(int64_t(doc["pid"]) == d.pid());
  BOOST_TEST(double(doc["uptime_seconds"]) >= 0.0);
  BOOST_TEST(std::string_view(doc["listen"]) == "127.0.0.1:" + std::to_string(d.port()));
  BOOST_TEST(std::string_view(doc["admin_socket"]) == d.socket_path());
  BOOST_TEST(simdjson::dom::array(doc["models"]).size() == 0u);
  BOOST_TEST(simdjson::dom::array(doc["devices"]).size() >= 1u);

  // curl --unix-socket reaches the same admin API.
  HttpResult raw = curl("--unix-socket " + d.socket_path() + " http://ftllmd/admin/v1/status");
  BOOST_TEST(raw.status == 200);
  BOOST_TEST(raw.body.find("\"models\":[]") != std::string::npos);

  // Asking for a model that is not there fails clearly.
  CommandResult missing = run_command(ftllmctl("--socket " + d.socket_path() + " status nosuchmodel"));
  BOOST_TEST(missing.exit_code == 1);
  BOOST_TEST(missing.err.find("no model named \"nosuchmodel\"") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(ftllmctl_says_when_the_daemon_is_not_running) {
  TempDir dir;
  std::string path = dir.file("absent.sock");
  CommandResult r = run_command(ftllmctl("--socket " + path + " status"));
  BOOST_TEST(r.exit_code == 3);
  BOOST_TEST(r.out.empty());
  BOOST_TEST(r.err.find("ftllmd is not running") != std::string::npos);
  BOOST_TEST(r.err.find(path) != std::string::npos);
  BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1);  // one line
}

BOOST_AUTO_TEST_CASE(unknown_path_is_404_json) {
  TempDir dir;
  DaemonProcess d(dir);
  HttpResult r = curl(d.base_url() + "/v1/nothing-here");
  BOOST_TEST(r.status == 404);
  simdjson::dom::parser parser;
  auto doc = parse_json(parser, r.body);
  BOOST_TEST(std::string_view(doc["error"]["code"]) == "unknown_url");
  BOOST_TEST(std::string_view(doc["error"]["message"]).find("/v1/nothing-here") != std::string_view::npos);

  // The admin API is not reachable over TCP.
  BOOST_TEST(curl(d.base_url() + "/admin/v1/status").status == 404);
  // A known path with the wrong method is 405.
  BOOST_TEST(curl("-X DELETE " + d.base_url() + "/v1/models").status == 405);
}

BOOST_AUTO_TEST_CASE(malformed_and_oversized_requests_fail_alone) {
  TempDir dir;
  DaemonProcess d(dir, {"--log-level", "debug"});

  std::string reply = raw_exchange(d.port(), "GARBAGE\r\n\r\n");
  BOOST_TEST(reply.starts_with("HTTP/1.1 400 Bad Request\r\n"));
  BOOST_TEST(reply.find("Connection: close") != std::string::npos);
  BOOST_TEST(reply.find(R"("code":"bad_request")") != std::string::npos);
  expect_serving(d);

  reply = raw_exchange(d.port(), "POST /v1/models HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n");
  BOOST_TEST(reply.starts_with("HTTP/1.1 413 "));
  reply = raw_exchange(d.port(), "GET / HTTP/1.1\r\nX-Big: " + std::string(70000, 'x') + "\r\n\r\n");
  BOOST_TEST(reply.starts_with("HTTP/1.1 431 "));
  expect_serving(d);

  // A client that sends half a request and vanishes changes nothing for the others.
  send_and_vanish(d.port(), "GET /health HTTP/1.1\r\nHo");
  send_and_vanish(d.port(), "POST /v1/models HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc");
  expect_serving(d);

  // Pipelined keep-alive requests are answered in order on one connection.
  reply = raw_exchange(d.port(),
                       "GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  size_t first = reply.find(R"({"status":"ok"})");
  size_t second = reply.find(R"({"object":"list","data":[]})");
  BOOST_TEST(first != std::string::npos);
  BOOST_TEST(second != std::string::npos);
  BOOST_TEST(first < second);
}

// Slowloris clients holding every connection slot do not lock a well-behaved client out: at the limit the
// connection that has been sending its request the longest gives way (503) to the new one.
BOOST_AUTO_TEST_CASE(slow_clients_at_the_connection_limit_give_way) {
  TempDir dir;
  std::string conf = dir.file("ftllmd.conf");
  std::ofstream(conf) << "[server]\nmax_connections = 32\nrequest_timeout_seconds = 60\n";
  DaemonProcess d(dir, {"--config", conf});
  std::vector<int> slow;
  for (int i = 0; i < 32; ++i) {
    const int fd = connect_loopback(d.port());
    const std::string part = "GET /health HTTP/1.1\r\nX-Slow: ";
    (void)!write(fd, part.data(), part.size());
    slow.push_back(fd);
    usleep(2000);
  }
  usleep(100000);
  for (int i = 0; i < 5; ++i) BOOST_TEST(curl(d.base_url() + "/health").status == 200, "well-behaved client " << i);
  // The first slow ones were told why.
  char buf[512] = {};
  const ssize_t n = read(slow[0], buf, sizeof buf - 1);
  BOOST_TEST(std::string(buf, n > 0 ? size_t(n) : 0).find("503") != std::string::npos);
  for (int fd : slow) ::close(fd);
}

BOOST_AUTO_TEST_CASE(slow_and_idle_connections_time_out) {
  TempDir dir;
  std::string conf = dir.file("ftllmd.conf");
  std::ofstream(conf) << "[server]\nidle_timeout_seconds = 1\nrequest_timeout_seconds = 1\n";
  DaemonProcess d(dir, {"--config", conf});
  // Half a request, then silence: 408 after a second or two (the sweep runs every second).
  auto t0 = std::chrono::steady_clock::now();
  std::string slow = raw_exchange(d.port(), "GET /health HTTP/1.1\r\nHo");
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST(slow.starts_with("HTTP/1.1 408 "), slow);
  BOOST_TEST(waited < 4.5);
  // A kept-alive connection that stays idle is closed by the daemon: raw_exchange returns on close.
  t0 = std::chrono::steady_clock::now();
  std::string idle = raw_exchange(d.port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST(idle.find(R"({"status":"ok"})") != std::string::npos);
  BOOST_TEST(waited > 0.9);
  BOOST_TEST(waited < 4.5);
  // Slowloris: a header line every 300 ms never lets the connection idle, but the request still has only
  // its timeout from its first byte: 408 within a couple of seconds, not whenever the client tires.
  const int fd = connect_loopback(d.port());
  t0 = std::chrono::steady_clock::now();
  std::string answer;
  const std::string head = "GET /health HTTP/1.1\r\n", line = "X-Slow: 1\r\n";
  (void)!write(fd, head.data(), head.size());
  for (int i = 0; i < 25 && answer.empty(); ++i) {
    (void)!write(fd, line.data(), line.size());
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 300) == 1) {
      char buf[512];
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n > 0) answer.assign(buf, size_t(n));
    }
  }
  close(fd);
  waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST(answer.starts_with("HTTP/1.1 408 "), answer);
  BOOST_TEST(waited < 4.0);
  expect_serving(d);
}

BOOST_AUTO_TEST_CASE(socket_activation_through_systemd_socket_activate) {
  // systemd-socket-activate opens both sockets, starts ftllmd on the first connection and passes them
  // with the sd_listen_fds protocol, as ftllmd.socket does.
  TempDir dir;
  // A port the kernel just found free (a port picked from the pid could be one another program's
  // connection held, and systemd-socket-activate then failed to bind it; seen once in CI).
  const int port = free_port();
  const std::string socket = dir.file("admin.sock");
  std::string cmd = "systemd-socket-activate -l 127.0.0.1:" + std::to_string(port) + " -l " + socket + " " +
                    env_or_fail("FTLLMD") + " --listen 127.0.0.1:1 --admin-socket " + dir.file("unused.sock") +
                    " >/dev/null 2>" + dir.file("log") + " & echo $!";
  int pid = std::stoi(run_command(cmd).out);
  // Its sockets are open once the admin socket's file is there (it opens them in the order given).
  for (int i = 0; i < 200 && ::access(socket.c_str(), F_OK) != 0; ++i) usleep(50000);
  BOOST_REQUIRE_MESSAGE(::access(socket.c_str(), F_OK) == 0,
                        "systemd-socket-activate opened no sockets in 10 s: " << run_command("cat " + dir.file("log")).out);
  CommandResult health = run_command("curl -s --max-time 10 http://127.0.0.1:" + std::to_string(port) + "/health");
  BOOST_TEST(health.out == R"({"status":"ok"})");
  CommandResult status = run_command(env_or_fail("FTLLMCTL") + " --socket " + socket + " status --json");
  BOOST_TEST(status.exit_code == 0, status.err);
  BOOST_TEST(status.out.find("\"listen\":\"127.0.0.1:" + std::to_string(port) + "\"") != std::string::npos, status.out);
  BOOST_TEST(::access(dir.file("unused.sock").c_str(), F_OK) != 0);  // the passed sockets were used
  BOOST_TEST(status.out.find("\"admin_socket\":\"" + socket + "\"") != std::string::npos, status.out);
  ::kill(pid, SIGTERM);
  usleep(300000);
  // The socket is systemd's: ftllmd leaves its file for the next start of the service.
  BOOST_TEST(::access(socket.c_str(), F_OK) == 0);
}

BOOST_AUTO_TEST_CASE(api_key_guards_the_api_but_not_health) {
  TempDir dir;
  DaemonProcess d(dir, {"--api_key", "sk-secret"});
  HttpResult denied = curl(d.base_url() + "/v1/models");
  BOOST_TEST(denied.status == 401);
  BOOST_TEST(denied.body.find("invalid_api_key") != std::string::npos);
  BOOST_TEST(curl("-H 'Authorization: Bearer wrong' " + d.base_url() + "/v1/models").status == 401);
  BOOST_TEST(curl("-H 'Authorization: Bearer sk-secret' " + d.base_url() + "/v1/models").status == 200);
  // Anthropic's clients send it as x-api-key; Anthropic's and Ollama's routes answer in their own shapes.
  BOOST_TEST(curl("-H 'x-api-key: sk-secret' " + d.base_url() + "/v1/models").status == 200);
  BOOST_TEST(curl("-H 'x-api-key: wrong' " + d.base_url() + "/v1/models").status == 401);
  const HttpResult messages = curl("-H 'x-api-key: wrong' -d '{}' " + d.base_url() + "/v1/messages");
  BOOST_TEST(messages.status == 401);
  BOOST_TEST(messages.body.find(R"("type":"error","error":{"type":"authentication_error")") != std::string::npos, messages.body);
  const HttpResult tags = curl(d.base_url() + "/api/tags");
  BOOST_TEST(tags.status == 401);
  BOOST_TEST(tags.body.find(R"({"error":)") == 0u, tags.body);
  // /metrics names the models and counts their traffic: the key guards it too, unless made public.
  BOOST_TEST(curl(d.base_url() + "/metrics").status == 401);
  BOOST_TEST(curl("-H 'Authorization: Bearer sk-secret' " + d.base_url() + "/metrics").status == 200);
  expect_serving(d);
  TempDir dir2;
  std::ofstream(dir2.file("public.conf")) << "[server]\npublic_metrics = true\n";
  DaemonProcess open(dir2, {"--api_key", "sk-secret", "--config", dir2.file("public.conf")});
  BOOST_TEST(curl(open.base_url() + "/metrics").status == 200);
  BOOST_TEST(curl(open.base_url() + "/v1/models").status == 401);
}

BOOST_AUTO_TEST_CASE(sigterm_notifies_stopping_and_exits_zero) {
  TempDir dir;
  DaemonProcess d(dir);
  std::string socket = d.socket_path();
  expect_serving(d);
  ::kill(d.pid(), SIGTERM);
  std::string msg = d.next_notification();
  BOOST_TEST(msg.find("STOPPING=1") != std::string::npos);
  BOOST_TEST(d.stop(0) == 0);
  BOOST_TEST(::access(socket.c_str(), F_OK) != 0);  // the socket file is gone
}

BOOST_AUTO_TEST_CASE(sigint_exits_zero) {
  TempDir dir;
  DaemonProcess d(dir);
  BOOST_TEST(d.stop(SIGINT) == 0);
}

BOOST_AUTO_TEST_CASE(second_daemon_on_the_same_socket_refuses) {
  TempDir dir;
  DaemonProcess first(dir);
  CommandResult second = run_command(env_or_fail("FTLLMD") + " --listen 127.0.0.1:0 --admin-socket " +
                                     first.socket_path());
  BOOST_TEST(second.exit_code == 1);
  BOOST_TEST(second.err.find("another ftllmd is already serving") != std::string::npos);
  expect_serving(first);
  BOOST_TEST(run_command(ftllmctl("--socket " + first.socket_path() + " status")).exit_code == 0);
}

BOOST_AUTO_TEST_CASE(stale_socket_of_a_dead_daemon_is_replaced) {
  TempDir dir;
  {
    DaemonProcess dead(dir);
    BOOST_TEST(dead.stop(SIGKILL) == 128 + SIGKILL);
  }
  BOOST_TEST(::access(dir.file("admin.sock").c_str(), F_OK) == 0);  // left behind by the kill
  DaemonProcess d(dir);
  BOOST_TEST(run_command(ftllmctl("--socket " + d.socket_path() + " status")).exit_code == 0);
}

BOOST_AUTO_TEST_CASE(check_config_reports_line_and_reason) {
  TempDir dir;
  std::string bad = dir.file("bad.conf");
  std::ofstream(bad) << "[server]\nlisten = \"127.0.0.1:8080\"\nmax_body_bytes = \"lots\"\n";
  CommandResult r = run_command(env_or_fail("FTLLMD") + " --check-config " + bad);
  BOOST_TEST(r.exit_code == 1);
  BOOST_TEST(r.err == bad + ":3:18: server.max_body_bytes must be an integer\n");

  CommandResult ok = run_command(env_or_fail("FTLLMD") + " --check-config " + env_or_fail("FTLLM_DEFAULT_CONF"));
  BOOST_TEST(ok.exit_code == 0, ok.err);

  // A broken config stops the daemon before it listens, with the same message.
  CommandResult start = run_command(env_or_fail("FTLLMD") + " --config " + bad);
  BOOST_TEST(start.exit_code == 1);
  BOOST_TEST(start.err.find(":3:18: server.max_body_bytes must be an integer") != std::string::npos);

  // [[model]] values are checked as a load would check them, at their line and column, before anything starts.
  const std::string model = std::string(FTLLM_SOURCE_ROOT) + "/tests/data/models/qwen3-f32";
  auto check = [&](const std::string& entry) {
    std::string conf = dir.file("model.conf");
    std::ofstream(conf) << "[server]\nlisten = \"127.0.0.1:0\"\n\n[[model]]\n" << entry;
    CommandResult checked = run_command(env_or_fail("FTLLMD") + " --check-config " + conf);
    BOOST_TEST(checked.exit_code == 1, entry);
    CommandResult started = run_command(env_or_fail("FTLLMD") + " --config " + conf + " --admin-socket " + dir.file("a.sock"));
    BOOST_TEST(started.exit_code == 1, entry);
    BOOST_TEST(started.err.find(checked.err.substr(0, checked.err.size() - 1)) != std::string::npos, started.err);
    return checked.err.substr(checked.err.find(':') + 1);
  };
  std::string why = check("path = \"" + model + "\"\ndtype = \"int3\"\n");
  BOOST_TEST(why.starts_with("6:9: model.dtype: "), why);
  BOOST_TEST(why.find("int3") != std::string::npos, why);
  why = check("path = \"/nonexistent/model\"\n");
  BOOST_TEST(why.starts_with("5:8: model.path: /nonexistent/model does not exist"), why);
  why = check("path = \"" + model + "\"\nkv_dtype = \"f12\"\n");
  BOOST_TEST(why.starts_with("6:12: model.kv_dtype: "), why);
  why = check("path = \"" + model + "\"\ndevice = \"gpu\"\n");
  BOOST_TEST(why.starts_with("6:10: model.device: "), why);
  why = check("path = \"" + model + "\"\nchat_template = \"/nonexistent.jinja\"\n");
  BOOST_TEST(why.starts_with("6:17: model.chat_template: "), why);
}

// --print-config: the file's values with the command line's on top, as a config file that checks back
// to the same; the API key is not printed; what only the command line takes stays a comment.
BOOST_AUTO_TEST_CASE(print_config_shows_what_is_in_effect_as_a_config_file) {
  TempDir dir;
  const std::string model = std::string(FTLLM_SOURCE_ROOT) + "/tests/data/models/qwen3-f32";
  const std::string conf = dir.file("in.conf");
  std::ofstream(conf) << "[server]\nmax_waiting = 17\napi_key = \"sk-in-file\"\n\n[[model]]\npath = \"" << model
                      << "\"\nname = \"filed\"\nkv_dtype = \"bf16\"\n";
  CommandResult r = run_command(env_or_fail("FTLLMD") + " --config " + conf + " --listen 127.0.0.1:9123 --api_key sk-cli " + model +
                                " --name cli --dtype int8 --kernels scalar --print-config");
  BOOST_REQUIRE(r.exit_code == 0);
  for (const char* line : {"listen = \"127.0.0.1:9123\"\n", "max_waiting = 17\n", "# api_key is set (not shown)\n",
                           "name = \"filed\"\n", "kv_dtype = \"bf16\"\n", "name = \"cli\"\n", "dtype = \"int8\"\n",
                           "# kernels = \"scalar\" (command line only)\n", "# max_sequences = 0 (default)\n"})
    BOOST_TEST(r.out.find(line) != std::string::npos, line << " in\n" << r.out);
  BOOST_TEST(r.out.find("sk-") == std::string::npos);
  const std::string printed = dir.file("printed.conf");
  std::ofstream(printed) << r.out;
  const CommandResult checked = run_command(env_or_fail("FTLLMD") + " --check-config " + printed);
  BOOST_TEST(checked.exit_code == 0, checked.err);
  // Read back, it prints the same (the key aside, which it no longer has).
  CommandResult again = run_command(env_or_fail("FTLLMD") + " --config " + printed + " --print-config");
  BOOST_TEST(again.exit_code == 0);
  std::string want = r.out;
  want.replace(want.find("# api_key is set (not shown)"), std::string("# api_key is set (not shown)").size(), "# no api_key: the API is open");
  want.erase(want.find("# kernels = \"scalar\" (command line only)\n"), std::string("# kernels = \"scalar\" (command line only)\n").size());
  BOOST_TEST(again.out.substr(again.out.find('\n')) == want.substr(want.find('\n')));
}

BOOST_AUTO_TEST_CASE(started_from_the_default_config_file) {
  // The shipped config with only the addresses overridden: what `systemctl start ftllmd` runs.
  TempDir dir;
  DaemonProcess d(dir, {"--config", env_or_fail("FTLLM_DEFAULT_CONF")});
  expect_serving(d);
}

BOOST_AUTO_TEST_CASE(sighup_reloads_the_api_key) {
  TempDir dir;
  std::string conf = dir.file("ftllmd.conf");
  std::ofstream(conf) << "[server]\napi_key = \"one\"\n";
  DaemonProcess d(dir, {"--config", conf});
  BOOST_TEST(curl("-H 'Authorization: Bearer one' " + d.base_url() + "/v1/models").status == 200);
  std::ofstream(conf) << "[server]\napi_key = \"two\"\n";
  ::kill(d.pid(), SIGHUP);
  int status = 0;
  for (int i = 0; i < 100 && status != 200; ++i) {
    usleep(20000);
    status = curl("-H 'Authorization: Bearer two' " + d.base_url() + "/v1/models").status;
  }
  BOOST_TEST(status == 200);
  BOOST_TEST(curl("-H 'Authorization: Bearer one' " + d.base_url() + "/v1/models").status == 401);
  BOOST_TEST(d.stop(SIGTERM) == 0);
}
