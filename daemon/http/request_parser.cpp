#include "request_parser.h"

#include <algorithm>
#include <cstring>
#include <cctype>

namespace ftllm::http {

namespace {
RequestParser& self(llhttp_t* p) { return *static_cast<RequestParser*>(p->data); }
}  // namespace

RequestParser::RequestParser(ParseLimits limits) : limits_(limits) {
  llhttp_settings_init(&settings_);
  settings_.on_message_begin = &RequestParser::on_message_begin;
  settings_.on_url = &RequestParser::on_url;
  settings_.on_header_field = &RequestParser::on_header_field;
  settings_.on_header_value = &RequestParser::on_header_value;
  settings_.on_header_value_complete = &RequestParser::on_header_value_complete;
  settings_.on_headers_complete = &RequestParser::on_headers_complete;
  settings_.on_body = &RequestParser::on_body;
  settings_.on_message_complete = &RequestParser::on_message_complete;
  llhttp_init(&parser_, HTTP_REQUEST, &settings_);
  parser_.data = this;
}

int RequestParser::fail(int status, std::string message) {
  error_ = {status, std::move(message)};
  return -1;
}

int RequestParser::count_header_bytes(size_t n) {
  header_bytes_ += n;
  if (header_bytes_ > limits_.max_header_bytes)
    return fail(431, "request line and headers exceed " + std::to_string(limits_.max_header_bytes) + " bytes");
  return 0;
}

int RequestParser::on_message_begin(llhttp_t* p) {
  auto& s = self(p);
  s.current_ = Request{};
  s.field_.clear();
  s.value_.clear();
  s.header_bytes_ = 0;
  s.in_message_ = true;
  return 0;
}

int RequestParser::on_url(llhttp_t* p, const char* at, size_t len) {
  auto& s = self(p);
  s.current_.target.append(at, len);
  return s.count_header_bytes(len);
}

int RequestParser::on_header_field(llhttp_t* p, const char* at, size_t len) {
  auto& s = self(p);
  s.field_.append(at, len);
  return s.count_header_bytes(len);
}

int RequestParser::on_header_value(llhttp_t* p, const char* at, size_t len) {
  auto& s = self(p);
  // llhttp takes a line that starts with a space or tab as more of the value before it (obsolete line
  // folding, RFC 9112 5.2, which a server may refuse): such a piece of value follows spaces or tabs that
  // follow a line break. (The first piece of a value follows the colon.)
  auto byte_before = [&](size_t k) -> int {  // the k-th byte before `at`, or -1
    if (size_t(at - s.chunk_) >= k) return static_cast<unsigned char>(at[-std::ptrdiff_t(k)]);
    const size_t in_tail = k - size_t(at - s.chunk_);
    return in_tail <= s.before_chunk_.size() ? static_cast<unsigned char>(s.before_chunk_[s.before_chunk_.size() - in_tail]) : -1;
  };
  // The whitespace is in the piece (llhttp hands it over when the line arrived in one read) or before it.
  const bool starts_blank = len > 0 && (at[0] == ' ' || at[0] == '\t');
  size_t k = 1;
  while (byte_before(k) == ' ' || byte_before(k) == '\t') ++k;
  if ((k > 1 || starts_blank) && byte_before(k) == '\n')
    return s.fail(400, "header \"" + s.field_ + "\" continues on a second line (obsolete line folding, RFC 9112 5.2); "
                       "send each header on one line");
  s.value_.append(at, len);
  return s.count_header_bytes(len);
}

int RequestParser::on_header_value_complete(llhttp_t* p) {
  auto& s = self(p);
  std::transform(s.field_.begin(), s.field_.end(), s.field_.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  s.current_.headers.emplace_back(std::move(s.field_), std::move(s.value_));
  s.field_.clear();
  s.value_.clear();
  return 0;
}

int RequestParser::on_headers_complete(llhttp_t* p) {
  auto& s = self(p);
  s.current_.method = llhttp_method_name(llhttp_method_t(p->method));
  // Refuse an announced oversized body before reading any of it.
  if ((p->flags & F_CONTENT_LENGTH) && p->content_length > s.limits_.max_body_bytes)
    return s.fail(413, "request body of " + std::to_string(p->content_length) + " bytes exceeds the limit of " +
                           std::to_string(s.limits_.max_body_bytes) + " bytes");
  // The announced size at once: a 16 MB body grown by doubling was copied and faulted in twice on the loop.
  // Reserving only maps address space; a client that never sends its body costs no memory for it.
  if (p->flags & F_CONTENT_LENGTH) s.current_.body.reserve(size_t(p->content_length));
  return 0;
}

int RequestParser::on_body(llhttp_t* p, const char* at, size_t len) {
  auto& s = self(p);
  if (s.current_.body.size() + len > s.limits_.max_body_bytes)
    return s.fail(413, "request body exceeds the limit of " + std::to_string(s.limits_.max_body_bytes) + " bytes");
  s.current_.body.append(at, len);
  return 0;
}

int RequestParser::on_message_complete(llhttp_t* p) {
  auto& s = self(p);
  s.current_.keep_alive = llhttp_should_keep_alive(p) != 0;
  s.out_->push_back(std::move(s.current_));
  s.current_ = Request{};
  s.in_message_ = false;
  return 0;
}

bool RequestParser::feed(const char* data, size_t len, std::vector<Request>& out) {
  if (error_.status) return false;
  out_ = &out;
  const char* end = data + len;
  chunk_ = data;
  while (data < end) {
    llhttp_errno_t err = llhttp_execute(&parser_, data, size_t(end - data));
    if (err == HPE_OK) break;
    if (err == HPE_PAUSED_UPGRADE) {
      // We speak HTTP/1.1 only: the request was delivered; ignore the upgrade offer and go on.
      const char* pos = llhttp_get_error_pos(&parser_);
      llhttp_resume_after_upgrade(&parser_);
      data = pos ? pos : end;
      continue;
    }
    if (!error_.status) {
      const char* reason = llhttp_get_error_reason(&parser_);
      error_ = {400, std::string("malformed HTTP request: ") + (reason && *reason ? reason : llhttp_errno_name(err))};
    }
    out_ = nullptr;
    return false;
  }
  out_ = nullptr;
  // Keep the last bytes for the next read's first header value to look back on.
  const size_t kept = std::min<size_t>(len, 64);
  before_chunk_.append(end - kept, kept);
  if (before_chunk_.size() > 64) before_chunk_.erase(0, before_chunk_.size() - 64);
  return true;
}

}  // namespace ftllm::http
