// The engine's view of the machine.
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <string>

#include "engine.h"

BOOST_AUTO_TEST_CASE(host_memory_is_reported) {
  ftllm::Engine engine;
  ftllm::DeviceReport report = engine.devices();
  BOOST_REQUIRE(!report.devices.empty());
  const auto& host = report.devices.front();
  BOOST_TEST(host.id == "numa:0");
  BOOST_TEST(host.total_bytes > uint64_t(256) << 20);
  BOOST_TEST(host.free_bytes <= host.total_bytes);
  BOOST_TEST(host.free_bytes > 0u);
  // /proc/meminfo's MemTotal (kB) is the oracle for the total on a one-node machine.
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  meminfo >> key >> kib;
  BOOST_REQUIRE(key == "MemTotal:");
  if (report.devices.size() == 1) BOOST_TEST(host.total_bytes == kib * 1024);
}

BOOST_AUTO_TEST_CASE(missing_cuda_is_explained_not_hidden) {
  ftllm::Engine engine;
  ftllm::DeviceReport report = engine.devices();
  bool has_cuda_device = false, has_cuda_note = false;
  for (auto& d : report.devices) has_cuda_device |= d.id.starts_with("cuda:");
  for (auto& n : report.notes) has_cuda_note |= n.starts_with("cuda");
  BOOST_TEST((has_cuda_device || has_cuda_note));
  if (!engine.cuda_built()) BOOST_TEST(has_cuda_note);
}

BOOST_AUTO_TEST_CASE(no_models_until_one_is_loaded) {
  ftllm::Engine engine;
  BOOST_TEST(engine.models().empty());
}
