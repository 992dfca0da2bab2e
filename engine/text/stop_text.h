// Stop strings over streamed text: text is released only when it cannot be the start of a stop string,
// so a stop string never leaks into the output, even split across stream chunks.
#pragma once

#include <string>
#include <vector>

namespace ftllm::text {

class StopText {
 public:
  explicit StopText(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Adds generated text; returns what may be sent now. Once a stop string appears, `stopped()` turns
  // true and only the text before it is ever returned.
  std::string push(const std::string& text);
  // The text held back, at the end of generation (nothing after a stop).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace ftllm::text
