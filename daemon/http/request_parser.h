// Incremental HTTP/1.x request parsing over llhttp, with the limits every peer is held to.
// Bytes may arrive split at any offset; pipelined requests come out in order.
#pragma once

#include <llhttp.h>

#include <cstddef>
#include <string>
#include <vector>

#include "limits.h"
#include "request.h"

namespace ftllm::http {

struct ParseLimits {
  size_t max_header_bytes = kDefaultMaxHeaderBytes;  // request line plus all headers
  size_t max_body_bytes = kDefaultMaxBodyBytes;
};

// Why parsing stopped: the HTTP status to answer with and a message for the client.
struct ParseError {
  int status = 0;
  std::string message;
};

class RequestParser {
 public:
  explicit RequestParser(ParseLimits limits);
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

  // Appends every request completed by these bytes to `out`. Returns false once the stream is broken;
  // error() then says how, and the connection must answer and close.
  bool feed(const char* data, size_t len, std::vector<Request>& out);

  const ParseError& error() const { return error_; }
  // True while part of a request has been received but not all of it.
  bool mid_request() const { return in_message_; }
  size_t body_bytes() const { return current_.body.size(); }  // of the request under way

 private:
  static int on_message_begin(llhttp_t*);
  static int on_url(llhttp_t*, const char*, size_t);
  static int on_header_field(llhttp_t*, const char*, size_t);
  static int on_header_value(llhttp_t*, const char*, size_t);
  static int on_header_value_complete(llhttp_t*);
  static int on_headers_complete(llhttp_t*);
  static int on_body(llhttp_t*, const char*, size_t);
  static int on_message_complete(llhttp_t*);

  int fail(int status, std::string message);
  int count_header_bytes(size_t n);

  ParseLimits limits_;
  llhttp_settings_t settings_{};
  llhttp_t parser_{};
  Request current_;
  std::string field_, value_;
  // What llhttp is reading now, and the last bytes before it: a header value's preceding bytes, to tell
  // a value continued on a folded line from one split over two reads.
  const char* chunk_ = nullptr;
  std::string before_chunk_;
  size_t header_bytes_ = 0;
  bool in_message_ = false;
  std::vector<Request>* out_ = nullptr;
  ParseError error_;
};

}  // namespace ftllm::http
