#include "response.h"

#include "core/json_writer.h"
#include "ftllm_version.h"

namespace ftllm::http {

std::string_view reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

std::string Response::serialize(bool keep_alive, bool head) const {
  std::string out;
  out.reserve(160 + body.size());
  out += "HTTP/1.1 ";
  out += std::to_string(status);
  out += ' ';
  out += reason_phrase(status);
  out += "\r\nServer: ftllmd/" FTLLM_VERSION "\r\n";
  if (!content_type.empty()) out += "Content-Type: " + content_type + "\r\n";
  if (status != 204) out += "Content-Length: " + std::to_string(body.size()) + "\r\n";  // 204 has none (RFC 9110)
  for (auto& [k, v] : headers) out += k + ": " + v + "\r\n";
  if (!keep_alive) out += "Connection: close\r\n";
  out += "\r\n";
  if (!head) out += body;
  return out;
}

Response json_error(int status, std::string_view message, std::string_view type, std::string_view code) {
  JsonWriter w;
  w.begin_object();
  w.key("error").begin_object();
  w.key("message").string(message);
  w.key("type").string(type);
  w.key("param").null();
  w.key("code").string(code);
  w.end_object();
  w.end_object();
  Response r{status, "application/json", {}, w.take()};
  if (status == 503) r.headers.emplace_back("Retry-After", "1");  // connection limits pass in moments
  return r;
}

}  // namespace ftllm::http
