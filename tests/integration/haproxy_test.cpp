// The deployment files of deploy/. deploy/haproxy/haproxy.cfg as shipped (only its addresses changed) in front of two real ftllmd instances:
// it balances over both, leaves out a server that does not answer, and when one instance drains after
// SIGTERM (/health 503) it takes that one out while its running stream finishes: every request sent
// through it meanwhile is answered.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "../common/real_model.h"
#include "daemon_process.h"

using namespace ftllm::test;

namespace {

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  BOOST_REQUIRE_MESSAGE(at != std::string::npos, "haproxy.cfg has no " << from);
  return text.replace(at, from.size(), to);
}

// haproxy in the foreground on a config file, stopped at the end.
class Haproxy {
 public:
  explicit Haproxy(const std::string& config) {
    const std::string binary = std::filesystem::exists("/usr/sbin/haproxy") ? "/usr/sbin/haproxy" : "haproxy";
    BOOST_REQUIRE_MESSAGE(run_command(binary + " -c -q -f " + config).exit_code == 0,
                          "haproxy is missing or refuses the config: run scripts/setup.sh");
    pid_ = fork();
    if (pid_ == 0) {
      execl("/bin/sh", "sh", "-c", ("exec " + binary + " -db -f " + config + " >/dev/null 2>&1").c_str(), nullptr);
      _exit(127);
    }
  }
  ~Haproxy() {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }

 private:
  pid_t pid_ = -1;
};

int status_of(const std::string& url, const std::string& extra = "") {
  const CommandResult r = run_command("curl -s -o /dev/null -w '%{http_code}' --max-time 60 " + extra + " " + url);
  return std::atoi(r.out.c_str());
}

// The daemon's count of 200 answers on an endpoint (its /metrics).
int answered(const DaemonProcess& d, const std::string& endpoint) {
  std::istringstream in(run_command("curl -s " + d.base_url() + "/metrics").out);
  const std::string prefix = "ftllm_requests_total{endpoint=\"" + endpoint + "\",status=\"200\"} ";
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(prefix)) return std::stoi(line.substr(prefix.size()));
  return 0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(haproxy_balances_over_instances_and_takes_a_draining_one_out) {
  TempDir dir_a, dir_b, dir;
  const std::vector<std::string> args = {smollm2_gguf_path(), "--name", "m", "-t", "1", "--ctx", "512"};
  DaemonProcess a(dir_a, args), b(dir_b, args);
  const int front = free_port();
  std::stringstream shipped;
  shipped << std::ifstream(std::string(FTLLM_SOURCE_ROOT) + "/deploy/haproxy/haproxy.cfg").rdbuf();
  std::string config = replaced(shipped.str(), "bind 127.0.0.1:8080", "bind 127.0.0.1:" + std::to_string(front));
  config = replaced(config, "127.0.0.1:8081", "127.0.0.1:" + std::to_string(a.port()));
  config = replaced(config, "127.0.0.1:8082", "127.0.0.1:" + std::to_string(b.port()));
  config = replaced(config, "127.0.0.1:8083", "127.0.0.1:" + std::to_string(free_port()));  // nothing there
  std::ofstream(dir.file("haproxy.cfg")) << config;
  Haproxy proxy(dir.file("haproxy.cfg"));
  const std::string url = "http://127.0.0.1:" + std::to_string(front);

  // Up once its health checks passed (rise 2, 1 s apart).
  int health = 0;
  for (int i = 0; i < 100 && health != 200; ++i, usleep(100000)) health = status_of(url + "/health");
  BOOST_REQUIRE_EQUAL(health, 200);
  sleep(3);  // both instances up, the empty server down
  for (int i = 0; i < 20; ++i) BOOST_TEST(status_of(url + "/v1/models") == 200);
  BOOST_TEST(answered(a, "/v1/models") > 0);  // both took their share
  BOOST_TEST(answered(b, "/v1/models") > 0);
  BOOST_TEST(answered(a, "/v1/models") + answered(b, "/v1/models") == 20);

  // Instance a drains with a stream running: haproxy sees its /health 503 and sends everything to b.
  std::string streamed;
  std::jthread stream([&] {
    streamed = run_command("curl -s -N --max-time 120 -d '{\"model\": \"m\", \"prompt\": \"Once upon a time\", \"max_tokens\": 120, "
                           "\"ignore_eos\": true, \"stream\": true}' " + a.base_url() + "/v1/completions").out;
  });
  for (int i = 0; i < 500 && run_command("curl -s " + a.base_url() + "/metrics").out.find("ftllm_requests_running{model=\"m\"} 1") ==
                                  std::string::npos;
       ++i)
    usleep(20000);
  const int b_before = answered(b, "/v1/completions");
  ::kill(a.pid(), SIGTERM);
  const std::string body = "-H 'Content-Type: application/json' -d '{\"model\": \"m\", \"prompt\": \"Hello\", \"max_tokens\": 2}'";
  for (int i = 0; i < 6; ++i) BOOST_TEST(status_of(url + "/v1/completions", body) == 200, "request " << i);
  BOOST_TEST(answered(b, "/v1/completions") - b_before == 6);  // a took none while it drained
  stream.join();
  BOOST_TEST(streamed.find("[DONE]") != std::string::npos, streamed.substr(0, 300));
  BOOST_TEST(a.stop(0) == 0);
}

// deploy/kubernetes checked against the daemon it deploys (deploy_check.py says how): its config, its
// arguments, its probes' port and its metric names as a running ftllmd's /metrics has them.
BOOST_AUTO_TEST_CASE(kubernetes_manifests_fit_the_daemon) {
  TempDir dir;
  DaemonProcess d(dir);
  std::ofstream(dir.file("metrics.txt")) << run_command("curl -s " + d.base_url() + "/metrics").out;
  const CommandResult r = run_command(std::string(FTLLM_SOURCE_ROOT) + "/.venv/bin/python " + FTLLM_SOURCE_ROOT +
                                      "/tests/integration/deploy_check.py " + env_or_fail("FTLLMD") + " " + dir.file("metrics.txt"));
  BOOST_TEST(r.exit_code == 0, r.out << r.err);
  BOOST_TEST(r.out == "ok\n");
}
