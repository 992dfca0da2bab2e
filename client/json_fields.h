// Reading fields of the daemon's JSON replies, with a fallback when a field is absent.
#pragma once

#include <simdjson.h>

#include "admin_wire.h"
#include "core/json_writer.h"

#include <string>
#include <string_view>

namespace ftllm::client {

template <typename T>
T field(simdjson::dom::element e, const char* key, T fallback = {}) {
  T value;
  return e[key].get(value) == simdjson::SUCCESS ? value : fallback;
}

// A model's placement as the tables show it: "cpu:0-11 numa:1:12-23".
inline std::string placement_text(simdjson::dom::element model) {
  std::string text;
  simdjson::dom::array places;
  if (model[admin::key::placement].get(places) == simdjson::SUCCESS)
    for (auto p : places)
      text += (text.empty() ? "" : " ") + std::string(field<std::string_view>(p, admin::key::device)) + ":" +
              std::string(field<std::string_view>(p, admin::key::layers));
  return text;
}

// A model's compute threads as the tables show them: "2", or "1 of 2" while other processes leave cores
// for only some of them.
inline std::string threads_text(simdjson::dom::element model) {
  const int64_t threads = field<int64_t>(model, admin::key::threads), active = field<int64_t>(model, admin::key::threads_active, threads);
  return active > 0 && active < threads ? std::to_string(active) + " of " + std::to_string(threads) : std::to_string(threads);
}

}  // namespace ftllm::client
