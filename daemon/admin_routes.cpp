// Routes on the admin Unix socket (ftllmctl, curl --unix-socket). Never mounted on TCP.
#include <unistd.h>

#include <simdjson.h>

#include <chrono>
#include <optional>

#include "admin_wire.h"
#include "core/json_writer.h"
#include "log.h"
#include "admin_routes.h"

namespace ftllm::daemon {

namespace {

void model_json(JsonWriter& w, const Engine& engine, const ModelInfo& m) {
  w.begin_object();
  w.key(admin::key::name).string(m.name).key(admin::key::source).string(m.source).key(admin::key::architecture).string(m.architecture);
  w.key(admin::key::layer_kinds).string(m.layers);
  if (auto handle = engine.model(m.name)) {
    ModelHandle::Load load = handle->load();
    w.key(admin::key::requests_running).number(uint64_t(load.running)).key(admin::key::requests_waiting).number(uint64_t(load.waiting));
    w.key(admin::key::kv_blocks_used).number(load.kv_blocks_used).key(admin::key::kv_blocks_total).number(load.kv_blocks_total);
    w.key(admin::key::kv_blocks_cached).number(load.kv_blocks_cached);
    w.key(admin::key::prefix_cache).string(load.prefix_cache ? "on" : "off");
    w.key(admin::key::prefix_cache_queries).number(load.prefix_cache_queries);
    w.key(admin::key::prefix_cache_hits).number(load.prefix_cache_hits).key(admin::key::preemptions).number(load.preemptions);
    w.key(admin::key::context_length).number(handle->context_length()).key(admin::key::threads).number(load.threads);
    w.key(admin::key::threads_active).number(load.threads_active).key(admin::key::kernels).string(load.kernels);
    w.key(admin::key::tokens_per_second).number(load.tokens_per_second);
    ModelHandle::Footprint f = handle->footprint();
    w.key(admin::key::parameters).number(f.parameters).key(admin::key::dtypes).string(f.dtypes);
    w.key(admin::key::kv_dtype).string(f.kv_dtype);
    // "cpu:0-14 numa:0:15-29" as [{"device": "cpu", "layers": "0-14"}, ...]
    w.key(admin::key::placement).begin_array();
    std::string placement = handle->placement();
    for (size_t start = 0; start < placement.size();) {
      size_t space = placement.find(' ', start);
      std::string part = placement.substr(start, space == std::string::npos ? std::string::npos : space - start);
      start = space == std::string::npos ? placement.size() : space + 1;
      size_t colon = part.rfind(':');
      w.begin_object().key(admin::key::device).string(part.substr(0, colon)).key(admin::key::layers).string(part.substr(colon + 1)).end_object();
    }
    w.end_array();
    // Weights as bound (mapped files count where used in place) and the KV pool as reserved, per device.
    w.key(admin::key::memory).begin_object();
    for (const auto& m : f.memory)
      w.key(m.device).begin_object().key(admin::key::weight_bytes).number(m.weight_bytes).key(admin::key::kv_bytes).number(m.kv_bytes).end_object();
    w.end_object();
    w.key(admin::key::adapters).begin_array();
    for (const ModelHandle::Adapter& a : handle->adapters()) {
      w.begin_object().key(admin::key::name).string(a.name).key(admin::key::path).string(a.path);
      w.key(admin::key::rank).number(int64_t(a.rank)).key(admin::key::targets).string(a.targets).key(admin::key::bytes).number(a.bytes);
      w.end_object();
    }
    w.end_array();
    w.key(admin::key::max_loras).number(int64_t(load.max_loras));
    for (auto [key, names] : {std::pair{admin::key::running_adapters, &load.running_adapters}, {admin::key::waiting_adapters, &load.waiting_adapters}}) {
      w.key(key).begin_array();
      for (const std::string& n : *names) w.string(n);
      w.end_array();
    }
  }
  w.end_object();
}

http::Response admin_error(int status, const std::string& message, const std::string& code) {
  return http::json_error(status, message, "invalid_request_error", code);
}

// A load body's options, read through the load option table: each key of it, of that option's JSON type
// and in its range. Returns the error to answer with, or nothing.
std::optional<http::Response> read_load_options(simdjson::dom::object body, ModelLoadOptions& o) {
  for (auto [key, value] : body) {
    if (key == admin::key::model) {
      std::string_view path;
      if (value.get(path)) return admin_error(400, "\"model\" is the model's path, a string", "missing_model");
      o.path = path;
      continue;
    }
    const LoadOption* option = load_option_by_key(key);
    if (!option || !(option->surfaces & kAdmin)) {
      std::string known = admin::key::model;
      for (const LoadOption& k : load_options())
        if (k.surfaces & kAdmin) known += std::string(", ") + k.key;
      return admin_error(400, "unknown load option \"" + std::string(key) + "\"; known: " + known, "unknown_option");
    }
    std::string why = option->what;
    std::string_view text;
    int64_t integer = 0;
    double number = 0;
    bool flag = false;
    if (!value.get(text)) why = option->set(o, text);
    else if (!value.get(integer)) why = option->set(o, integer);
    else if (!value.get(number)) why = option->set(o, number);
    else if (!value.get(flag)) why = option->set(o, flag);
    if (!why.empty())
      return admin_error(400, "\"" + std::string(key) + "\" is " + why + ", not " + simdjson::minify(value),
                         "invalid_" + std::string(key));
  }
  if (o.path.empty()) return admin_error(400, "\"model\" (a path) is required", "missing_model");
  return std::nullopt;
}

// POST /admin/v1/models {"model": PATH, and any load option by its key}: answers with newline-delimited
// JSON: {"event":"loading",...} now, then {"event":"loaded",...} or {"event":"error","message":...} when
// the load (on its own thread) ends.
void load_model(const std::shared_ptr<http::Exchange>& ex, Engine& engine, EngineBridge& bridge) {
  simdjson::dom::parser parser;
  simdjson::padded_string text(ex->request().body);
  simdjson::dom::object body;
  if (parser.parse(text).get(body))
    return ex->respond(admin_error(400, "the body must be a JSON object with \"model\": PATH", "invalid_json"));
  ModelLoadOptions o;
  if (auto error = read_load_options(body, o)) return ex->respond(*error);
  const std::string name = o.name.empty() ? o.path : o.name;
  if (!o.name.empty() && engine.model(o.name))
    return ex->respond(admin_error(409, "a model named " + o.name + " is already loaded; unload it first or pick another --name", "name_taken"));

  ex->begin_stream(200, "application/x-ndjson");
  JsonWriter w;
  w.begin_object().key(admin::key::event).string(admin::event::loading).key(admin::key::model).string(o.path).key(admin::key::name).string(name).end_object();
  ex->send(w.take() + "\n");
  auto status = std::make_shared<Status>();
  auto started = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
  // Progress lines, at most one per phase and per 5% of bytes, go out through the bridge as they happen.
  auto last = std::make_shared<std::pair<std::string, uint64_t>>();
  o.progress = [&bridge, ex, last](const std::string& phase, uint64_t done, uint64_t total) {
    uint64_t step = total ? done * 20 / total : 0;
    if (phase == last->first && step == last->second) return;
    *last = {phase, step};
    JsonWriter w;
    w.begin_object().key(admin::key::event).string(admin::event::progress).key(admin::key::phase).string(phase);
    w.key(admin::key::bytes_done).number(done).key(admin::key::bytes_total).number(total).end_object();
    bridge.post([ex, line = w.take()] { ex->send(line + "\n"); });
  };
  auto loaded_name = std::make_shared<std::string>();
  bridge.run_in_background([&engine, o, status, loaded_name] { *status = engine.load(o, loaded_name.get()); },
                           [&engine, ex, status, started, loaded_name] {
                             JsonWriter done;
                             const std::string& name = *loaded_name;  // as list, status and /metrics call it
                             if (status->ok) {
                               // Fractional: a tiny model loads in under a millisecond, which is not "0 ms".
                               const std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - *started;
                               done.begin_object().key(admin::key::event).string(admin::event::loaded).key(admin::key::name).string(name);
                               done.key(admin::key::load_ms).number(ms.count());
                               // What the user asked for but did not get exactly (kept dtypes, numa as cpu).
                               std::string notes;
                               if (auto handle = engine.model(name)) notes = handle->footprint().load_notes;
                               if (!notes.empty()) done.key(admin::key::notes).string(notes);
                               done.end_object();
                               log_info("loaded " + name + " through the admin API" + (notes.empty() ? "" : " (" + notes + ")"));
                             } else {
                               done.begin_object().key(admin::key::event).string(admin::event::error).key(admin::key::message).string(status->message).end_object();
                               log_warn(status->message);
                             }
                             ex->send(done.take() + "\n");
                             ex->finish();
                           });
}

// POST /admin/v1/adapters {"model": BASE, "path": DIR, "name": NAME}: reads the adapter on a background
// thread (the base serves on meanwhile), then answers once: 200 with what was loaded, or the reason.
void load_adapter(const std::shared_ptr<http::Exchange>& ex, Engine& engine, EngineBridge& bridge) {
  simdjson::dom::parser parser;
  simdjson::padded_string text(ex->request().body);
  simdjson::dom::object body;
  std::string_view base, path, name;
  if (parser.parse(text).get(body) || body[admin::key::model].get(base) || body[admin::key::path].get(path))
    return ex->respond(admin_error(400, "the body must be a JSON object with \"model\": BASE, \"path\": DIR and \"name\": NAME",
                                   "invalid_json"));
  if (body[admin::key::name].get(name) || name.empty())
    return ex->respond(admin_error(400, "\"name\" (the adapter's name, which requests give as their model) is required", "missing_name"));
  if (!engine.model(std::string(base)))
    return ex->respond(admin_error(404, "no model named " + std::string(base) + " is loaded; load the base model first", "model_not_found"));
  if (engine.model(std::string(name)))
    return ex->respond(admin_error(409, std::string(name) + " is already a loaded model or adapter; unload it first or pick another name", "name_taken"));
  auto status = std::make_shared<Status>();
  auto started = std::chrono::steady_clock::now();
  bridge.run_in_background(
      [&engine, status, base = std::string(base), path = std::string(path), name = std::string(name)] {
        *status = engine.load_adapter(base, path, name);
      },
      [&engine, ex, status, started, base = std::string(base), name = std::string(name)] {
        if (!status->ok) {
          log_warn(status->message);
          return ex->respond(admin_error(400, status->message, "invalid_adapter"));
        }
        const std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - started;
        JsonWriter w;
        w.begin_object().key(admin::key::loaded_adapter).string(name).key(admin::key::model).string(base);
        w.key(admin::key::load_ms).number(ms.count());
        if (auto handle = engine.model(name))
          for (const ModelHandle::Adapter& a : handle->adapters())
            if (a.name == name) w.key(admin::key::rank).number(int64_t(a.rank)).key(admin::key::targets).string(a.targets);
        w.end_object();
        log_info("loaded adapter " + name + " onto " + base);
        ex->respond(http::Response{200, "application/json", {}, w.take()});
      });
}

http::Response status(const Engine& engine, const DaemonInfo& info) {
  double uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - info.started).count();
  DeviceReport devices = engine.devices();
  JsonWriter w;
  w.begin_object();
  w.key(admin::key::version).string(engine_version());
  w.key(admin::key::pid).number(int64_t(getpid()));
  w.key(admin::key::uptime_seconds).number(uptime);
  w.key(admin::key::listen).string(info.listen_address);
  w.key(admin::key::admin_socket).string(info.admin_socket);
  w.key(admin::key::cuda_built).boolean(engine.cuda_built());
  w.key(admin::key::devices).begin_array();
  for (const DeviceInfo& d : devices.devices) {
    w.begin_object();
    w.key(admin::key::id).string(d.id).key(admin::key::name).string(d.name);
    w.key(admin::key::total_bytes).number(d.total_bytes).key(admin::key::free_bytes).number(d.free_bytes);
    w.end_object();
  }
  w.end_array();
  w.key(admin::key::notes).begin_array();
  for (const std::string& n : devices.notes) w.string(n);
  w.end_array();
  w.key(admin::key::models).begin_array();
  for (const ModelInfo& m : engine.models())
    if (m.parent.empty()) model_json(w, engine, m);  // adapters are listed in their base's "adapters"
  w.end_array();
  w.end_object();
  return http::Response{200, "application/json", {}, w.take()};
}

}  // namespace

void add_admin_routes(http::Router& router, Engine& engine, const DaemonInfo& info, EngineBridge& bridge) {
  router.add("GET", admin::kStatusPath, [&engine, &info](const http::Request&) { return status(engine, info); });
  router.add("GET", admin::kModelsPath, [&engine](const http::Request&) {
    JsonWriter w;
    w.begin_object().key(admin::key::models).begin_array();
    for (const ModelInfo& m : engine.models())
    if (m.parent.empty()) model_json(w, engine, m);  // adapters are listed in their base's "adapters"
    w.end_array().end_object();
    return http::Response{200, "application/json", {}, w.take()};
  });
  router.add_async("POST", admin::kModelsPath, [&engine, &bridge](const auto& ex) { load_model(ex, engine, bridge); });
  router.add_async("POST", admin::kAdaptersPath, [&engine, &bridge](const auto& ex) { load_adapter(ex, engine, bridge); });
  // DELETE /admin/v1/adapters/NAME: new requests for it get 404; running ones finish with it.
  router.add_prefix("DELETE", admin::kAdapterPrefix, [&engine](const http::Request& req) {
    const std::string name(req.path().substr(std::string_view(admin::kAdapterPrefix).size()));
    if (Status s = engine.unload_adapter(name); !s.ok) return admin_error(404, s.message, "adapter_not_found");
    log_info("unloaded adapter " + name);
    JsonWriter w;
    w.begin_object().key(admin::key::unloaded).string(name).end_object();
    return http::Response{200, "application/json", {}, w.take()};
  });
  // POST /admin/v1/models/NAME/rebalance {"threads": N, "device": "cpu"}: placement changed live.
  router.add_prefix("POST", admin::kModelPrefix, [&engine](const http::Request& req) {
    std::string_view rest = req.path().substr(std::string_view(admin::kModelPrefix).size());
    if (!rest.ends_with(admin::kRebalanceSuffix)) return http::not_found(req);
    std::string name(rest.substr(0, rest.size() - std::string_view(admin::kRebalanceSuffix).size()));
    auto handle = engine.model(name);
    if (!handle) return admin_error(404, "no model named " + name + " is loaded", "model_not_found");
    if (!handle->parent().empty())
      return admin_error(400, name + " is a LoRA adapter of " + handle->parent() + "; rebalance " + handle->parent(), "is_adapter");
    simdjson::dom::parser parser;
    simdjson::padded_string text(req.body);
    simdjson::dom::element body;
    if (parser.parse(text).get(body) || body.type() != simdjson::dom::element_type::OBJECT)
      return admin_error(400, "the body must be a JSON object such as {\"threads\": 4}", "invalid_json");
    int64_t threads = 0;
    if (!body[admin::key::threads].get(threads) && (threads < 1 || threads > 1024))
      return admin_error(400, "threads must be from 1 to 1024", "invalid_threads");
    std::string_view device;
    std::string note;  // how the device spec was taken, where that differs from its words
    if (!body[admin::key::device].get(device))
      if (Status s = handle->set_placement(std::string(device), &note); !s.ok) return admin_error(400, s.message, "invalid_device");
    if (threads > 0) handle->set_threads(int(threads));
    log_info("rebalanced " + name + (threads ? " to " + std::to_string(threads) + " threads" : std::string()) +
             (device.empty() ? std::string() : " on " + std::string(device)) + (note.empty() ? "" : " (" + note + ")"));
    JsonWriter w;
    w.begin_object().key(admin::key::rebalanced).string(name).key(admin::key::threads).number(threads ? threads : int64_t(handle->load().threads));
    w.key(admin::key::device).string(device.empty() ? "unchanged" : std::string(device));
    if (!note.empty()) w.key(admin::key::notes).string(note);
    w.end_object();
    return http::Response{200, "application/json", {}, w.take()};
  });
  // DELETE /admin/v1/models/NAME[?force=1]: new requests get 404 at once; running ones finish (they keep
  // the model alive until then), or with force end now with an error.
  router.add_prefix("DELETE", admin::kModelPrefix, [&engine](const http::Request& req) {
    std::string name(req.path().substr(std::string_view(admin::kModelPrefix).size()));
    bool force = req.target.find("force=1") != std::string::npos || req.target.find("force=true") != std::string::npos;
    auto handle = engine.model(name);
    if (!handle) {
      std::string loaded;
      for (const ModelInfo& m : engine.models()) loaded += (loaded.empty() ? "" : ", ") + m.name;
      return admin_error(404, "no model named " + name + " is loaded (loaded: " + (loaded.empty() ? "none" : loaded) + ")", "model_not_found");
    }
    if (!handle->parent().empty())
      return admin_error(400, name + " is a LoRA adapter of " + handle->parent() + "; unload it with ftllmctl unload-adapter " + name,
                         "is_adapter");
    ModelHandle::Load load = handle->load();
    if (force) handle->fail_all("model " + name + " was unloaded (ftllmctl unload --force)");
    Status s = engine.unload(name);
    if (!s.ok) return admin_error(404, s.message, "model_not_found");
    log_info("unloaded " + name + (force ? " (forced)" : ""));
    JsonWriter w;
    w.begin_object().key(admin::key::unloaded).string(name).key(admin::key::forced).boolean(force);
    w.key(admin::key::requests_running).number(uint64_t(load.running + load.waiting)).end_object();
    return http::Response{200, "application/json", {}, w.take()};
  });
}

}  // namespace ftllm::daemon
