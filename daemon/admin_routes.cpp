// Routes on the admin Unix socket (ftllmctl, curl --unix-socket). Never mounted on TCP.
#include <unistd.h>

#include "json_writer.h"
#include "routes.h"

namespace ftllm::daemon {

namespace {

http::Response status(const Engine& engine, const DaemonInfo& info) {
  double uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - info.started).count();
  DeviceReport devices = engine.devices();
  JsonWriter w;
  w.begin_object();
  w.key("version").string(engine_version());
  w.key("pid").number(int64_t(getpid()));
  w.key("uptime_seconds").number(uptime);
  w.key("listen").string(info.listen_address);
  w.key("admin_socket").string(info.admin_socket);
  w.key("cuda_built").boolean(engine.cuda_built());
  w.key("devices").begin_array();
  for (const DeviceInfo& d : devices.devices) {
    w.begin_object();
    w.key("id").string(d.id).key("name").string(d.name);
    w.key("total_bytes").number(d.total_bytes).key("free_bytes").number(d.free_bytes);
    w.end_object();
  }
  w.end_array();
  w.key("notes").begin_array();
  for (const std::string& n : devices.notes) w.string(n);
  w.end_array();
  w.key("models").begin_array();
  for (const ModelInfo& m : engine.models()) {
    w.begin_object();
    w.key("name").string(m.name).key("source").string(m.source).key("architecture").string(m.architecture);
    if (auto handle = engine.model(m.name)) {
      ModelHandle::Load load = handle->load();
      w.key("requests_running").number(uint64_t(load.running)).key("requests_waiting").number(uint64_t(load.waiting));
      w.key("kv_blocks_used").number(load.kv_blocks_used).key("kv_blocks_total").number(load.kv_blocks_total);
      w.key("context_length").number(handle->context_length());
    }
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return http::Response{200, "application/json", {}, w.take()};
}

}  // namespace

void add_admin_routes(http::Router& router, const Engine& engine, const DaemonInfo& info) {
  router.add("GET", "/admin/v1/status", [&engine, &info](const http::Request&) { return status(engine, info); });
}

}  // namespace ftllm::daemon
