// The systemd unit: systemd's own verifier accepts it, and meson install puts it where systemd looks.
#define BOOST_TEST_MODULE systemd
#include <sys/wait.h>

#include <boost/test/unit_test.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  BOOST_REQUIRE_MESSAGE(v && *v, std::string(name) + " is not set (run through meson test)");
  return v;
}

struct Run {
  int exit_code;
  std::string output;
};

Run run(const std::string& command) {
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  BOOST_REQUIRE(p);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  BOOST_REQUIRE_MESSAGE(in, "cannot read " + path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

BOOST_AUTO_TEST_CASE(unit_passes_systemd_analyze_verify) {
  // The build-tree copy differs only in ExecStart's directory, which verify checks for an executable.
  Run r = run("systemd-analyze verify " + env("FTLLMD_UNIT_FOR_TEST"));
  BOOST_TEST(r.exit_code == 0);
  BOOST_TEST(r.output == "", "systemd-analyze said:\n" << r.output);
}

BOOST_AUTO_TEST_CASE(socket_unit_passes_verify_with_its_service) {
  char tmpl[] = "/tmp/ftllm-units-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::filesystem::copy_file(env("FTLLMD_UNIT_FOR_TEST"), dir + "/ftllmd.service");
  std::filesystem::copy_file(std::string(FTLLM_SOURCE_ROOT) + "/systemd/ftllmd.socket", dir + "/ftllmd.socket");
  Run r = run("systemd-analyze verify " + dir + "/ftllmd.socket " + dir + "/ftllmd.service");
  std::filesystem::remove_all(dir);
  BOOST_TEST(r.exit_code == 0);
  BOOST_TEST(r.output == "", "systemd-analyze said:\n" << r.output);
}

// The template for several instances on one host (deploy/haproxy): instance 1 reads ftllmd-1.conf and
// keeps its admin socket's directory apart.
BOOST_AUTO_TEST_CASE(instance_template_passes_verify) {
  char tmpl[] = "/tmp/ftllm-units-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  const std::string unit = std::filesystem::path(env("FTLLMD_UNIT_FOR_TEST")).parent_path() / "ftllmd@-build-tree.service";
  std::filesystem::copy_file(unit, dir + "/ftllmd@.service");
  Run r = run("systemd-analyze verify " + dir + "/ftllmd@1.service");
  std::filesystem::remove_all(dir);
  BOOST_TEST(r.exit_code == 0);
  BOOST_TEST(r.output == "", "systemd-analyze said:\n" << r.output);
  const std::string text = read_file(unit);
  BOOST_TEST(text.find("/ftllmd/ftllmd-%i.conf\n") != std::string::npos, text);
  BOOST_TEST(text.find("\nRuntimeDirectory=ftllmd-%i\n") != std::string::npos, text);
}

BOOST_AUTO_TEST_CASE(unit_exposure_is_low) {
  Run r = run("systemd-analyze security --offline=true " + env("FTLLMD_UNIT_FOR_TEST"));
  size_t at = r.output.find("Overall exposure level for");
  BOOST_REQUIRE_MESSAGE(at != std::string::npos, r.output);
  size_t colon = r.output.find(':', at);
  double exposure = std::stod(r.output.substr(colon + 1));
  BOOST_TEST_MESSAGE("systemd-analyze security exposure: " << exposure);
  BOOST_TEST(exposure <= 3.0, "exposure " << exposure);
}

BOOST_AUTO_TEST_CASE(unit_is_a_notify_service_with_the_config) {
  std::string unit = read_file(env("FTLLMD_UNIT"));
  BOOST_TEST(unit.find("\nType=notify\n") != std::string::npos);
  BOOST_TEST(unit.find("/bin/ftllmd --config /") != std::string::npos);
  BOOST_TEST(unit.find("/ftllmd/ftllmd.conf\n") != std::string::npos);
  BOOST_TEST(unit.find("\nRuntimeDirectory=ftllmd\n") != std::string::npos);
  BOOST_TEST(unit.find("ExecReload=/bin/kill -HUP $MAINPID") != std::string::npos);
  BOOST_TEST(unit.find("\nWatchdogSec=30s\n") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(meson_install_places_unit_binaries_and_config) {
  char tmpl[] = "/tmp/ftllm-install-XXXXXX";
  BOOST_REQUIRE(mkdtemp(tmpl));
  std::string dest = tmpl;
  Run r = run(env("MESON") + " install -C " + env("BUILD_ROOT") + " --no-rebuild --quiet --destdir " + dest);
  BOOST_TEST_REQUIRE(r.exit_code == 0, r.output);
  bool unit = false, instances = false, daemon = false, ctl = false, exporter = false, conf = false, sysusers = false,
       socket = false;
  for (auto& e : std::filesystem::recursive_directory_iterator(dest)) {
    std::string p = e.path().string();
    unit |= p.ends_with("/systemd/system/ftllmd.service");
    instances |= p.ends_with("/systemd/system/ftllmd@.service");
    daemon |= p.ends_with("/bin/ftllmd");
    ctl |= p.ends_with("/bin/ftllmctl");
    exporter |= p.ends_with("/bin/ftllm-export");  // beside ftllmctl, whose export runs it
    conf |= p.ends_with("/ftllmd/ftllmd.conf");
    sysusers |= p.ends_with("/sysusers.d/ftllm.conf");
    socket |= p.ends_with("/systemd/system/ftllmd.socket");
  }
  std::filesystem::remove_all(dest);
  BOOST_TEST(unit);
  BOOST_TEST(instances);
  BOOST_TEST(daemon);
  BOOST_TEST(ctl);
  BOOST_TEST(exporter);
  BOOST_TEST(conf);
  BOOST_TEST(sysusers);
  BOOST_TEST(socket);
}
