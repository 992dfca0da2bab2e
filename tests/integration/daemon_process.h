// Runs the real ftllmd for a test: ephemeral port, socket in a fresh temporary directory, and a real
// NOTIFY_SOCKET listener standing in for systemd.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace ftllm::test {

// A fresh directory under /tmp, removed with everything in it at destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

class DaemonProcess {
 public:
  // Starts ftllmd with --listen 127.0.0.1:0 and --admin-socket in `dir`, plus `extra_args`; waits for
  // READY=1 and reads the bound address from its STATUS.
  DaemonProcess(const TempDir& dir, std::vector<std::string> extra_args = {});
  ~DaemonProcess();

  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& socket_path() const { return socket_path_; }
  const std::string& ready_message() const { return ready_message_; }

  // The next notification datagram, or "" after the timeout.
  std::string next_notification(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // Sends a signal and waits for exit; returns the exit status, or -1 if it did not exit in time.
  int stop(int signal, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  std::string log() const;  // what the daemon wrote to stderr

 private:
  const TempDir& dir_;
  int notify_fd_ = -1;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string socket_path_, ready_message_;
};

struct CommandResult {
  int exit_code = -1;
  std::string out, err;
};

// Runs a shell command line, capturing stdout and stderr.
CommandResult run_command(const std::string& command_line);

// How many times slower the daemon runs in a sanitized build (scripts/sanitize.sh): client timeouts
// stretch by it, so a sanitized run checks behaviour without racing the clock.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr int kSanitizerSlowdown = 8;
#else
inline constexpr int kSanitizerSlowdown = 1;
#endif

// A port on 127.0.0.1 nothing listens on now (bound to 0 and let go), for a program that must be told one.
int free_port();

// A TCP connection to 127.0.0.1:port (its descriptor; the caller closes it).
int connect_loopback(int port);

// Sends raw bytes to 127.0.0.1:port and returns everything received until the server closes (5 s cap).
std::string raw_exchange(int port, const std::string& bytes);

// Sends raw bytes to 127.0.0.1:port and returns the first response: its head and the Content-Length bytes
// of body after it, or what came until the server closed (5 s cap). For a server that keeps the
// connection open after answering, where raw_exchange would wait out its cap.
std::string raw_reply(int port, const std::string& bytes);

// Connects to 127.0.0.1:port, sends the bytes and closes without reading: a client that vanishes.
void send_and_vanish(int port, const std::string& bytes);

std::string env_or_fail(const char* name);

}  // namespace ftllm::test
