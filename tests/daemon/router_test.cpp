// Routing, responses on the wire and JSON text.
#include <boost/test/unit_test.hpp>

#include "ftllm_version.h"
#include "http/cors.h"
#include "http/router.h"
#include "core/json_writer.h"

using namespace ftllm;
using namespace ftllm::http;

namespace {
Request make(std::string method, std::string target) {
  Request r;
  r.method = std::move(method);
  r.target = std::move(target);
  return r;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(router)

BOOST_AUTO_TEST_CASE(dispatch_404_405_500) {
  Router router;
  router.add("GET", "/a", [](const Request&) { return Response{200, "text/plain", {}, "A"}; });
  router.add("POST", "/boom", [](const Request&) -> Response { throw std::runtime_error("kaput"); });

  BOOST_TEST(router.dispatch(make("GET", "/a?q=1")).body == "A");
  Response head = router.dispatch(make("HEAD", "/a"));
  BOOST_TEST(head.status == 200);

  Response missing = router.dispatch(make("GET", "/b"));
  BOOST_TEST(missing.status == 404);
  const std::string want_404 =
      R"J({"error":{"message":"unknown path /b (method GET)","type":"invalid_request_error","param":null,"code":"unknown_url"}})J";
  BOOST_TEST(missing.body == want_404);

  Response wrong = router.dispatch(make("DELETE", "/a"));
  BOOST_TEST(wrong.status == 405);
  BOOST_REQUIRE_EQUAL(wrong.headers.size(), 1u);
  BOOST_TEST(wrong.headers[0].second == "GET");

  Response boom = router.dispatch(make("POST", "/boom"));
  BOOST_TEST(boom.status == 500);
  BOOST_TEST(boom.body.find("kaput") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(serialize) {
  Response r{404, "application/json", {{"Allow", "GET"}}, "{}"};
  const std::string want = "HTTP/1.1 404 Not Found\r\nServer: ftllmd/" FTLLM_VERSION
                           "\r\nContent-Type: application/json\r\nContent-Length: 2\r\nAllow: GET\r\n\r\n{}";
  BOOST_TEST(r.serialize(true) == want);
  std::string closing = r.serialize(false, true);
  BOOST_TEST(closing.find("Connection: close\r\n\r\n") != std::string::npos);
  BOOST_TEST(closing.ends_with("\r\n\r\n"));  // HEAD: no body, length kept
  BOOST_TEST(closing.find("Content-Length: 2") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(json_writer_escapes_and_nests) {
  JsonWriter w;
  w.begin_object();
  w.key("s").string("q\"b\\n\n\t\x01\xc3\xa9");
  w.key("n").number(int64_t(-5));
  w.key("u").number(uint64_t(18446744073709551615ull));
  w.key("d").number(0.5);
  w.key("a").begin_array().boolean(true).null().begin_object().end_object().begin_array().end_array().end_array();
  w.end_object();
  const std::string want = R"({"s":"q\"b\\n\n\t\u0001é","n":-5,"u":18446744073709551615,"d":0.5,"a":[true,null,{},[]]})";
  BOOST_TEST(w.str() == want);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(cors)

Request from(std::string method, std::string origin, std::vector<std::pair<std::string, std::string>> more = {}) {
  Request r = make(std::move(method), "/v1/chat/completions");
  if (!origin.empty()) r.headers.emplace_back("origin", std::move(origin));
  for (auto& h : more) r.headers.push_back(std::move(h));
  return r;
}

std::string header(const Response& r, const std::string& name) {
  for (auto& [k, v] : r.headers)
    if (k == name) return v;
  return "<none>";
}

// Fetch standard: an allowed origin is echoed (with Vary: Origin) or "*" when any is; never credentials;
// nothing without an Origin or for one not listed.
BOOST_AUTO_TEST_CASE(responses_name_the_allowed_origin) {
  const CorsPolicy listed{{"https://chat.example.com", "http://localhost:3000"}}, any{{"*"}}, none{};
  std::vector<std::pair<std::string, std::string>> h;
  listed.add_headers(from("POST", "https://chat.example.com"), h);
  BOOST_REQUIRE_EQUAL(h.size(), 3u);
  BOOST_TEST(h[0].first == "Access-Control-Allow-Origin");
  BOOST_TEST(h[0].second == "https://chat.example.com");
  BOOST_TEST(h[1].first == "Vary");
  h.clear();
  listed.add_headers(from("POST", "https://evil.example.com"), h);
  listed.add_headers(from("POST", "https://chat.example.com.evil.net"), h);
  listed.add_headers(from("POST", ""), h);
  none.add_headers(from("POST", "https://chat.example.com"), h);
  BOOST_TEST(h.empty());
  any.add_headers(from("GET", "null"), h);  // a sandboxed page's origin
  BOOST_REQUIRE_EQUAL(h.size(), 2u);
  BOOST_TEST(h[0].second == "*");
  for (auto& [k, v] : h) BOOST_TEST(k != "Access-Control-Allow-Credentials");
}

BOOST_AUTO_TEST_CASE(preflights_are_answered_or_refused_with_the_fix) {
  const CorsPolicy listed{{"https://chat.example.com"}};
  const auto asked = std::vector<std::pair<std::string, std::string>>{{"access-control-request-method", "POST"},
                                                                       {"access-control-request-headers", "authorization, content-type"}};
  const std::optional<Response> ok = listed.preflight(from("OPTIONS", "https://chat.example.com", asked), "POST");
  BOOST_REQUIRE(ok);
  BOOST_TEST(ok->status == 204);
  BOOST_TEST(header(*ok, "Access-Control-Allow-Origin") == "https://chat.example.com");
  BOOST_TEST(header(*ok, "Access-Control-Allow-Methods") == "POST");
  BOOST_TEST(header(*ok, "Access-Control-Allow-Headers") == "authorization, content-type");
  BOOST_TEST(header(*ok, "Access-Control-Max-Age") == "600");
  BOOST_TEST(ok->serialize(true, false).find("Content-Length") == std::string::npos);  // a 204 has none
  const std::optional<Response> refused = listed.preflight(from("OPTIONS", "https://evil.example.com", asked), "POST");
  BOOST_REQUIRE(refused);
  BOOST_TEST(refused->status == 403);
  BOOST_TEST(refused->body.find("[server] cors_origins") != std::string::npos);
  BOOST_TEST(!listed.preflight(from("OPTIONS", "https://chat.example.com"), "POST"));  // no request method: not a preflight
  BOOST_TEST(!listed.preflight(from("POST", "https://chat.example.com", asked), "POST"));
}

BOOST_AUTO_TEST_SUITE_END()
