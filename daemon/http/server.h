// An HTTP/1.1 server on a libuv loop: one listener (TCP or Unix socket) serving one Router.
// All of it runs on the loop thread.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "request_parser.h"
#include "cors.h"
#include "router.h"

namespace ftllm::http {

struct ServerLimits {
  ParseLimits parse;
  size_t max_connections = 1024;
  uint64_t idle_timeout_ms = 75'000;     // a keep-alive connection with nothing to do
  uint64_t request_timeout_ms = 30'000;  // from the first byte of a request to its last
  CorsPolicy cors;                       // not a limit: which browser origins may read the responses
};

class Connection;

class Server {
 public:
  Server(uv_loop_t* loop, const Router& router, ServerLimits limits);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Each returns an empty string once listening, else what went wrong and what to do about it.
  std::string listen_tcp(const std::string& host, uint16_t port);
  std::string listen_unix(const std::string& path, unsigned mode, const std::string& group);
  // A listening socket handed over by systemd (socket activation); systemd keeps owning its path.
  std::string adopt(int fd, bool is_tcp);

  // "127.0.0.1:8080" (the real port when 0 was asked for) or the socket path.
  const std::string& address() const { return address_; }
  // Called with every request's status once its response starts (for metrics).
  void on_response(std::function<void(const Request&, int)> f) { on_response_ = std::move(f); }

  // Stops listening (and removes the socket file); idle connections close, busy ones close once their
  // response is done. Running responses carry on: the daemon drains them before close().
  void stop_accepting();
  // Stops listening and closes every connection; the loop ends once all handles are closed.
  void close();

 private:
  friend class Connection;
  static void on_connection(uv_stream_t* listener, int status);
  static void on_sweep(uv_timer_t* timer);
  static void on_turn(uv_check_t* check);
  void forget(Connection* c);
  // A connection reads at most this much in one turn of the loop, then waits for the next: sixteen clients
  // sending 16 MiB bodies at once would otherwise keep the loop copying megabytes (and faulting in the
  // pages they land in) for 20 ms a turn, while a /health behind them waits.
  static constexpr size_t kReadPerTurn = 256 << 10;

  uv_loop_t* loop_;
  const Router& router_;
  ServerLimits limits_;
  std::unique_ptr<uv_tcp_t> tcp_;
  std::unique_ptr<uv_pipe_t> pipe_;
  uv_timer_t sweep_{};
  bool sweep_started_ = false;
  uv_check_t turn_end_{};             // after each poll: the turn is over, paused connections read again
  uint64_t turn_ = 0;
  std::vector<Connection*> paused_;  // read their share this turn
  std::string address_;
  std::string unix_path_;  // removed on close
  std::list<Connection*> connections_;
  std::vector<char> read_buffer_;  // shared: reads are handled synchronously on the loop thread
  bool closed_ = false, accepting_ = true;
  std::function<void(const Request&, int)> on_response_;
};

}  // namespace ftllm::http
