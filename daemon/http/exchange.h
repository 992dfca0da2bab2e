// One request and its response, which a handler may give at once or later, whole or as a stream
// (chunked transfer encoding, as Server-Sent Events need). Lives on the loop thread. When the client
// goes away first, the exchange is told (on_close) and every later write is dropped.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cors.h"
#include "request.h"
#include "response.h"

namespace ftllm::http {

class Connection;

class Exchange {
 public:
  Exchange(Connection* c, Request r, const CorsPolicy* cors = nullptr) : conn_(c), request_(std::move(r)), cors_(cors) {}
  const Request& request() const { return request_; }
  const CorsPolicy* cors() const { return cors_; }
  // Moves the body out, for the worker that parses it (while it does, nothing else reads the body):
  // its memory is then freed off the loop thread.
  std::string take_body() { return std::move(request_.body); }

  void respond(const Response& r);
  // Starts a chunked response; send() writes chunks, finish() ends it.
  void begin_stream(int status, const std::string& content_type, std::vector<std::pair<std::string, std::string>> headers = {});
  void send(const std::string& data);
  void finish();

  bool closed() const { return conn_ == nullptr; }
  bool done() const { return done_; }
  // Runs when the client disconnects before the response is done (never after done()).
  void on_close(std::function<void()> f) { on_close_ = std::move(f); }

 private:
  friend class Connection;
  void connection_lost();

  Connection* conn_;
  Request request_;
  const CorsPolicy* cors_;  // the server's: every response and stream head gets its headers
  bool streaming_ = false, done_ = false;
  std::function<void()> on_close_;
};

}  // namespace ftllm::http
