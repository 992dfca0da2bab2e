// ftllmctl chat NAME: an interactive streaming chat in the terminal, like `ftllm run`, through the
// daemon's OpenAI endpoint (found from the admin status). /reset forgets the history, /exit leaves.
// Ctrl-C while a reply streams stops it (the connection closes, so the daemon cancels the request) and
// keeps the conversation with what was said; Ctrl-C again at the prompt leaves.
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <llhttp.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <cerrno>
#include <string>
#include <vector>

#include "admin_wire.h"
#include "commands.h"
#include "json_fields.h"

namespace ftllm::client {

namespace {

volatile sig_atomic_t interrupted = 0;  // set by SIGINT

void on_interrupt(int) { interrupted = 1; }

// SIGINT stays blocked except inside ppoll, which unblocks it while it waits: a Ctrl-C that comes just
// before a wait is delivered in it (no window where it is noted and the wait then blocks anyway).
sigset_t unblocked;

// Waits until fd has input; false when Ctrl-C came first.
bool wait_readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    if (interrupted) return false;
    if (::ppoll(&p, 1, nullptr, &unblocked) > 0) return true;
    if (errno != EINTR) return true;  // let the read report the error
  }
}

// One line from stdin (without its newline). Returns false at the end of input or when interrupted
// (then `interrupted` is set).
bool read_line(std::string& line) {
  line.clear();
  for (char c;;) {
    if (!wait_readable(STDIN_FILENO)) return false;
    const ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    if (c == '\n') return true;
    line += c;
  }
}

struct Options {
  std::string model, system, api_key;
  int max_tokens = 512;
  double temperature = 0.7;
  bool hide_reasoning = false;
};

// POSTs a streaming chat request to host:port and calls on_event with each SSE data payload. Returns an
// empty string, or why it failed.
std::string stream_chat(const std::string& host, const std::string& port, const std::string& body, const std::string& api_key,
                        const std::function<void(std::string_view)>& on_event, int& status) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) return "cannot resolve " + host;
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool ok = fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0;
  freeaddrinfo(res);
  if (!ok) {
    if (fd >= 0) ::close(fd);
    return "cannot connect to the daemon's API on " + host + ":" + port + ": " + std::strerror(errno);
  }
  std::string req = "POST /v1/chat/completions HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/json\r\n" +
                    (api_key.empty() ? "" : "Authorization: Bearer " + api_key + "\r\n") +
                    "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != ssize_t(req.size())) {
    ::close(fd);
    return "cannot send the request";
  }
  struct State {
    std::string pending, error_body;
    const std::function<void(std::string_view)>* on_event;
    llhttp_t* parser;
  } state{{}, {}, &on_event, nullptr};
  llhttp_settings_t settings;
  llhttp_settings_init(&settings);
  settings.on_body = [](llhttp_t* p, const char* at, size_t len) {
    auto* s = static_cast<State*>(p->data);
    if (p->status_code != 200) {
      s->error_body.append(at, len);
      return 0;
    }
    s->pending.append(at, len);
    for (size_t end; (end = s->pending.find("\n\n")) != std::string::npos;) {
      std::string event = s->pending.substr(0, end);
      s->pending.erase(0, end + 2);
      if (event.starts_with("data: ")) (*s->on_event)(std::string_view(event).substr(6));
    }
    return 0;
  };
  llhttp_t parser;
  llhttp_init(&parser, HTTP_RESPONSE, &settings);
  parser.data = &state;
  char buf[8192];
  for (ssize_t n;;) {
    if (!wait_readable(fd)) break;
    n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || llhttp_execute(&parser, buf, size_t(n)) != HPE_OK) break;
  }
  ::close(fd);  // after Ctrl-C: the daemon sees the client gone and cancels the request
  if (interrupted) return {};
  status = parser.status_code;
  if (status != 200) {
    simdjson::dom::parser p;
    simdjson::padded_string padded(state.error_body);
    std::string_view message;
    if (p.parse(padded)["error"]["message"].get(message) == simdjson::SUCCESS) return std::string(message);
    return "the daemon answered " + std::to_string(status);
  }
  return {};
}

}  // namespace

int cmd_chat(const CommandContext& ctx, const std::vector<std::string>& args) {
  Options o;
  if (const char* key = std::getenv("FTLLM_API_KEY")) o.api_key = key;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
    const std::string* v = nullptr;
    if (a == "--system" && (v = value())) o.system = *v;
    else if (a == "--api_key" && (v = value())) o.api_key = *v;
    else if (a == "--max_tokens" && (v = value())) o.max_tokens = std::atoi(v->c_str());
    else if (a == "--temperature" && (v = value())) o.temperature = std::atof(v->c_str());
    else if (a == "--hide_reasoning") o.hide_reasoning = true;
    else if (a.starts_with("-")) return std::fprintf(stderr, "ftllmctl: chat: unknown option or missing value: %s\n", a.c_str()), 2;
    else o.model = a;
  }
  if (o.model.empty()) return std::fprintf(stderr, "usage: ftllmctl chat NAME [--system TEXT] [--max_tokens N] [--temperature T] [--hide_reasoning]\n"), 2;

  // Where the OpenAI API listens, and that the model is there.
  AdminReply reply;
  AdminFailure failure;
  if (!ctx.client.call("GET", admin::kStatusPath, "", reply, failure)) {
    std::fprintf(stderr, "ftllmctl: %s\n", failure.message.c_str());
    return failure.not_running ? 3 : 4;
  }
  simdjson::dom::parser parser;
  simdjson::padded_string status_body(reply.body);
  simdjson::dom::element status;
  if (parser.parse(status_body).get(status)) return std::fprintf(stderr, "ftllmctl: unreadable status from the daemon\n"), 1;
  bool found = false;
  for (auto m : status[admin::key::models].get_array()) found |= field<std::string_view>(m, admin::key::name) == o.model;
  if (!found) return std::fprintf(stderr, "ftllmctl: no model named %s is loaded; load it with: ftllmctl load MODEL --name %s\n", o.model.c_str(), o.model.c_str()), 1;
  std::string listen(field<std::string_view>(status, admin::key::listen));
  size_t colon = listen.rfind(':');
  std::string host = listen.substr(0, colon), port = listen.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";

  const bool tty = isatty(STDOUT_FILENO);
  std::vector<std::string> history;  // JSON message objects
  auto reset = [&] {
    history.clear();
    if (!o.system.empty()) history.push_back("{\"role\": \"system\", \"content\": " + json_quote(o.system) + "}");
  };
  reset();
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigset_t blocked;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGINT);
  sigprocmask(SIG_BLOCK, &blocked, &unblocked);
  sigdelset(&unblocked, SIGINT);
  if (isatty(STDIN_FILENO))
    std::fprintf(stderr, "chatting with %s; /reset forgets the conversation, /exit or Ctrl-C twice leaves, Ctrl-C stops a reply\n",
                 o.model.c_str());
  std::string line;
  bool just_interrupted = false;  // the last thing was a Ctrl-C: another one at the prompt leaves
  for (;;) {
    if (isatty(STDIN_FILENO)) std::fputs("> ", stderr);
    if (!read_line(line)) {
      if (!interrupted || just_interrupted) break;
      interrupted = 0;
      just_interrupted = true;
      std::fprintf(stderr, "\n(Ctrl-C again or /exit to leave)\n");
      continue;
    }
    just_interrupted = false;
    if (line == "/exit") break;
    if (line == "/reset") {
      reset();
      std::printf("(conversation reset)\n");
      continue;
    }
    if (line.empty()) continue;
    history.push_back("{\"role\": \"user\", \"content\": " + json_quote(line) + "}");
    std::string messages;
    for (const std::string& m : history) messages += (messages.empty() ? "" : ", ") + m;
    char numbers[128];
    std::snprintf(numbers, sizeof numbers, "\"max_tokens\": %d, \"temperature\": %g", o.max_tokens, o.temperature);
    std::string body = "{\"model\": " + json_quote(o.model) + ", \"messages\": [" + messages + "], " + numbers + ", \"stream\": true}";
    std::string answer;
    bool in_reasoning = false;
    simdjson::dom::parser events;
    int http_status = 0;
    std::string error = stream_chat(host, port, body, o.api_key, [&](std::string_view data) {
      if (data == "[DONE]") return;
      simdjson::padded_string padded(data);
      simdjson::dom::element e;
      if (events.parse(padded).get(e)) return;
      simdjson::dom::array choices;
      if (e["choices"].get(choices) || choices.size() == 0) return;
      simdjson::dom::element delta = choices.at(0)["delta"];
      std::string_view piece;
      if (!delta["reasoning_content"].get(piece) && !o.hide_reasoning) {
        if (!in_reasoning && tty) std::fputs("\x1b[2m", stdout);
        in_reasoning = true;
        std::fwrite(piece.data(), 1, piece.size(), stdout);
      }
      if (!delta["content"].get(piece) && !piece.empty()) {
        if (in_reasoning) std::fputs(tty ? "\x1b[0m\n" : "\n", stdout);
        in_reasoning = false;
        answer += piece;
        std::fwrite(piece.data(), 1, piece.size(), stdout);
      }
      std::fflush(stdout);
    }, http_status);
    if (in_reasoning && tty) std::fputs("\x1b[0m", stdout);
    if (interrupted) {  // the reply so far stays in the conversation, as the user saw it
      interrupted = 0;
      just_interrupted = true;
      std::printf("\n(stopped)\n");
      std::fflush(stdout);
      history.push_back("{\"role\": \"assistant\", \"content\": " + json_quote(answer) + "}");
      continue;
    }
    std::printf("\n");
    if (!error.empty()) {
      std::fprintf(stderr, "ftllmctl: %s\n", error.c_str());
      history.pop_back();
      continue;
    }
    history.push_back("{\"role\": \"assistant\", \"content\": " + json_quote(answer) + "}");
  }
  return 0;
}

const RegisteredCommand chat_command({60, "chat", [] {
  return std::string("  chat NAME [--system TEXT] [--max_tokens N] [--temperature T] [--hide_reasoning]\n"
         "                                an interactive streaming chat (/reset, /exit; Ctrl-C stops a reply)\n");
}, &cmd_chat});

}  // namespace ftllm::client
