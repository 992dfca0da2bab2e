// A small blocking HTTP/1.1 client for the admin Unix socket.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace ftllm::client {

struct AdminReply {
  int status = 0;
  std::string body;
};

// Why a call did not get a reply: `not_running` when nothing listens on the socket.
struct AdminFailure {
  bool not_running = false;
  std::string message;
};

class AdminClient {
 public:
  explicit AdminClient(std::string socket_path) : path_(std::move(socket_path)) {}
  const std::string& socket_path() const { return path_; }

  // Sends one request and reads the whole reply. Returns false with `failure` set when there is none.
  // `on_body`, when given, sees the body as it arrives (for streamed progress).
  bool call(const std::string& method, const std::string& target, const std::string& body, AdminReply& reply,
            AdminFailure& failure, const std::function<void(std::string_view)>& on_body = nullptr) const;

 private:
  std::string path_;
};

}  // namespace ftllm::client
