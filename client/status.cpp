// ftllmctl status [NAME]: the daemon, its devices and its models.
#include <simdjson.h>

#include <cstdio>
#include <string>
#include <string_view>

#include "admin_wire.h"
#include "commands.h"
#include "json_fields.h"
#include "table.h"

namespace ftllm::client {

namespace {

// Prints an error reply from the daemon (OpenAI's error envelope) or the raw body.
void print_daemon_error(const AdminReply& reply) {
  simdjson::dom::parser parser;
  std::string_view message;
  simdjson::padded_string body(reply.body);
  if (parser.parse(body)["error"]["message"].get(message) == simdjson::SUCCESS)
    std::fprintf(stderr, "ftllmctl: ftllmd answered %d: %.*s\n", reply.status, int(message.size()), message.data());
  else
    std::fprintf(stderr, "ftllmctl: ftllmd answered %d: %s\n", reply.status, reply.body.c_str());
}

}  // namespace

int cmd_status(const CommandContext& ctx, const std::vector<std::string>& args) {
  if (args.size() > 1) {
    std::fprintf(stderr, "ftllmctl: status takes at most one model name\n");
    return 2;
  }
  AdminReply reply;
  AdminFailure failure;
  if (!ctx.client.call("GET", admin::kStatusPath, "", reply, failure)) {
    std::fprintf(stderr, "ftllmctl: %s\n", failure.message.c_str());
    return failure.not_running ? 3 : 4;
  }
  if (reply.status != 200) {
    print_daemon_error(reply);
    return 1;
  }

  simdjson::dom::parser parser;
  simdjson::padded_string body(reply.body);
  simdjson::dom::element doc;
  if (parser.parse(body).get(doc) != simdjson::SUCCESS) {
    std::fprintf(stderr, "ftllmctl: ftllmd sent a status that is not JSON\n");
    return 1;
  }
  simdjson::dom::array models;
  if (doc[admin::key::models].get_array().get(models) != simdjson::SUCCESS) {
    std::fprintf(stderr, "ftllmctl: ftllmd's status has no models list\n");
    return 1;
  }
  if (args.size() == 1) {
    bool found = false;
    for (auto m : models) found |= field<std::string_view>(m, admin::key::name) == args[0];
    if (!found) {
      std::fprintf(stderr, "ftllmctl: no model named \"%s\" is loaded (loaded: %zu)\n", args[0].c_str(),
                   models.size());
      return 1;
    }
  }
  if (ctx.json) {
    if (args.empty()) {
      std::printf("%s\n", reply.body.c_str());
      return 0;
    }
    // The same document with only the named model in its list, as the table below shows only it.
    std::string out = "{";
    for (auto [key, value] : doc.get_object()) {
      if (out.size() > 1) out += ',';
      out += '"';
      out += key;  // the daemon's keys are plain identifiers: nothing to escape
      out += "\":";
      if (key != "models") {
        out += simdjson::minify(value);
        continue;
      }
      out += '[';
      for (auto m : models)
        if (field<std::string_view>(m, admin::key::name) == args[0]) out += simdjson::minify(m);
      out += ']';
    }
    std::printf("%s}\n", out.c_str());
    return 0;
  }

  auto version = field<std::string_view>(doc, admin::key::version);
  auto listen = field<std::string_view>(doc, admin::key::listen);
  auto socket = field<std::string_view>(doc, admin::key::admin_socket);
  auto pid = field<int64_t>(doc, admin::key::pid);
  auto uptime = field<double>(doc, admin::key::uptime_seconds);
  std::printf("ftllmd %.*s, pid %lld, up %s\n", int(version.size()), version.data(), (long long)pid,
              format_duration(uptime).c_str());
  std::printf("OpenAI API: http://%.*s\nadmin API:  %.*s\n\n", int(listen.size()), listen.data(), int(socket.size()),
              socket.data());

  Table devices({"DEVICE", "NAME", "TOTAL", "FREE"});
  simdjson::dom::array device_list;
  if (doc[admin::key::devices].get_array().get(device_list) == simdjson::SUCCESS) {
    for (auto d : device_list) {
      devices.add({std::string(field<std::string_view>(d, admin::key::id)), std::string(field<std::string_view>(d, admin::key::name)),
                   format_bytes(double(field<uint64_t>(d, admin::key::total_bytes))),
                   format_bytes(double(field<uint64_t>(d, admin::key::free_bytes)))});
    }
  }
  std::fputs(devices.render().c_str(), stdout);
  simdjson::dom::array notes;
  if (doc[admin::key::notes].get_array().get(notes) == simdjson::SUCCESS)
    for (auto n : notes) {
      std::string_view text;
      if (n.get(text) == simdjson::SUCCESS) std::printf("note: %.*s\n", int(text.size()), text.data());
    }

  std::printf("\n");
  if (models.size() == 0) {
    std::printf("models: none loaded\n");
    return 0;
  }
  Table model_table({"MODEL", "ARCHITECTURE", "LAYERS", "PARAMS", "DTYPES", "PLACEMENT", "THREADS", "KERNELS", "WEIGHTS", "KV", "CACHED PAGES", "RUNNING", "TOK/S", "SOURCE"});
  for (auto m : models) {
    auto name = field<std::string_view>(m, admin::key::name);
    auto arch = field<std::string_view>(m, admin::key::architecture);
    auto source = field<std::string_view>(m, admin::key::source);
    char params[32], tps[32];
    std::snprintf(params, sizeof params, "%.1fM", double(field<uint64_t>(m, admin::key::parameters)) / 1e6);
    std::snprintf(tps, sizeof tps, "%.1f", field<double>(m, admin::key::tokens_per_second));
    std::string placement = placement_text(m);
    // Summed over the devices the model is on (PLACEMENT says which).
    simdjson::dom::object mem;
    uint64_t weights = 0, kv = 0;
    if (!m[admin::key::memory].get(mem))
      for (auto [device, use] : mem) weights += field<uint64_t>(use, admin::key::weight_bytes), kv += field<uint64_t>(use, admin::key::kv_bytes);
    // Pages kept for reuse by the prefix cache, and the share of prompt tokens found there.
    std::string cached = "off";
    if (field<std::string_view>(m, admin::key::prefix_cache) != "off") {
      const uint64_t queries = field<uint64_t>(m, admin::key::prefix_cache_queries);
      cached = std::to_string(field<int64_t>(m, admin::key::kv_blocks_cached));
      if (queries) cached += " (" + std::to_string(field<uint64_t>(m, admin::key::prefix_cache_hits) * 100 / queries) + "% hit)";
    }
    if (args.empty() || name == args[0])
      model_table.add({std::string(name), std::string(arch), std::string(field<std::string_view>(m, admin::key::layer_kinds)), params, std::string(field<std::string_view>(m, admin::key::dtypes)), placement,
                       threads_text(m), std::string(field<std::string_view>(m, admin::key::kernels, "-")),
                       format_bytes(double(weights)), format_bytes(double(kv)) + " " + std::string(field<std::string_view>(m, admin::key::kv_dtype)), cached, std::to_string(field<int64_t>(m, admin::key::requests_running)),
                       tps, std::string(source)});
  }
  std::fputs(model_table.render().c_str(), stdout);
  Table adapter_table({"ADAPTER", "BASE", "RANK", "TARGETS", "SIZE", "RUNNING", "SOURCE"});
  for (auto m : models) {
    auto base = field<std::string_view>(m, admin::key::name);
    simdjson::dom::array adapters, running;
    if (m[admin::key::adapters].get(adapters) || (!args.empty() && base != args[0])) continue;
    for (auto a : adapters) {
      auto name = field<std::string_view>(a, admin::key::name);
      bool is_running = false;
      if (!m[admin::key::running_adapters].get(running))
        for (auto r : running) is_running |= r.get_string().value_unsafe() == name;
      adapter_table.add({std::string(name), std::string(base), std::to_string(field<int64_t>(a, admin::key::rank)),
                         std::string(field<std::string_view>(a, admin::key::targets)), format_bytes(double(field<uint64_t>(a, admin::key::bytes))),
                         is_running ? "yes" : "no", std::string(field<std::string_view>(a, admin::key::path))});
    }
  }
  if (adapter_table.rows() > 0) std::printf("\n%s", adapter_table.render().c_str());
  return 0;
}

const RegisteredCommand status_command({10, "status", [] {
  return std::string("  status [NAME]                 the daemon, its devices and resident models\n");
}, &cmd_status});

}  // namespace ftllm::client
