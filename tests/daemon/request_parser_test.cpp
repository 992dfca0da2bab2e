// HTTP request parsing: every request is fed whole, byte by byte and split at every offset, and must
// come out the same as written down here.
#include <boost/test/unit_test.hpp>

#include "http/request_parser.h"

using namespace ftllm::http;

namespace {

struct Expected {
  std::string method, target, body;
  std::vector<std::pair<std::string, std::string>> headers;
  bool keep_alive;
};

void check(const std::vector<Request>& got, const std::vector<Expected>& want, const std::string& how) {
  BOOST_TEST_CONTEXT(how) {
    BOOST_REQUIRE_EQUAL(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      BOOST_TEST(got[i].method == want[i].method);
      BOOST_TEST(got[i].target == want[i].target);
      BOOST_TEST(got[i].body == want[i].body);
      BOOST_TEST(got[i].keep_alive == want[i].keep_alive);
      BOOST_REQUIRE_EQUAL(got[i].headers.size(), want[i].headers.size());
      for (size_t h = 0; h < want[i].headers.size(); ++h) {
        BOOST_TEST(got[i].headers[h].first == want[i].headers[h].first);
        BOOST_TEST(got[i].headers[h].second == want[i].headers[h].second);
      }
    }
  }
}

std::vector<Request> parse_pieces(const std::vector<std::string>& pieces, ParseLimits limits = {}) {
  RequestParser parser(limits);
  std::vector<Request> out;
  for (auto& p : pieces) BOOST_REQUIRE_MESSAGE(parser.feed(p.data(), p.size(), out), parser.error().message);
  BOOST_TEST(!parser.mid_request());
  return out;
}

// Whole, byte by byte, and in two parts at every offset.
void check_all_splits(const std::string& wire, const std::vector<Expected>& want) {
  check(parse_pieces({wire}), want, "whole");
  std::vector<std::string> bytes;
  for (char c : wire) bytes.emplace_back(1, c);
  check(parse_pieces(bytes), want, "byte by byte");
  for (size_t cut = 1; cut < wire.size(); ++cut)
    check(parse_pieces({wire.substr(0, cut), wire.substr(cut)}), want, "split at " + std::to_string(cut));
}

// The status the parser fails with, whatever the split.
int failure_status(const std::string& wire, ParseLimits limits = {}) {
  int status = -1;
  for (size_t cut = 0; cut <= wire.size(); ++cut) {
    RequestParser parser(limits);
    std::vector<Request> out;
    bool ok = parser.feed(wire.data(), cut, out) && parser.feed(wire.data() + cut, wire.size() - cut, out);
    BOOST_REQUIRE_MESSAGE(!ok, "expected a failure at split " + std::to_string(cut));
    if (status == -1) status = parser.error().status;
    BOOST_REQUIRE_EQUAL(parser.error().status, status);
    BOOST_TEST(!parser.error().message.empty());
  }
  return status;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(request_parser)

BOOST_AUTO_TEST_CASE(simple_get) {
  check_all_splits("GET /v1/models?x=1 HTTP/1.1\r\nHost: localhost\r\nUser-Agent: curl/8\r\n\r\n",
                   {{"GET", "/v1/models?x=1", "", {{"host", "localhost"}, {"user-agent", "curl/8"}}, true}});
  std::vector<Request> r = parse_pieces({"GET /a/b?c HTTP/1.1\r\nX-Mixed-Case: Value\r\n\r\n"});
  BOOST_TEST(r[0].path() == "/a/b");
  BOOST_TEST(r[0].header("x-mixed-case") == "Value");
  BOOST_TEST(r[0].header("absent") == "");
}

BOOST_AUTO_TEST_CASE(post_with_content_length) {
  std::string body = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";
  check_all_splits("POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body,
                   {{"POST",
                     "/v1/chat/completions",
                     body,
                     {{"content-type", "application/json"}, {"content-length", std::to_string(body.size())}},
                     true}});
}

BOOST_AUTO_TEST_CASE(chunked_body) {
  check_all_splits("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
                   {{"POST", "/x", "hello world", {{"transfer-encoding", "chunked"}}, true}});
}

BOOST_AUTO_TEST_CASE(pipelined_requests_and_connection_close) {
  check_all_splits(
      "GET /health HTTP/1.1\r\nHost: a\r\n\r\n"
      "POST /p HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
      "GET /last HTTP/1.1\r\nConnection: close\r\n\r\n",
      {{"GET", "/health", "", {{"host", "a"}}, true},
       {"POST", "/p", "abc", {{"content-length", "3"}}, true},
       {"GET", "/last", "", {{"connection", "close"}}, false}});
}

BOOST_AUTO_TEST_CASE(http10_closes_unless_asked_to_keep_alive) {
  check_all_splits("GET / HTTP/1.0\r\n\r\n", {{"GET", "/", "", {}, false}});
  check_all_splits("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
                   {{"GET", "/", "", {{"connection", "keep-alive"}}, true}});
}

BOOST_AUTO_TEST_CASE(malformed_request_line_is_400) {
  BOOST_TEST(failure_status("GARBAGE\r\n\r\n") == 400);
  BOOST_TEST(failure_status("GET /x HTTP/9.9\r\n\r\n") == 400);
  BOOST_TEST(failure_status("GET /x HTTP/1.1\r\nBad Header\r\n\r\n") == 400);
  BOOST_TEST(failure_status("POST /x HTTP/1.1\r\nContent-Length: abc\r\n\r\n") == 400);
}

BOOST_AUTO_TEST_CASE(oversized_headers_are_431) {
  ParseLimits limits{1024, 4096};
  std::string big(2000, 'a');
  BOOST_TEST(failure_status("GET /x HTTP/1.1\r\nX-Big: " + big + "\r\n\r\n", limits) == 431);
  BOOST_TEST(failure_status("GET /" + big + " HTTP/1.1\r\n\r\n", limits) == 431);
}

BOOST_AUTO_TEST_CASE(oversized_bodies_are_413) {
  ParseLimits limits{1024, 10};
  BOOST_TEST(failure_status("POST /x HTTP/1.1\r\nContent-Length: 11\r\n\r\n", limits) == 413);
  BOOST_TEST(failure_status("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n8\r\n12345678\r\n",
                            limits) == 413);
  // Exactly at the limit is fine.
  check(parse_pieces({"POST /x HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789"}, limits),
        {{"POST", "/x", "0123456789", {{"content-length", "10"}}, true}}, "at limit");
}

BOOST_AUTO_TEST_CASE(header_limit_resets_per_request) {
  // Many small requests on one connection must not add up to the per-request header limit.
  ParseLimits limits{200, 100};
  std::string one = "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n";
  std::string many;
  for (int i = 0; i < 50; ++i) many += one;
  BOOST_TEST(parse_pieces({many}, limits).size() == 50u);
}

// Obsolete line folding (a header continued on a line that starts with a space or tab) is refused,
// however the bytes arrive; spaces inside and around a value are not folding.
BOOST_AUTO_TEST_CASE(folded_headers_are_refused) {
  BOOST_TEST(failure_status("GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n") == 400);
  BOOST_TEST(failure_status("GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\t\tb\r\n\r\n") == 400);
  BOOST_TEST(failure_status("GET / HTTP/1.1\r\nX-A:\r\n b\r\nHost: x\r\n\r\n") == 400);
  check_all_splits("GET / HTTP/1.1\r\nHost: x\r\nX-A:    a  b \t c\r\nX-B:\t d\r\n\r\n",
                   {{"GET", "/", "", {{"host", "x"}, {"x-a", "a  b \t c"}, {"x-b", "d"}}, true}});
}

BOOST_AUTO_TEST_CASE(mid_request_is_visible) {
  RequestParser parser({});
  std::vector<Request> out;
  std::string part = "GET /x HTTP/1.1\r\nHo";
  BOOST_REQUIRE(parser.feed(part.data(), part.size(), out));
  BOOST_TEST(parser.mid_request());
  BOOST_TEST(out.empty());
}

BOOST_AUTO_TEST_SUITE_END()
