#include "daemon_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/test/unit_test.hpp>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

extern char** environ;

namespace ftllm::test {

std::string env_or_fail(const char* name) {
  const char* v = std::getenv(name);
  BOOST_REQUIRE_MESSAGE(v && *v, std::string("environment variable ") + name + " is not set (run through meson test)");
  return v;
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/ftllm-test-XXXXXX";
  BOOST_REQUIRE(mkdtemp(tmpl));
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

DaemonProcess::DaemonProcess(const TempDir& dir, std::vector<std::string> extra_args) : dir_(dir) {
  std::string notify_path = dir.file("notify-" + std::to_string(getpid()) + "-" + std::to_string(rand()));
  notify_fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, notify_path.c_str(), sizeof addr.sun_path - 1);
  BOOST_REQUIRE(::bind(notify_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);

  socket_path_ = dir.file("admin.sock");
  std::vector<std::string> args = {env_or_fail("FTLLMD"), "--listen", "127.0.0.1:0", "--admin-socket", socket_path_};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::vector<std::string> env_strings = {"NOTIFY_SOCKET=" + notify_path};
  for (char** e = environ; *e; ++e)
    if (!std::string_view(*e).starts_with("NOTIFY_SOCKET=")) env_strings.push_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  // fork + exec rather than posix_spawn, for PR_SET_PDEATHSIG: the daemon dies with the test process
  // even when it aborts (a failed check in a client thread calls std::terminate, which skips every
  // destructor), so a crashed test never leaves daemons holding ports and memory. The child makes only
  // async-signal-safe calls, on strings prepared here.
  std::string log_path = dir.file("ftllmd.log");
  pid_t parent = ::getpid();
  pid_ = ::fork();
  BOOST_REQUIRE_MESSAGE(pid_ >= 0, "cannot fork: " << std::strerror(errno));
  if (pid_ == 0) {
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(127);
    int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    int null_fd = ::open("/dev/null", O_WRONLY);
    if (log_fd < 0 || null_fd < 0 || ::dup2(log_fd, 2) < 0 || ::dup2(null_fd, 1) < 0) ::_exit(127);
    ::execve(argv[0], argv.data(), envp.data());
    static const char kNoExec[] = "test harness: cannot execute the FTLLMD binary\n";
    (void)!::write(2, kNoExec, sizeof kNoExec - 1);
    ::_exit(127);
  }

  // STATUS=loading models may come first; wait for the READY=1 datagram, or for the daemon to exit.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (ready_message_.find("READY=1") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::string m = next_notification(std::chrono::milliseconds(200));
    if (!m.empty()) ready_message_ = m;
    else if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      break;
    }
  }
  BOOST_REQUIRE_MESSAGE(ready_message_.find("READY=1") != std::string::npos,
                        "no READY=1 from ftllmd; its log:\n" << log());
  std::smatch m;
  BOOST_REQUIRE_MESSAGE(std::regex_search(ready_message_, m, std::regex(R"(http://127\.0\.0\.1:(\d+))")),
                        "READY message without the address: " << ready_message_);
  port_ = std::stoi(m[1]);
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) stop(SIGKILL);
  if (notify_fd_ >= 0) ::close(notify_fd_);
}

std::string DaemonProcess::next_notification(std::chrono::milliseconds timeout) {
  pollfd p{notify_fd_, POLLIN, 0};
  if (poll(&p, 1, int(timeout.count())) <= 0) return "";
  char buf[4096];
  ssize_t n = ::recv(notify_fd_, buf, sizeof buf, 0);
  return n > 0 ? std::string(buf, size_t(n)) : "";
}

int DaemonProcess::stop(int signal, std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, signal);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return -1;
}

std::string DaemonProcess::log() const {
  std::ifstream in(dir_.file("ftllmd.log"));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

CommandResult run_command(const std::string& command_line) {
  static std::atomic<int> counter = 0;  // client threads run commands side by side
  std::string err_path = "/tmp/ftllm-test-cmd-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  CommandResult result;
  FILE* pipe = ::popen((command_line + " 2>" + err_path).c_str(), "r");
  if (!pipe) {  // no Boost.Test check here: client threads run commands too
    result.err = std::string("cannot run a shell: ") + std::strerror(errno);
    return result;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) result.out.append(buf, n);
  int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  std::stringstream s;
  s << err.rdbuf();
  result.err = s.str();
  std::remove(err_path.c_str());
  return result;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  BOOST_REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  BOOST_REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

int connect_loopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  BOOST_REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

void send_and_vanish(int port, const std::string& bytes) {
  int fd = connect_loopback(port);
  BOOST_REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == ssize_t(bytes.size()));
  ::close(fd);
}

namespace {

// Sends the bytes and reads until done(received) says the reply is whole, the server closes, or 5 s pass.
template <typename Done>
std::string exchange_until(int port, const std::string& bytes, Done done) {
  int fd = connect_loopback(port);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  BOOST_REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == ssize_t(bytes.size()));
  std::string got;
  char buf[4096];
  ssize_t n;
  while (!done(got) && (n = ::recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, size_t(n));
  ::close(fd);
  return got;
}

}  // namespace

std::string raw_exchange(int port, const std::string& bytes) {
  return exchange_until(port, bytes, [](const std::string&) { return false; });
}

std::string raw_reply(int port, const std::string& bytes) {
  return exchange_until(port, bytes, [](const std::string& got) {
    const size_t head_end = got.find("\r\n\r\n");
    if (head_end == std::string::npos) return false;
    std::string head = got.substr(0, head_end);
    for (char& c : head) c = char(std::tolower(static_cast<unsigned char>(c)));
    const std::string length_field = "\r\ncontent-length:";
    const size_t at = head.find(length_field);
    if (at == std::string::npos) return false;  // no length: the body ends where the connection does
    return got.size() >= head_end + 4 + std::stoul(head.substr(at + length_field.size()));
  });
}

}  // namespace ftllm::test
