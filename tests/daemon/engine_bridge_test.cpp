// The bridge from other threads to the event loop: tasks run there in order, and one that throws is
// logged without crossing libuv, and the rest still run.
#include <uv.h>

#include <boost/test/unit_test.hpp>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine_bridge.h"

using namespace ftllm::daemon;

BOOST_AUTO_TEST_CASE(a_task_that_throws_does_not_stop_the_loop) {
  uv_loop_t loop;
  BOOST_REQUIRE_EQUAL(uv_loop_init(&loop), 0);
  std::vector<int> ran;
  {
    EngineBridge bridge(&loop);
    std::thread other([&] {
      bridge.post([&] { ran.push_back(1); });
      bridge.post([] { throw std::runtime_error("a broken task"); });
      bridge.post([&] { ran.push_back(3); });
    });
    other.join();
    for (int i = 0; i < 100 && ran.size() < 2; ++i) uv_run(&loop, UV_RUN_NOWAIT);
    bridge.close();
  }
  uv_run(&loop, UV_RUN_DEFAULT);  // the bridge's handle closes
  BOOST_TEST(ran == std::vector<int>({1, 3}), boost::test_tools::per_element());
  BOOST_TEST(uv_loop_close(&loop) == 0);
}
