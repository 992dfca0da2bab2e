// fastllm's --device syntax resolved to layer ranges.
#include <boost/test/unit_test.hpp>

#include "../common/exact_options.h"
#include "core/error.h"
#include "cpu/numa_topology.h"
#include "runner/model_instance.h"
#include "runner/placement.h"

using namespace ftllm;

namespace {
int cuda_count() {
  try {
    return int(Placement::parse("cuda", 1).ranges().size());
  } catch (const EngineError&) {
    return 0;
  }
}
}  // namespace

BOOST_AUTO_TEST_CASE(device_specs_resolve_to_layer_ranges) {
  BOOST_TEST(Placement::parse("cpu", 30).to_string() == "cpu:0-29");
  BOOST_TEST(Placement::parse("", 30).to_string() == "cpu:0-29");
  BOOST_TEST(Placement::parse("numa:0", 30).to_string() == "numa:0:0-29");
  BOOST_TEST(Placement::parse("{'cpu':1,'numa:0':1}", 30).to_string() == "cpu:0-14 numa:0:15-29");
  BOOST_TEST(Placement::parse("{\"cpu\": 3, \"numa:0\": 1}", 8).to_string() == "cpu:0-5 numa:0:6-7");
  BOOST_TEST(Placement::parse("{'cpu':1,'numa:0':100}", 4).to_string() == "numa:0:0-3");  // a share under one layer
  auto error_of = [](const std::string& spec) {
    try {
      Placement::parse(spec, 10);
    } catch (const EngineError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  BOOST_TEST((error_of("cuda:0").find("is not available") != std::string::npos || cuda_count() > 0));
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
  const std::string placed = Placement::parse("numa", 30, &note).to_string();
  if (cpu::numa_nodes_with_cpus().size() > 1) {
    BOOST_TEST(placed == "numa:0-29");
    BOOST_TEST(note.empty());
  } else {
    BOOST_TEST(placed == "cpu:0-29");
    BOOST_TEST(note == "--device numa: this machine has one NUMA node, so the model runs as --device cpu");
  }
}

// GPUs in fastllm's spellings, resolved as for a machine with the given number of CUDA devices.
BOOST_AUTO_TEST_CASE(cuda_devices_resolve_to_layer_ranges) {
  auto placed = [](const std::string& spec, int gpus, int64_t layers = 28) {
    std::string note;
    std::string s = Placement::parse(spec, layers, &note, gpus).to_string();
    return note.empty() ? s : s + " | " + note;
  };
  auto error_of = [](const std::string& spec, int gpus) {
    try {
      Placement::parse(spec, 28, nullptr, gpus);
    } catch (const EngineError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  BOOST_TEST(placed("cuda", 1) == "cuda:0:0-27");
  BOOST_TEST(placed("cuda:1", 2) == "cuda:1:0-27");
  BOOST_TEST(placed("{'cuda:0':3,'cpu':1}", 1) == "cuda:0:0-20 cpu:21-27");
  BOOST_TEST(placed("{'cpu':1,'cuda':1}", 1) == "cpu:0-13 cuda:0:14-27");
  BOOST_TEST(placed("cudapp=2", 2) == "cuda:0:0-13 cuda:1:14-27");
  BOOST_TEST(placed("cudapp=1:3", 2) == "cuda:0:0-6 cuda:1:7-27");
  BOOST_TEST(placed("multicuda:0", 1) == "cuda:0:0-27 | --device multicuda:0: tensor parallelism over one device is cuda:0");
  BOOST_TEST(placed("{'multicuda:0':1,'cpu':1}", 1) ==
             "cuda:0:0-13 cpu:14-27 | --device multicuda:0: tensor parallelism over one device is cuda:0");
  BOOST_TEST(placed("multicuda", 1) == "cuda:0:0-27 | --device multicuda: tensor parallelism over one device is cuda:0");
  BOOST_TEST(placed("multicuda:0,1", 2) == "multi:cuda:0=1,cuda:1=1:0-27");
  BOOST_TEST(placed("multicuda:0:4,1:5,cpu:1", 2) == "multi:cuda:0=4,cuda:1=5,cpu=1:0-27");
  BOOST_TEST(placed("{'multicuda:0,1':3,'cuda:1':1}", 2) == "multi:cuda:0=1,cuda:1=1:0-20 cuda:1:21-27");
  BOOST_TEST(placed("multicuda", 2) == "multi:cuda:0=1,cuda:1=1:0-27");
  BOOST_TEST(placed("multicuda:cpu,cpu", 0) == "multi:cpu=1,cpu=1:0-27");
  const auto shards = Placement::parse("multicuda:0:4,1:5,cpu:1", 28, nullptr, 2).ranges()[0].device.shards;
  BOOST_REQUIRE_EQUAL(shards.size(), 3u);
  BOOST_TEST(shards[1].device.name() == "cuda:1");
  BOOST_TEST(shards[2].share == 1.0);
  BOOST_TEST(Placement::parse("cuda:0", 28, nullptr, 2).ranges()[0].device.shards.empty());
  BOOST_TEST(error_of("multicuda:0,2", 2).find("names no CUDA device") != std::string::npos);
  BOOST_TEST(error_of("multicuda:0:x,1", 2).find("needs a positive share") != std::string::npos);
  BOOST_TEST(error_of("cuda:1", 1).find("names no CUDA device of this machine (it has 1: cuda:0..cuda:0)") != std::string::npos);
  BOOST_TEST(error_of("cuda:x", 1).find("needs a GPU number") != std::string::npos);
  BOOST_TEST(error_of("cuda", 0).find("is not available") != std::string::npos);
  BOOST_TEST(placed("multicuda:0,cpu", 1) == "multi:cuda:0=1,cpu=1:0-27");
  BOOST_TEST(error_of("multicuda:0,gpu", 1).find("is not a GPU number or cpu") != std::string::npos);
  BOOST_TEST((Placement::parse("cuda:3", 28, nullptr, 4).ranges()[0].device.compute_device() == Device::cuda(3)));
  BOOST_TEST(!Placement::parse("cpu", 28, nullptr, 4).ranges()[0].device.compute_device().is_cuda());
  BOOST_TEST(!Placement::parse("numa:0", 28, nullptr, 4).ranges()[0].device.compute_device().is_cuda());
}

// Status reports bytes per device; on the CPU alone everything is the host's.
BOOST_AUTO_TEST_CASE(memory_is_reported_per_device) {
  ModelLoadOptions o = test::exact_options();
  o.path = std::string(FTLLM_SOURCE_ROOT) + "/tests/data/models/qwen3-f32";
  o.threads = 1;
  o.context_length = 64;
  o.max_sequences = 2;
  auto m = ModelInstance::load(o);
  const auto memory = m->memory_by_device();
  BOOST_REQUIRE_EQUAL(memory.size(), 1u);
  BOOST_TEST(memory[0].device == "cpu");
  BOOST_TEST(memory[0].weight_bytes == m->model().weight_bytes());
  BOOST_TEST(memory[0].kv_bytes == m->kv_bytes());
}
