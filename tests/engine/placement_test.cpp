// fastllm's --device syntax resolved to layer ranges.
#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "placement.h"

using namespace ftllm;

BOOST_AUTO_TEST_CASE(device_specs_resolve_to_layer_ranges) {
  BOOST_TEST(placement_string(resolve_placement("cpu", 30)) == "cpu:0-29");
  BOOST_TEST(placement_string(resolve_placement("", 30)) == "cpu:0-29");
  BOOST_TEST(placement_string(resolve_placement("numa", 30)) == "numa:0:0-29");
  BOOST_TEST(placement_string(resolve_placement("{'cpu':1,'numa:0':1}", 30)) == "cpu:0-14 numa:0:15-29");
  BOOST_TEST(placement_string(resolve_placement("{\"cpu\": 3, \"numa\": 1}", 8)) == "cpu:0-5 numa:0:6-7");
  BOOST_TEST(placement_string(resolve_placement("{'cpu':1,'numa':100}", 4)) == "numa:0:0-3");  // a share under one layer
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
  BOOST_TEST(error_of("gpu").find("is unknown") != std::string::npos);
  BOOST_TEST(error_of("{'cpu':0}").find("positive weight") != std::string::npos);
  BOOST_TEST(error_of("{'cpu' 1}").find("needs DEVICE:WEIGHT") != std::string::npos);
  BOOST_TEST(error_of("{'cpu':1").find("closing }") != std::string::npos);
}
