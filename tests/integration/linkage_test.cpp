// The binaries really link the libraries the design chose (ldd for shared ones, symbols for static ones).
#include <boost/test/unit_test.hpp>

#include "daemon_process.h"

using namespace ftllm::test;

namespace {
bool links(const std::string& binary, const std::string& library) {
  CommandResult r = run_command("ldd " + binary);
  BOOST_REQUIRE_EQUAL(r.exit_code, 0);
  return r.out.find(library) != std::string::npos;
}
bool has_symbol(const std::string& binary, const std::string& symbol) {
  return run_command("nm " + binary + " | grep -q " + symbol).exit_code == 0;
}
}  // namespace

BOOST_AUTO_TEST_CASE(ftllmd_links_its_libraries) {
  std::string d = env_or_fail("FTLLMD");
  BOOST_TEST(links(d, "libuv.so"));
  BOOST_TEST(links(d, "libsystemd.so"));
  BOOST_TEST(links(d, "libnuma.so"));
  BOOST_TEST(links(d, "libtomlplusplus.so"));
  BOOST_TEST(has_symbol(d, "llhttp_execute"));  // static: Debian ships llhttp as C sources
#ifdef FTLLM_WITH_CUDA
  BOOST_TEST(has_symbol(d, "cudaGetDeviceCount"));  // cudart static: only the driver is needed at run time
  BOOST_TEST(!links(d, "libcublas"));  // loaded when a GPU computes, so the daemon starts without it
  BOOST_TEST(!links(d, "libnccl"));
#endif
}

BOOST_AUTO_TEST_CASE(ftllmctl_links_its_libraries) {
  std::string c = env_or_fail("FTLLMCTL");
  BOOST_TEST(links(c, "libsimdjson.so"));
  BOOST_TEST(has_symbol(c, "llhttp_execute"));
  BOOST_TEST(!links(c, "libuv.so"));  // the client stays small and blocking
  BOOST_TEST(!links(c, "libnuma.so"));  // and links no engine: export is ftllm-export's
  BOOST_TEST(!has_symbol(c, "export_model"));
  BOOST_TEST(has_symbol(env_or_fail("FTLLM_EXPORT"), "export_model"));
}
