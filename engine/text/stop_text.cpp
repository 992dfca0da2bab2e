#include "stop_text.h"

#include <algorithm>
#include <utility>

namespace ftllm::text {

std::string StopText::push(const std::string& text) {
  if (stopped_) return {};
  pending_ += text;
  size_t first = std::string::npos;
  for (const std::string& s : stops_)
    if (!s.empty()) first = std::min(first, pending_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail of pending that begins some stop string.
  size_t hold = 0;
  for (const std::string& s : stops_)
    for (size_t n = s.empty() ? 0 : std::min(s.size() - 1, pending_.size()); n > hold; --n)
      if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopText::flush() {
  if (stopped_) return {};
  return std::exchange(pending_, {});
}

}  // namespace ftllm::text
