// ftllmctl's pieces that need no daemon: formatting and what it says when nothing listens.
#include <boost/test/unit_test.hpp>

#include "admin_client.h"
#include "commands.h"
#include "json_fields.h"
#include "table.h"

using namespace ftllm::client;

BOOST_AUTO_TEST_CASE(bytes_and_durations_read_well) {
  BOOST_TEST(format_bytes(512) == "512 B");
  BOOST_TEST(format_bytes(1536) == "1.5 KiB");
  BOOST_TEST(format_bytes(25276502016.0) == "23.5 GiB");
  BOOST_TEST(format_duration(59.9) == "59s");
  BOOST_TEST(format_duration(3725) == "1h 02m 05s");
  BOOST_TEST(format_duration(90061) == "1d 01h 01m");
}

BOOST_AUTO_TEST_CASE(table_pads_columns) {
  Table t({"A", "LONGER"});
  t.add({"value", "x"});
  BOOST_TEST(t.render() == "A       LONGER\nvalue   x\n");
}

// THREADS says when the machine's load left some of a model's threads out (and reads an older daemon's reply).
BOOST_AUTO_TEST_CASE(threads_in_use_are_shown_when_fewer_than_the_model_has) {
  simdjson::dom::parser p;
  BOOST_TEST(threads_text(p.parse(std::string(R"({"threads": 2, "threads_active": 1})"))) == "1 of 2");
  BOOST_TEST(threads_text(p.parse(std::string(R"({"threads": 2, "threads_active": 2})"))) == "2");
  BOOST_TEST(threads_text(p.parse(std::string(R"({"threads": 4})"))) == "4");
}

BOOST_AUTO_TEST_CASE(absent_daemon_is_reported_with_the_socket_path) {
  AdminClient client("/nonexistent-dir/ftllmd.sock");
  AdminReply reply;
  AdminFailure failure;
  BOOST_TEST(!client.call("GET", "/admin/v1/status", "", reply, failure));
  BOOST_TEST(failure.not_running);
  BOOST_TEST(failure.message.find("ftllmd is not running") == 0u);
  BOOST_TEST(failure.message.find("/nonexistent-dir/ftllmd.sock") != std::string::npos);
}

// Each subcommand's file registers itself; the registry (linked whole) has them all, in usage order.
BOOST_AUTO_TEST_CASE(every_subcommand_is_registered_in_order) {
  std::vector<std::string> names;
  for (const Command& c : registered_commands()) {
    names.push_back(c.name);
    BOOST_TEST(c.usage().find(std::string("  ") + c.name) == 0u, c.name);
  }
  const std::vector<std::string> expected{"status", "list", "load", "unload", "rebalance", "load-adapter", "unload-adapter", "chat", "export"};
  BOOST_TEST(names == expected, boost::test_tools::per_element());
}
