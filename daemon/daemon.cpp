#include "daemon.h"

#include <systemd/sd-daemon.h>
#include <uv.h>

#include <csignal>
#include <cstdio>
#include <mutex>
#include <thread>
#include <filesystem>

#include "../engine/engine.h"
#include "ftllm_version.h"
#include "http/server.h"
#include "log.h"
#include "engine_bridge.h"
#include "runner/loader.h"
#include "openai/routes.h"
#include "admin_routes.h"

namespace ftllm::daemon {

std::optional<ConfigError> check_config_models(const Config& config) {
  for (size_t i = 0; i < config.models.size(); ++i)
    if (std::optional<OptionProblem> p = check_load_options(config.models[i])) {
      const auto& at = config.model_positions[i];
      const auto where = at.count(p->key) ? at.at(p->key) : at.at("path");
      return ConfigError{config.source, where.first, where.second, "model." + p->key + ": " + p->reason};
    }
  return std::nullopt;
}

bool resolve_config(const Options& options, Config& config, std::string& error) {
  std::string path = options.config_path.value_or(FTLLM_DEFAULT_CONFIG);
  if (options.config_path || std::filesystem::exists(path)) {
    ConfigResult r = load_config_file(path);
    if (r.config && !r.error) r.error = check_config_models(*r.config);
    if (r.error) {
      error = r.error->to_string();
      return false;
    }
    config = *r.config;
  }
  error = apply_overrides(options, config);
  return error.empty();
}

namespace {

struct Daemon {
  Options options;
  Config config;
  uv_loop_t loop{};
  Engine engine;
  DaemonInfo info;
  http::Router public_router, admin_router;
  std::unique_ptr<http::Server> public_server, admin_server;
  uv_signal_t sigterm{}, sigint{}, sighup{};
  std::unique_ptr<EngineBridge> bridge;
  std::unique_ptr<ApiContext> api;
  Metrics metrics;
  LoadingModels loading;
  // Models named on the command line load on their own thread while the listeners already answer
  // (/health says "loading"); READY=1 goes out when they are resident.
  std::thread loader;
  uv_async_t loaded{};
  std::mutex loaded_mu;
  bool loaded_closed = false;
  std::string load_error;
  int exit_code = 0;
  std::string where;
  uv_timer_t drain{};
  uv_timer_t watchdog{};
  bool watchdog_started = false;
  uint64_t drain_deadline = 0;
  bool stopping = false;

  // Lets running requests finish (up to shutdown_timeout_seconds), then closes. Meanwhile the API still
  // answers, /health and new generations with 503 (a readiness probe sees the drain before connections
  // are refused); the admin socket takes no new connections.
  void stop(const char* why) {
    if (stopping) return;
    stopping = true;
    log_info(std::string("stopping (") + why + "): finishing " + std::to_string(api->generations.size()) + " running requests");
    sd_notify(0, "STOPPING=1\nSTATUS=stopping: finishing running requests");
    api->draining = true;
    admin_server->stop_accepting();
    drain_deadline = uv_now(&loop) + config.shutdown_timeout_seconds * 1000;
    uv_timer_init(&loop, &drain);
    drain.data = this;
    uv_timer_start(&drain, [](uv_timer_t* t) { static_cast<Daemon*>(t->data)->check_drained(); }, 0, 50);
  }

  void check_drained() {
    if (!api->generations.empty() && uv_now(&loop) < drain_deadline) return;
    if (!api->generations.empty()) log_warn(std::to_string(api->generations.size()) + " requests still running at the shutdown timeout are cut off");
    uv_close(reinterpret_cast<uv_handle_t*>(&drain), nullptr);
    if (watchdog_started) uv_close(reinterpret_cast<uv_handle_t*>(&watchdog), nullptr);
    public_server->close();
    admin_server->close();
    bridge->close();
    for (uv_signal_t* s : {&sigterm, &sigint, &sighup}) uv_close(reinterpret_cast<uv_handle_t*>(s), nullptr);
    std::lock_guard lock(loaded_mu);
    loaded_closed = true;
    uv_close(reinterpret_cast<uv_handle_t*>(&loaded), nullptr);
  }

  void ready() {
    log_info("ftllmd " FTLLM_VERSION " serving the " + where);
    sd_notifyf(0, "READY=1\nSTATUS=serving the %s\nMAINPID=%lu", where.c_str(), (unsigned long)getpid());
  }

  // WatchdogSec= in the unit: ping from the event loop, so a stuck loop gets the daemon restarted.
  void start_watchdog() {
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return;
    uv_timer_init(&loop, &watchdog);
    watchdog_started = true;
    uv_timer_start(&watchdog, [](uv_timer_t*) { sd_notify(0, "WATCHDOG=1"); }, 0, std::max<uint64_t>(1, usec / 2000));
  }

  void load_in_background(std::vector<ModelLoadOptions> models) {
    {
      std::lock_guard lock(loading.mu);
      for (const ModelLoadOptions& m : models) loading.names.push_back(m.name.empty() ? m.path : m.name);
    }
    sd_notify(0, "STATUS=loading models");
    loader = std::thread([this, models = std::move(models)] {
      for (const ModelLoadOptions& m : models) {
        auto t0 = std::chrono::steady_clock::now();
        Status s = engine.load(m);
        {
          std::lock_guard lock(loading.mu);
          std::erase(loading.names, m.name.empty() ? m.path : m.name);
        }
        if (!s.ok) {
          load_error = s.message;
          break;
        }
        std::string computed;
        if (auto handle = engine.model(m.name.empty() ? m.path : m.name)) {
          ModelHandle::Footprint f = handle->footprint();
          computed = " (" + f.dtypes + (f.load_notes.empty() ? "" : "; " + f.load_notes) + ")";
        }
        char took[32];
        std::snprintf(took, sizeof took, "%.1f ms", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        log_info("loaded " + m.path + " in " + took + computed);
      }
      std::lock_guard lock(loaded_mu);
      if (!loaded_closed) uv_async_send(&loaded);
    });
  }

  // On the loop thread once the loader is done.
  void models_loaded() {
    loader.join();
    if (!load_error.empty()) {
      log_error(load_error);
      exit_code = 1;
      return stop("a model given on the command line did not load");
    }
    ready();
  }

  // SIGHUP: re-read what can change without touching listeners or models (API key, log level).
  void reload() {
    Config fresh;
    std::string error;
    if (!resolve_config(options, fresh, error)) {
      log_error("reload refused, keeping the running configuration: " + error);
      return;
    }
    config.api_key = fresh.api_key;
    config.log_level = fresh.log_level;
    set_log_level(config.log_level);
    if (fresh.listen.to_string() != config.listen.to_string() || fresh.admin_socket != config.admin_socket)
      log_warn("listen address and admin socket changes take effect after a restart");
    log_info("configuration reloaded");
  }
};

}  // namespace

int run_daemon(const Options& options, Config config) {
  std::signal(SIGPIPE, SIG_IGN);  // a peer that vanishes is a failed write, not a dead daemon
  set_log_level(config.log_level);

  Daemon d;
  d.options = options;
  d.config = std::move(config);
  uv_loop_init(&d.loop);
  d.info.started = std::chrono::steady_clock::now();
  d.info.admin_socket = d.config.admin_socket;

  // Models named on the command line are resident before the daemon reports ready.
  std::vector<ModelLoadOptions> preload;
  if (std::string why = model_load_options(options, d.config, preload); !why.empty()) {
    log_error(why);
    uv_loop_close(&d.loop);
    return 2;
  }
  d.bridge = std::make_unique<EngineBridge>(&d.loop);
  d.api = std::make_unique<ApiContext>(ApiContext{d.engine, *d.bridge, d.config, d.metrics, d.loading, {}, {}});
  uv_async_init(&d.loop, &d.loaded, [](uv_async_t* a) { static_cast<Daemon*>(a->data)->models_loaded(); });
  d.loaded.data = &d;
  add_openai_routes(d.public_router, *d.api);
  add_admin_routes(d.admin_router, d.engine, d.info, *d.bridge);

  http::ServerLimits limits;
  limits.parse = {d.config.max_header_bytes, d.config.max_body_bytes};
  limits.max_connections = d.config.max_connections;
  limits.idle_timeout_ms = d.config.idle_timeout_seconds * 1000;
  limits.request_timeout_ms = d.config.request_timeout_seconds * 1000;
  http::ServerLimits admin_limits = limits;  // the admin socket serves no browser
  limits.cors.origins = d.config.cors_origins;
  d.public_server = std::make_unique<http::Server>(&d.loop, d.public_router, limits);
  admin_limits.max_connections = 64;
  d.admin_server = std::make_unique<http::Server>(&d.loop, d.admin_router, admin_limits);
  d.public_server->on_response([&d](const http::Request& r, int status) { d.metrics.request(r.path(), status); });

  // Socket activation (ftllmd.socket): systemd passes the listening sockets, named "api" and "admin"
  // (or told apart by kind); whatever it does not pass is opened as configured.
  bool have_api = false, have_admin = false;
  std::string error;
  char** fd_names = nullptr;
  int passed = sd_listen_fds_with_names(1, &fd_names);
  for (int i = 0; i < passed && error.empty(); ++i) {
    int fd = SD_LISTEN_FDS_START + i;
    std::string name = fd_names && fd_names[i] ? fd_names[i] : "";
    bool is_unix = sd_is_socket_unix(fd, SOCK_STREAM, 1, nullptr, 0) > 0;
    if ((name == "admin" || (name != "api" && is_unix)) && !have_admin) {
      error = d.admin_server->adopt(fd, false);
      have_admin = true;
    } else if (!have_api && sd_is_socket_inet(fd, AF_UNSPEC, SOCK_STREAM, 1, 0) > 0) {
      error = d.public_server->adopt(fd, true);
      have_api = true;
    } else {
      log_warn("ignoring socket " + std::to_string(fd) + (name.empty() ? "" : " (" + name + ")") + " passed by systemd");
    }
  }
  if (fd_names) {
    for (int i = 0; i < passed; ++i) free(fd_names[i]);
    free(fd_names);
  }
  if (error.empty() && !have_api) error = d.public_server->listen_tcp(d.config.listen.host, d.config.listen.port);
  if (error.empty() && !have_admin)
    error = d.admin_server->listen_unix(d.config.admin_socket, d.config.admin_socket_mode, d.config.admin_socket_group);
  if (!error.empty()) {
    log_error(error);
    d.public_server->close();
    d.admin_server->close();
    d.bridge->close();
    uv_close(reinterpret_cast<uv_handle_t*>(&d.loaded), nullptr);
    uv_run(&d.loop, UV_RUN_DEFAULT);
    uv_loop_close(&d.loop);
    return 1;
  }
  d.info.listen_address = d.public_server->address();
  d.info.admin_socket = d.admin_server->address();  // the one systemd passed, under socket activation

  auto on_signal = [](uv_signal_t* s, int signum) {
    auto* self = static_cast<Daemon*>(s->data);
    if (signum == SIGHUP)
      self->reload();
    else
      self->stop(signum == SIGTERM ? "SIGTERM" : "SIGINT");
  };
  for (auto [handle, signum] : {std::pair{&d.sigterm, SIGTERM}, {&d.sigint, SIGINT}, {&d.sighup, SIGHUP}}) {
    uv_signal_init(&d.loop, handle);
    handle->data = &d;
    uv_signal_start(handle, on_signal, signum);
  }

  d.where = "OpenAI API on http://" + d.public_server->address() + ", admin API on " + d.admin_server->address();
  d.start_watchdog();
  if (preload.empty()) d.ready();
  else d.load_in_background(std::move(preload));

  uv_run(&d.loop, UV_RUN_DEFAULT);
  if (d.loader.joinable()) d.loader.join();  // stopped while a model was still loading
  int rc = uv_loop_close(&d.loop);
  if (rc != 0) log_warn(std::string("event loop closed with handles left: ") + uv_strerror(rc));
  log_info("stopped");
  return d.exit_code;
}

}  // namespace ftllm::daemon
