#include "server.h"

#include <arpa/inet.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cstdio>
#include <optional>
#include <deque>
#include <filesystem>

#include "../log.h"
#include "exchange.h"
#include "ftllm_version.h"

namespace ftllm::http {

namespace {
std::string uv_error(int code) { return std::string(uv_strerror(code)); }
}  // namespace

// One client connection. Owned by the Server's list; deleted in its close callback. Requests are answered
// one at a time, in order: pipelined ones wait in `queued_` while an exchange is active.
class Connection {
 public:
  Connection(Server& server, bool is_tcp) : server_(server), parser_(server.limits_.parse), is_tcp_(is_tcp) {
    if (is_tcp)
      uv_tcp_init(server.loop_, &handle_.tcp);
    else
      uv_pipe_init(server.loop_, &handle_.pipe, 0);
    stream()->data = this;
    touch();
  }

  uv_stream_t* stream() { return reinterpret_cast<uv_stream_t*>(&handle_); }
  uv_handle_t* handle() { return reinterpret_cast<uv_handle_t*>(&handle_); }

  void start() {
    if (is_tcp_) uv_tcp_nodelay(&handle_.tcp, 1);
    uv_read_start(stream(), &Connection::on_alloc, &Connection::on_read);
  }

  // Sends a response that refuses the connection and closes it (used above max_connections).
  void refuse(const Response& r) { finish_with(r); }

  // Closes now, dropping anything unsent; an active exchange learns its client is gone.
  void close() {
    if (closing_) return;
    closing_ = true;
    if (active_) {
      auto lost = std::move(active_);
      lost->connection_lost();
    }
    uv_close(handle(), &Connection::on_closed);
  }

  // For the sweep timer: closes a connection that idled or dawdled past its limit. A connection with a
  // response in progress (a stream) is never idle.
  void expire_if_stale(uint64_t now) {
    uint64_t age = now - last_activity_;
    if (draining_) {
      if (age > 2000) close();
    } else if (active_) {
      return;
    } else if (parser_.mid_request()) {
      // From its first byte a request has request_timeout to arrive, plus a millisecond for every 64 bytes of
      // body received (a body must keep up 64 KB/s): a client trickling bytes cannot hold its slot forever.
      const uint64_t allowed = server_.limits_.request_timeout_ms + parser_.body_bytes() / 64;
      if (now - request_started_ > allowed)
        finish_with(json_error(408, "request not completed in time", "invalid_request_error", "request_timeout"));
    } else if (pending_writes_ == 0 && age > server_.limits_.idle_timeout_ms) {
      close();
    }
  }

  // At the connection limit, one connection gives way to a new one: not one that is being answered, but
  // an idle keep-alive one or one still sending its request, the longest so first (trickling slowloris
  // clients cannot lock a well-behaved one out). The smaller the key, the sooner it gives way; none when
  // it is busy.
  std::optional<uint64_t> yield_key() const {
    if (active_ || draining_ || closing_) return std::nullopt;
    return parser_.mid_request() ? request_started_ : last_activity_;
  }
  void give_way() {
    if (parser_.mid_request())
      finish_with(json_error(503, "the server is at its connection limit and this request was the slowest; retry",
                             "server_error", "too_many_connections"));
    else
      close();
  }

  // Closes now unless a response is in progress (draining: that one finishes first).
  void close_if_idle() {
    if (!active_) close();
  }

  // Called by the active exchange.
  void write(std::string bytes) { send(std::move(bytes), false); }
  void responded(const Request& r, int status) {
    if (server_.on_response_) server_.on_response_(r, status);
  }
  void exchange_done(bool keep_alive) {
    active_.reset();
    if (!keep_alive || server_.closed_ || !server_.accepting_) {
      draining_ = true;
      shutdown_after_writes();
      return;
    }
    pump();
  }

  std::list<Connection*>::iterator position;

 private:
  struct Write {
    uv_write_t req;
    std::string data;
    Connection* conn;
    bool then_close;
  };

  void touch() { last_activity_ = uv_now(server_.loop_); }

  static void on_alloc(uv_handle_t* h, size_t, uv_buf_t* buf) {
    auto* c = static_cast<Connection*>(h->data);
    auto& b = c->server_.read_buffer_;
    *buf = uv_buf_init(b.data(), unsigned(b.size()));
  }

  static void on_read(uv_stream_t* s, ssize_t nread, const uv_buf_t* buf) {
    auto* c = static_cast<Connection*>(s->data);
    if (nread < 0) {
      c->close();  // EOF or reset: nothing more will come
      return;
    }
    if (nread == 0 || c->closing_) return;
    c->touch();
    c->count_read(size_t(nread));
    if (c->draining_ || c->parse_failed_) return;  // discard what arrives after the final response
    if (!c->parser_.mid_request()) c->request_started_ = c->last_activity_;  // a request's first byte
    std::vector<Request> requests;
    if (!c->parser_.feed(buf->base, size_t(nread), requests)) c->parse_failed_ = true;
    if (!requests.empty() && c->parser_.mid_request()) c->request_started_ = c->last_activity_;  // the next one began
    for (Request& r : requests) c->queued_.push_back(std::move(r));
    c->pump();
  }

  // Stops reading for the rest of this turn once the connection has read its share (Server::kReadPerTurn).
  void count_read(size_t n) {
    if (read_turn_ != server_.turn_) read_turn_ = server_.turn_, read_this_turn_ = 0;
    read_this_turn_ += n;
    if (read_this_turn_ < Server::kReadPerTurn || paused_) return;
    uv_read_stop(stream());
    paused_ = true;
    server_.paused_.push_back(this);
  }

 public:
  void resume_reading() {
    paused_ = false;
    if (!closing_) uv_read_start(stream(), &Connection::on_alloc, &Connection::on_read);
  }
  bool paused() const { return paused_; }

 private:
  // Starts the next queued request when none is active; after the last one, a parse error is answered.
  void pump() {
    while (!active_ && !closing_ && !draining_) {
      if (queued_.empty()) {
        if (parse_failed_) {
          const ParseError& e = parser_.error();
          const char* code = e.status == 413 ? "body_too_large" : e.status == 431 ? "headers_too_large" : "bad_request";
          finish_with(json_error(e.status, e.message, "invalid_request_error", code));
        }
        return;
      }
      auto exchange = std::make_shared<Exchange>(this, std::move(queued_.front()), &server_.limits_.cors);
      queued_.pop_front();
      active_ = exchange;
      server_.router_.dispatch(exchange);
    }
  }

  // The last response on this connection: send it, half-close, and drain until the peer closes, so the
  // peer reads the response instead of a reset.
  void finish_with(const Response& r, bool head = false) {
    draining_ = true;
    send(r.serialize(false, head), true);
  }

  void shutdown_after_writes() {
    if (pending_writes_ == 0) shutdown();
    else shutdown_pending_ = true;
  }

  void shutdown() {
    auto* sd = new uv_shutdown_t;
    sd->data = this;
    if (uv_shutdown(sd, stream(), [](uv_shutdown_t* r, int) { delete r; }) < 0) {
      delete sd;
      close();
    }
  }

  void send(std::string bytes, bool then_close) {
    if (closing_) return;
    auto* w = new Write{{}, std::move(bytes), this, then_close};
    uv_buf_t buf = uv_buf_init(w->data.data(), unsigned(w->data.size()));
    ++pending_writes_;
    int rc = uv_write(&w->req, stream(), &buf, 1, &Connection::on_written);
    if (rc < 0) {
      --pending_writes_;
      delete w;
      close();
    }
  }

  static void on_written(uv_write_t* req, int status) {
    auto* w = reinterpret_cast<Write*>(req);
    Connection* c = w->conn;
    bool then_close = w->then_close;
    delete w;
    --c->pending_writes_;
    if (c->closing_) return;
    if (status < 0) {
      c->close();
      return;
    }
    c->touch();
    if (then_close || (c->shutdown_pending_ && c->pending_writes_ == 0)) {
      c->shutdown_pending_ = false;
      c->shutdown();
    }
  }

  static void on_closed(uv_handle_t* h) {
    auto* c = static_cast<Connection*>(h->data);
    c->server_.forget(c);
    delete c;
  }

  Server& server_;
  union {
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } handle_{};
  RequestParser parser_;
  bool is_tcp_;
  bool closing_ = false;
  bool draining_ = false;
  bool parse_failed_ = false;
  bool shutdown_pending_ = false;
  int pending_writes_ = 0;
  uint64_t last_activity_ = 0;
  uint64_t request_started_ = 0;  // when the first byte of the request under way arrived
  uint64_t read_turn_ = 0;        // the loop turn read_this_turn_ counts
  size_t read_this_turn_ = 0;
  bool paused_ = false;           // in server_.paused_ until the turn ends
  std::deque<Request> queued_;
  std::shared_ptr<Exchange> active_;
};

void Exchange::respond(const Response& r) {
  if (done_) return;
  done_ = true;
  on_close_ = nullptr;  // it never runs after done(), and what it holds may hold this exchange
  if (!conn_) return;
  const bool keep = request_.keep_alive;
  Connection* c = conn_;
  conn_ = nullptr;
  c->responded(request_, r.status);
  if (cors_ && !cors_->origins.empty()) {
    Response with = r;
    cors_->add_headers(request_, with.headers);
    c->write(with.serialize(keep, request_.method == "HEAD"));
  } else {
    c->write(r.serialize(keep, request_.method == "HEAD"));
  }
  c->exchange_done(keep);
}

void Exchange::begin_stream(int status, const std::string& content_type,
                            std::vector<std::pair<std::string, std::string>> headers) {
  if (done_ || streaming_ || !conn_) return;
  streaming_ = true;
  conn_->responded(request_, status);
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason_phrase(status)) +
                     "\r\nServer: ftllmd/" FTLLM_VERSION "\r\nContent-Type: " + content_type +
                     "\r\nTransfer-Encoding: chunked\r\nCache-Control: no-cache\r\n";
  if (cors_) cors_->add_headers(request_, headers);
  for (auto& [k, v] : headers) head += k + ": " + v + "\r\n";
  if (!request_.keep_alive) head += "Connection: close\r\n";
  conn_->write(head + "\r\n");
}

void Exchange::send(const std::string& data) {
  if (done_ || !streaming_ || !conn_ || data.empty()) return;
  char size[20];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  conn_->write(size + data + "\r\n");
}

void Exchange::finish() {
  if (done_) return;
  done_ = true;
  on_close_ = nullptr;  // it never runs after done(), and what it holds may hold this exchange
  if (!conn_) return;
  Connection* c = conn_;
  conn_ = nullptr;
  c->write("0\r\n\r\n");
  c->exchange_done(request_.keep_alive);
}

void Exchange::connection_lost() {
  if (!conn_) return;
  conn_ = nullptr;
  if (!done_ && on_close_) {
    auto f = std::move(on_close_);
    f();
  }
}

Server::Server(uv_loop_t* loop, const Router& router, ServerLimits limits)
    : loop_(loop), router_(router), limits_(limits), read_buffer_(64 * 1024) {
  uv_timer_init(loop_, &sweep_);
  sweep_.data = this;
  uv_check_init(loop_, &turn_end_);
  turn_end_.data = this;
  uv_check_start(&turn_end_, &Server::on_turn);
}

Server::~Server() = default;

std::string Server::listen_tcp(const std::string& host, uint16_t port) {
  sockaddr_storage addr{};
  bool v6 = host.find(':') != std::string::npos;
  int rc = v6 ? uv_ip6_addr(host.c_str(), port, reinterpret_cast<sockaddr_in6*>(&addr))
              : uv_ip4_addr(host.c_str(), port, reinterpret_cast<sockaddr_in*>(&addr));
  if (rc < 0) return "invalid listen address " + host + ": " + uv_error(rc);
  tcp_ = std::make_unique<uv_tcp_t>();
  uv_tcp_init(loop_, tcp_.get());
  tcp_->data = this;
  rc = uv_tcp_bind(tcp_.get(), reinterpret_cast<sockaddr*>(&addr), 0);
  if (rc == 0) rc = uv_listen(reinterpret_cast<uv_stream_t*>(tcp_.get()), 511, &Server::on_connection);
  std::string shown = (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
  if (rc < 0) {
    std::string hint = rc == UV_EADDRINUSE ? " (another process is using that port; pick another with --listen)"
                       : rc == UV_EACCES   ? " (ports below 1024 need privileges; pick another with --listen)"
                                           : "";
    return "cannot listen on " + shown + ": " + uv_error(rc) + hint;
  }
  sockaddr_storage bound{};
  int len = sizeof bound;
  uv_tcp_getsockname(tcp_.get(), reinterpret_cast<sockaddr*>(&bound), &len);
  uint16_t real_port = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  address_ = (v6 ? "[" + host + "]" : host) + ":" + std::to_string(real_port);
  if (!sweep_started_) uv_timer_start(&sweep_, &Server::on_sweep, 1000, 1000), sweep_started_ = true;
  return {};
}

namespace {

// A socket file left by a daemon that died is removed; one that answers belongs to a live daemon.
std::string clear_stale_socket(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return {};
  if (!S_ISSOCK(st.st_mode)) return path + " exists and is not a socket; remove it or choose another --admin-socket";
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  bool live = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  if (live) return "another ftllmd is already serving " + path + "; stop it first (systemctl stop ftllmd)";
  ::unlink(path.c_str());
  return {};
}

}  // namespace

std::string Server::listen_unix(const std::string& path, unsigned mode, const std::string& group) {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty() && !std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir, ec);
    if (ec)
      return "cannot create " + dir.string() + " for the admin socket: " + ec.message() +
             " (run as root, or pass --admin-socket PATH in a writable directory)";
  }
  if (std::string why = clear_stale_socket(path); !why.empty()) return why;

  pipe_ = std::make_unique<uv_pipe_t>();
  uv_pipe_init(loop_, pipe_.get(), 0);
  pipe_->data = this;
  mode_t old_mask = umask(0177);  // no moment where the socket is open to everyone
  int rc = uv_pipe_bind(pipe_.get(), path.c_str());
  umask(old_mask);
  if (rc == 0) rc = uv_listen(reinterpret_cast<uv_stream_t*>(pipe_.get()), 64, &Server::on_connection);
  if (rc < 0) {
    std::string hint = rc == UV_EACCES ? " (run as root or a member of the socket's directory owner, or pass --admin-socket PATH)" : "";
    return "cannot listen on " + path + ": " + uv_error(rc) + hint;
  }
  unix_path_ = path;
  address_ = path;
  if (!group.empty()) {
    if (struct group* g = getgrnam(group.c_str())) {
      if (chown(path.c_str(), uid_t(-1), g->gr_gid) != 0)
        daemon::log_warn("cannot give " + path + " to group " + group + ": " + std::strerror(errno));
    } else {
      daemon::log_warn("group \"" + group + "\" does not exist, so only this user can use " + path +
                       " (create it with: systemd-sysusers, or groupadd " + group + ")");
    }
  }
  chmod(path.c_str(), mode);
  if (!sweep_started_) uv_timer_start(&sweep_, &Server::on_sweep, 1000, 1000), sweep_started_ = true;
  return {};
}

std::string Server::adopt(int fd, bool is_tcp) {
  int rc;
  uv_stream_t* stream;
  if (is_tcp) {
    tcp_ = std::make_unique<uv_tcp_t>();
    uv_tcp_init(loop_, tcp_.get());
    tcp_->data = this;
    rc = uv_tcp_open(tcp_.get(), fd);
    stream = reinterpret_cast<uv_stream_t*>(tcp_.get());
  } else {
    pipe_ = std::make_unique<uv_pipe_t>();
    uv_pipe_init(loop_, pipe_.get(), 0);
    pipe_->data = this;
    rc = uv_pipe_open(pipe_.get(), fd);
    stream = reinterpret_cast<uv_stream_t*>(pipe_.get());
  }
  if (rc == 0) rc = uv_listen(stream, 511, &Server::on_connection);
  if (rc < 0) return std::string("cannot listen on the socket systemd passed (fd ") + std::to_string(fd) + "): " + uv_error(rc);
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  char buf[INET6_ADDRSTRLEN] = "?";
  if (is_tcp && getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    bool v6 = addr.ss_family == AF_INET6;
    const void* ip = v6 ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr)
                        : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&addr)->sin_addr);
    inet_ntop(addr.ss_family, ip, buf, sizeof buf);
    uint16_t port = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    address_ = (v6 ? "[" + std::string(buf) + "]" : std::string(buf)) + ":" + std::to_string(port);
  } else if (!is_tcp) {
    sockaddr_un un{};
    socklen_t ulen = sizeof un;
    address_ = getsockname(fd, reinterpret_cast<sockaddr*>(&un), &ulen) == 0 ? std::string(un.sun_path) : "socket from systemd";
  }
  if (!sweep_started_) uv_timer_start(&sweep_, &Server::on_sweep, 1000, 1000), sweep_started_ = true;
  return {};
}

void Server::on_connection(uv_stream_t* listener, int status) {
  auto* self = static_cast<Server*>(listener->data);
  if (status < 0) {
    daemon::log_warn(std::string("accept failed: ") + uv_strerror(status));
    return;
  }
  auto* c = new Connection(*self, listener->type == UV_TCP);
  self->connections_.push_back(c);
  c->position = std::prev(self->connections_.end());
  if (uv_accept(listener, c->stream()) != 0) {
    c->close();
    return;
  }
  if (self->connections_.size() > self->limits_.max_connections) {
    Connection* oldest = nullptr;
    std::optional<uint64_t> oldest_key;
    for (Connection* other : self->connections_)
      if (auto key = other->yield_key(); other != c && key && (!oldest_key || *key < *oldest_key)) oldest = other, oldest_key = key;
    if (oldest) {
      oldest->give_way();
      c->start();
      return;
    }
    c->refuse(json_error(503, "too many connections (limit " + std::to_string(self->limits_.max_connections) +
                                  "); retry later",
                         "server_error", "too_many_connections"));
    return;
  }
  c->start();
}

void Server::on_sweep(uv_timer_t* timer) {
  auto* self = static_cast<Server*>(timer->data);
  uint64_t now = uv_now(self->loop_);
  for (auto it = self->connections_.begin(); it != self->connections_.end();) {
    Connection* c = *it++;  // expiring may not erase now (erase happens in the close callback)
    c->expire_if_stale(now);
  }
}

void Server::on_turn(uv_check_t* check) {
  auto* self = static_cast<Server*>(check->data);
  ++self->turn_;
  std::vector<Connection*> paused;
  paused.swap(self->paused_);
  for (Connection* c : paused) c->resume_reading();
}

void Server::forget(Connection* c) {
  connections_.erase(c->position);
  if (c->paused()) std::erase(paused_, c);
}

void Server::stop_accepting() {
  if (!accepting_) return;
  accepting_ = false;
  if (tcp_) uv_close(reinterpret_cast<uv_handle_t*>(tcp_.get()), nullptr);
  if (pipe_) uv_close(reinterpret_cast<uv_handle_t*>(pipe_.get()), nullptr);
  if (!unix_path_.empty()) ::unlink(unix_path_.c_str());
  for (auto it = connections_.begin(); it != connections_.end();) (*it++)->close_if_idle();
}

void Server::close() {
  if (closed_) return;
  stop_accepting();
  closed_ = true;
  uv_close(reinterpret_cast<uv_handle_t*>(&sweep_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&turn_end_), nullptr);
  for (Connection* c : connections_) c->close();
}

}  // namespace ftllm::http
