// The daemon with a GPU, as users meet it: ftllmctl loads a model onto cuda, status shows the bytes per
// device, a completion streams while ftllmctl rebalances the layers between cuda and cpu, and the text is
// the one an unmoved model gives. Skipped, with the reason, where the daemon sees no GPU.
#include <simdjson.h>

#include <boost/test/unit_test.hpp>
#include <thread>

#include "daemon_process.h"

using namespace ftllm::test;

namespace {

std::string ctl(const DaemonProcess& d, const std::string& args) {
  return env_or_fail("FTLLMCTL") + " --socket " + d.socket_path() + " " + args;
}

// Whether the daemon reports a CUDA device (asks a daemon of its own).
struct DaemonSeesGpu {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) {
    TempDir dir;
    DaemonProcess d(dir);
    simdjson::dom::parser p;
    bool gpu = false;
    const std::string status = run_command(ctl(d, "status --json")).out;
    simdjson::dom::element doc;
    if (!p.parse(status).get(doc))
      for (auto dev : doc["devices"].get_array()) gpu |= std::string_view(dev["id"]).starts_with("cuda:");
    boost::test_tools::assertion_result r(gpu);
    r.message() << "the daemon sees no CUDA device";
    return r;
  }
};

std::string text_of(const std::string& completion) {
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  if (p.parse(completion).get(doc)) return "not JSON: " + completion;
  return std::string(std::string_view(doc["choices"].at(0)["text"]));
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_model_on_the_gpu_serves_and_moves_live, *boost::unit_test::precondition(DaemonSeesGpu())) {
  TempDir dir;
  DaemonProcess d(dir);
  const std::string model = std::string(FTLLM_SOURCE_ROOT) + "/tests/data/models/qwen3-f32";
  CommandResult cpu = run_command(ctl(d, "load " + model + " --name here -t 2 --ctx 256"));
  BOOST_REQUIRE_MESSAGE(cpu.exit_code == 0, cpu.err);
  CommandResult gpu = run_command(ctl(d, "load " + model + " --name there -t 2 --ctx 256 --device cuda"));
  BOOST_REQUIRE_MESSAGE(gpu.exit_code == 0, gpu.err);
  simdjson::dom::parser p;
  const std::string status = run_command(ctl(d, "status there --json")).out;
  simdjson::dom::element m = p.parse(status)["models"].at(0);
  BOOST_TEST(std::string_view(m["placement"].at(0)["device"]) == "cuda:0", status);
  BOOST_TEST(int64_t(m["memory"]["cuda:0"]["weight_bytes"]) > 0, status);

  auto complete = [&](const std::string& name) {
    return text_of(run_command("curl -s --max-time 120 -d '{\"model\": \"" + name +
                               "\", \"prompt\": [5, 17, 33, 102, 7], \"max_tokens\": 48, \"temperature\": 0, \"ignore_eos\": true}' " +
                               d.base_url() + "/v1/completions")
                       .out);
  };
  const std::string want = complete("here");
  BOOST_TEST(complete("there") == want);
  // Rebalanced while a completion runs: cuda -> split -> cpu -> cuda.
  std::string during;
  std::jthread request([&] { during = complete("there"); });
  for (const char* spec : {"\"{'cuda:0':1,'cpu':1}\"", "cpu", "cuda"}) {
    CommandResult r = run_command(ctl(d, std::string("rebalance there --device ") + spec));
    BOOST_TEST(r.exit_code == 0, r.err);
  }
  request.join();
  BOOST_TEST(during == want);
  BOOST_TEST(run_command(ctl(d, "list")).out.find("cuda:0:0-") != std::string::npos, run_command(ctl(d, "list")).out);
  BOOST_TEST(run_command(ctl(d, "unload there")).exit_code == 0);
}
