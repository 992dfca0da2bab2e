// The admin API on the wire: its paths and JSON keys, written by ftllmd (admin_routes.cpp) and read by
// ftllmctl, so the two cannot drift apart. A model load's own keys are the load option table's
// (engine/load_options.h). Std-only.
#pragma once

namespace ftllm::admin {

// GET: the daemon, devices and models. GET /models: the models; POST /models: a load (its body the load
// options, its answer newline-delimited events); POST /models/NAME/rebalance; DELETE /models/NAME[?force=1].
inline constexpr const char* kStatusPath = "/admin/v1/status";
inline constexpr const char* kModelsPath = "/admin/v1/models";
inline constexpr const char* kModelPrefix = "/admin/v1/models/";
inline constexpr const char* kRebalanceSuffix = "/rebalance";
// LoRA adapters: POST /adapters {"model": BASE, "path": DIR, "name": NAME} loads one onto a resident model;
// DELETE /adapters/NAME unloads it. Each model in status and list carries its "adapters".
inline constexpr const char* kAdaptersPath = "/admin/v1/adapters";
inline constexpr const char* kAdapterPrefix = "/admin/v1/adapters/";

namespace key {
// status
inline constexpr const char* version = "version";
inline constexpr const char* pid = "pid";
inline constexpr const char* uptime_seconds = "uptime_seconds";
inline constexpr const char* listen = "listen";
inline constexpr const char* admin_socket = "admin_socket";
inline constexpr const char* cuda_built = "cuda_built";
inline constexpr const char* devices = "devices";
inline constexpr const char* id = "id";
inline constexpr const char* total_bytes = "total_bytes";
inline constexpr const char* free_bytes = "free_bytes";
inline constexpr const char* notes = "notes";
inline constexpr const char* models = "models";
// a model in status and list
inline constexpr const char* name = "name";
inline constexpr const char* source = "source";
inline constexpr const char* architecture = "architecture";
inline constexpr const char* layer_kinds = "layer_kinds";  // "26 layers: 22 sliding/512, 4 global"
inline constexpr const char* requests_running = "requests_running";
inline constexpr const char* requests_waiting = "requests_waiting";
inline constexpr const char* kv_blocks_used = "kv_blocks_used";
inline constexpr const char* kv_blocks_total = "kv_blocks_total";
inline constexpr const char* kv_blocks_cached = "kv_blocks_cached";  // kept for reuse; idle ones give way
inline constexpr const char* prefix_cache = "prefix_cache";          // "on" or "off"
inline constexpr const char* prefix_cache_queries = "prefix_cache_queries";  // prompt tokens looked up
inline constexpr const char* prefix_cache_hits = "prefix_cache_hits";        // and found
inline constexpr const char* preemptions = "preemptions";
inline constexpr const char* context_length = "context_length";
inline constexpr const char* threads = "threads";
inline constexpr const char* threads_active = "threads_active";
inline constexpr const char* kernels = "kernels";
inline constexpr const char* tokens_per_second = "tokens_per_second";
inline constexpr const char* parameters = "parameters";
inline constexpr const char* dtypes = "dtypes";
inline constexpr const char* kv_dtype = "kv_dtype";
inline constexpr const char* placement = "placement";  // [{"device": ..., "layers": "0-14"}]
inline constexpr const char* device = "device";
inline constexpr const char* layers = "layers";
inline constexpr const char* memory = "memory";  // {"cpu": {"weight_bytes": ..., "kv_bytes": ...}}
inline constexpr const char* weight_bytes = "weight_bytes";
inline constexpr const char* kv_bytes = "kv_bytes";
inline constexpr const char* adapters = "adapters";  // [{"name", "path", "rank", "targets", "bytes"}]
inline constexpr const char* path = "path";
inline constexpr const char* rank = "rank";
inline constexpr const char* targets = "targets";  // "q_proj, v_proj"
inline constexpr const char* bytes = "bytes";
inline constexpr const char* max_loras = "max_loras";
inline constexpr const char* running_adapters = "running_adapters";  // names with running requests
inline constexpr const char* waiting_adapters = "waiting_adapters";
// a load: the body's model path, then events {"event": loading|progress|loaded|error, ...}
inline constexpr const char* model = "model";
inline constexpr const char* event = "event";
inline constexpr const char* phase = "phase";
inline constexpr const char* bytes_done = "bytes_done";
inline constexpr const char* bytes_total = "bytes_total";
inline constexpr const char* load_ms = "load_ms";
inline constexpr const char* message = "message";
// rebalance and unload answers
inline constexpr const char* rebalanced = "rebalanced";
inline constexpr const char* unloaded = "unloaded";
inline constexpr const char* loaded_adapter = "loaded_adapter";  // a load-adapter's answer, with model
inline constexpr const char* forced = "forced";
}  // namespace key

namespace event {
inline constexpr const char* loading = "loading";
inline constexpr const char* progress = "progress";
inline constexpr const char* loaded = "loaded";
inline constexpr const char* error = "error";
}  // namespace event

}  // namespace ftllm::admin
