// A model's files turned into what serves it: the path resolved (a directory, a .gguf file, or
// "org/name" in the Hugging Face cache), its config, weights bound and converted as the dtype options
// say, its tokenizer and chat template; and the checks that refuse a load before memory runs out.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "../kvcache/kv_cache.h"
#include "../load_options.h"
#include "../model/decoder.h"
#include "../scheduler/request.h"
#include "../text/model_text.h"

namespace ftllm {

// Tokens per KV page.
constexpr int64_t kKvBlockTokens = 16;

struct LoadedModel {
  ModelLoadOptions options;  // as resolved: the name given or derived, the path found in the cache
  std::unique_ptr<model::DecoderModel> model;
  size_t weight_file_bytes = 0;
  std::string notes;  // what the dtype options could not convert, and why
  ModelText text;
  // An embedding model's pooling (sentence-transformers' Pooling and Normalize modules, a GGUF's
  // pooling_type); unset for a model that is not one, with why when it has a pooling this engine lacks.
  std::optional<Pooling> pooling;
  std::string pooling_problem;
};

// Throws EngineError with a reason a person can act on.
LoadedModel load_model(const ModelLoadOptions& options);

// What a load would refuse in `options` before reading the model: the option's key ("dtype", "path", ...)
// and why; nullopt when every value would be taken. A config check names the file, line and key with it.
struct OptionProblem {
  std::string key, reason;
};
std::optional<OptionProblem> check_load_options(const ModelLoadOptions& options);

// The context a model is served with: --ctx, else its own maximum up to ModelLoadOptions::kDefaultContextCap.
int64_t served_context(const ModelLoadOptions& options, const model::ModelConfig& config);

// KV pages for max_sequences sequences at the served context.
int64_t kv_blocks_for(const ModelLoadOptions& options, const model::ModelConfig& config);

// Bytes of memory this process may still take: MemAvailable, capped by its cgroup's limit less its usage
// (systemd's MemoryMax=, a container's memory limit). `root`: "/" (tests pass a tree shaped like it).
uint64_t available_memory(const std::string& root);

// The model's KV pool of `blocks` pages in the --kv_dtype the options give (checked at load).
kvcache::KvPool make_kv_pool(const ModelLoadOptions& options, const model::ModelConfig& config, int64_t blocks);

}  // namespace ftllm
