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

}  // namespace ftllm::client
