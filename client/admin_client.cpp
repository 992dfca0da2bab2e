#include "admin_client.h"

#include <llhttp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ftllm::client {

namespace {

constexpr size_t kMaxReplyBytes = 64 * 1024 * 1024;  // a reply larger than this is not from ftllmd

// Parses the reply as it arrives, so streamed bodies reach `on_body` at once.
struct ResponseParse {
  AdminReply* reply;
  const std::function<void(std::string_view)>* on_body;
  bool complete = false;
};

llhttp_settings_t response_settings() {
  llhttp_settings_t settings;
  llhttp_settings_init(&settings);
  settings.on_body = [](llhttp_t* p, const char* at, size_t len) {
    auto* s = static_cast<ResponseParse*>(p->data);
    s->reply->body.append(at, len);
    if (*s->on_body) (*s->on_body)(std::string_view(at, len));
    return 0;
  };
  settings.on_message_complete = [](llhttp_t* p) {
    static_cast<ResponseParse*>(p->data)->complete = true;
    return 0;
  };
  return settings;
}

}  // namespace

bool AdminClient::call(const std::string& method, const std::string& target, const std::string& body,
                       AdminReply& reply, AdminFailure& failure, const std::function<void(std::string_view)>& on_body) const {
  sockaddr_un addr{};
  if (path_.size() >= sizeof addr.sun_path) {
    failure = {false, "socket path " + path_ + " is too long"};
    return false;
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);

  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    failure = {false, std::string("cannot create a socket: ") + std::strerror(errno)};
    return false;
  }
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int e = errno;
    ::close(fd);
    if (e == ENOENT || e == ECONNREFUSED)
      failure = {true, "ftllmd is not running (nothing listens on " + path_ + ": " + std::strerror(e) +
                           "); start it with `systemctl start ftllmd`, or point --socket at its admin socket"};
    else if (e == EACCES)
      failure = {false, "permission denied on " + path_ + "; run as root or as a member of the socket's group (ftllm)"};
    else
      failure = {false, "cannot connect to " + path_ + ": " + std::strerror(e)};
    return false;
  }

  std::string request = method + " " + target + " HTTP/1.1\r\nHost: ftllmd\r\nConnection: close\r\n";
  if (!body.empty())
    request += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  request += "\r\n" + body;
  for (size_t sent = 0; sent < request.size();) {
    ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      failure = {false, std::string("cannot send to ftllmd: ") + std::strerror(errno)};
      ::close(fd);
      return false;
    }
    sent += size_t(n);
  }

  llhttp_settings_t settings = response_settings();
  llhttp_t parser;
  llhttp_init(&parser, HTTP_RESPONSE, &settings);
  ResponseParse state{&reply, &on_body};
  parser.data = &state;
  char buf[16384];
  size_t received = 0;
  llhttp_errno_t err = HPE_OK;
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      failure = {false, std::string("cannot read the reply: ") + std::strerror(errno)};
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    received += size_t(n);
    if (received > kMaxReplyBytes) {
      failure = {false, "reply larger than " + std::to_string(kMaxReplyBytes) + " bytes; is this ftllmd's socket?"};
      ::close(fd);
      return false;
    }
    err = llhttp_execute(&parser, buf, size_t(n));
    if (err != HPE_OK || state.complete) break;
  }
  ::close(fd);
  if (err == HPE_OK && !state.complete) err = llhttp_finish(&parser);
  if (err != HPE_OK && err != HPE_PAUSED_UPGRADE) {
    failure = {false, std::string("malformed reply: ") + llhttp_get_error_reason(&parser)};
    return false;
  }
  if (!state.complete) {
    failure = {false, "the daemon closed the connection before the reply was complete"};
    return false;
  }
  reply.status = parser.status_code;
  return true;
}

}  // namespace ftllm::client
