// The kernels built with AVX2 or AVX-512 flags (engine/meson.build's avx2 and vnni libraries) may only run
// after cpuid says the processor has them. Two ways their code escapes that check, both seen here: a
// static initializer in such a file (it runs at start-up: every program stopped with SIGILL on an AVX2-only
// Zen 3), and a library template instantiated in such a file (std::mt19937's generator was), a weak symbol
// the linker may pick for callers anywhere in the program. Read off the built libraries with binutils:
// no such function may hold a VEX or EVEX instruction (mnemonics v*, and k* on mask registers).
#include <boost/test/unit_test.hpp>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string run(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  BOOST_REQUIRE_MESSAGE(pipe, "cannot run " << command);
  char buffer[1 << 16];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  BOOST_REQUIRE_MESSAGE(pclose(pipe) == 0, command << " failed (binutils' nm and objdump are needed)");
  return out;
}

// tests/meson.build names the libraries, except in sanitized builds: instrumented, their library templates
// stay out of line (std::vector's growth, with VEX moves), and only the tests run those libraries.
struct IsaLibrariesNamed {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) {
    boost::test_tools::assertion_result r(std::getenv("FTLLM_ISA_LIBS") != nullptr);
    r.message() << "FTLLM_ISA_LIBS is not set (a sanitized build, or not run by meson test)";
    return r;
  }
};

std::vector<std::string> isa_libraries() {
  const std::string list = std::getenv("FTLLM_ISA_LIBS");
  std::vector<std::string> paths;
  std::istringstream in(list);
  for (std::string path; std::getline(in, path, ':');) paths.push_back(path);
  return paths;
}

// The mangled prefixes of the namespaces whose functions only the dispatched kernel tables call.
bool in_isa_namespace(const std::string& symbol) {
  for (const char* prefix : {"_ZN5ftllm3cpu4avx2", "_ZN5ftllm3cpu6avx512", "_ZN5ftllm3cpu10avx512vnni"})
    if (symbol.starts_with(prefix)) return true;
  return false;
}

// Function symbol -> how many VEX/EVEX instructions it holds, from `objdump -d`.
std::map<std::string, int> vector_instructions(const std::string& library) {
  std::map<std::string, int> count;
  std::istringstream in(run("objdump -d --no-show-raw-insn '" + library + "'"));
  std::string line, function;
  for (; std::getline(in, line);) {
    if (const size_t open = line.find(" <"); open != std::string::npos && line.ends_with(">:")) {
      function = line.substr(open + 2, line.size() - open - 4);
      count[function];
      continue;
    }
    // an instruction line: "  addr:\tmnemonic operands"
    const size_t tab = line.find(":\t");
    if (function.empty() || tab == std::string::npos) continue;
    const char first = line[tab + 2];
    if (first == 'v' || (first == 'k' && line.find("%k", tab) != std::string::npos)) ++count[function];
  }
  return count;
}

std::set<std::string> weak_functions(const std::string& library) {
  std::set<std::string> weak;
  std::istringstream in(run("nm --defined-only '" + library + "'"));
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string address, kind, name;
    if (fields >> address >> kind >> name && (kind == "W" || kind == "w")) weak.insert(name);
  }
  return weak;
}

}  // namespace

BOOST_AUTO_TEST_CASE(isa_flagged_code_runs_only_after_dispatch, *boost::unit_test::precondition(IsaLibrariesNamed())) {
  for (const std::string& library : isa_libraries()) {
    BOOST_TEST_CONTEXT(library) {
      const std::map<std::string, int> vectors = vector_instructions(library);
      const std::set<std::string> weak = weak_functions(library);
      int dispatched = 0;
      for (const auto& [function, n] : vectors) {
        if (in_isa_namespace(function)) {
          dispatched += n > 0;
          continue;
        }
        const bool at_start_up = function.starts_with("_GLOBAL__sub_I_") || function.find("module_ctor") != std::string::npos;
        if (at_start_up || weak.contains(function))
          BOOST_TEST(n == 0, function << (at_start_up ? " runs at start-up" : " is a weak symbol other code may bind to")
                                      << " and holds " << n << " VEX/EVEX instructions");
      }
      // The parse itself works: the kernels' own functions hold such instructions.
      BOOST_TEST(dispatched > 0, "no vector instructions found in " << library << "'s kernels: objdump's output not understood");
    }
  }
}
