// fastllm's --device syntax resolved to layer ranges.
#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "cpu/numa_topology.h"
#include "placement.h"

using namespace ftllm;

BOOST_AUTO_TEST_CASE(device_specs_resolve_to_layer_ranges) {
  BOOST_TEST(placement_string(resolve_placement("cpu", 30)) == "cpu:0-29");
  BOOST_TEST(placement_string(resolve_placement("", 30)) == "cpu:0-29");
  BOOST_TEST(placement_string(resolve_placement("numa:0", 30)) == "numa:0:0-29");
  BOOST_TEST(placement_string(resolve_placement("{'cpu':1,'numa:0':1}", 30)) == "cpu:0-14 numa:0:15-29");
  BOOST_TEST(placement_string(resolve_placement("{\"cpu\": 3, \"numa:0\": 1}", 8)) == "cpu:0-5 numa:0:6-7");
  BOOST_TEST(placement_string(resolve_placement("{'cpu':1,'numa:0':100}", 4)) == "numa:0:0-3");  // a share under one layer
  auto error_of = [](const std::string& spec) {
    try {
      resolve_placement(spec, 10);
    } catch (const EngineError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  BOOST_TEST(error_of("cuda:0").find("is not available") != std::string::npos);
  BOOST_TEST(error_of("numa:99").find("names no NUMA node") != std::string::npos);
  BOOST_TEST(error_of("{'cpu':1,'numa':1}").find("place layers on one node with numa:N") != std::string::npos);
  BOOST_TEST(error_of("gpu").find("is unknown") != std::string::npos);
  BOOST_TEST(error_of("{'cpu':0}").find("positive weight") != std::string::npos);
  BOOST_TEST(error_of("{'cpu' 1}").find("needs DEVICE:WEIGHT") != std::string::npos);
  BOOST_TEST(error_of("{'cpu':1").find("closing }") != std::string::npos);
}

// fastllm's NUMA mode: every layer over all nodes with rows split; on one node it is plain cpu, said once.
BOOST_AUTO_TEST_CASE(numa_mode_spans_all_nodes_or_runs_as_cpu) {
  std::string note;
  const std::string placed = placement_string(resolve_placement("numa", 30, &note));
  if (cpu::numa_nodes_with_cpus().size() > 1) {
    BOOST_TEST(placed == "numa:0-29");
    BOOST_TEST(note.empty());
  } else {
    BOOST_TEST(placed == "cpu:0-29");
    BOOST_TEST(note == "--device numa: this machine has one NUMA node, so the model runs as --device cpu");
  }
}
