#include "model_instance.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "cpu/kernels.h"
#include "model/architecture.h"
#include "model/gguf_model.h"

namespace ftllm {

namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw EngineError("cannot read " + p.string());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int64_t context_of(const ModelLoadOptions& o, const model::ModelConfig& c) {
  return o.context_length > 0 ? o.context_length : std::min<int64_t>(c.max_position_embeddings, 8192);
}

}  // namespace

std::unique_ptr<ModelInstance> ModelInstance::load(const ModelLoadOptions& options) {
  fs::path dir(options.path);
  if (dir.extension() == ".gguf" && fs::is_regular_file(dir)) {
    model::GgufModel g = model::load_gguf_model(options.path);
    const model::Architecture& arch = model::find_architecture(g.config.architecture);
    auto decoder = std::make_unique<model::DecoderModel>(g.config, arch.spec(g.config), g.weights);
    ModelLoadOptions o = options;
    if (o.name.empty()) o.name = dir.stem().string();
    return std::unique_ptr<ModelInstance>(new ModelInstance(o, std::move(decoder), fs::file_size(dir)));
  }
  if (!fs::is_directory(dir))
    throw EngineError(options.path + " is not a model directory (expected config.json and *.safetensors)");
  if (!fs::exists(dir / "config.json")) throw EngineError(options.path + " has no config.json");
  model::ModelConfig config = model::parse_model_config(read_file(dir / "config.json"), (dir / "config.json").string());
  if (fs::exists(dir / "generation_config.json"))
    model::merge_generation_config(config, read_file(dir / "generation_config.json"),
                                   (dir / "generation_config.json").string());
  const model::Architecture& arch = model::find_architecture(config.architecture);
  model::DecoderSpec spec = arch.spec(config);
  model::WeightStore weights = model::WeightStore::open_directory(options.path);
  auto decoder = std::make_unique<model::DecoderModel>(config, spec, weights);

  ModelLoadOptions o = options;
  if (o.name.empty()) o.name = fs::absolute(dir).lexically_normal().filename().string();
  if (o.name.empty()) o.name = fs::absolute(dir).lexically_normal().parent_path().filename().string();
  return std::unique_ptr<ModelInstance>(new ModelInstance(o, std::move(decoder), weights.file_bytes()));
}

ModelInstance::ModelInstance(ModelLoadOptions options, std::unique_ptr<model::DecoderModel> model, size_t weight_bytes)
    : options_(std::move(options)),
      model_(std::move(model)),
      weight_file_bytes_(weight_bytes),
      pool_(options_.threads),
      kv_(model_->config().num_layers, model_->config().num_kv_heads, model_->config().head_dim,
          kKvBlockTokens,
          options_.max_sequences * ((context_of(options_, model_->config()) + kKvBlockTokens - 1) /
                                    kKvBlockTokens)),
      scheduler_({2048, options_.max_sequences}) {}

std::vector<GenerationResult> ModelInstance::generate(std::vector<GenerationRequest> requests) {
  std::lock_guard lock(run_mu_);
  const model::ModelConfig& c = config();
  const int64_t context = context_of(options_, c);
  std::map<uint64_t, size_t> order;  // scheduler id -> request index
  std::map<uint64_t, kvcache::SequenceKv> caches;
  std::vector<GenerationResult> results(requests.size());
  auto invalid = [&](const GenerationRequest& r) -> std::string {
    for (int32_t t : r.prompt)
      if (t < 0 || t >= c.vocab_size) return "token id " + std::to_string(t) + " is outside the vocabulary";
    if (int64_t(r.prompt.size()) >= context)
      return "the prompt has " + std::to_string(r.prompt.size()) + " tokens; this model is loaded with a context of " +
             std::to_string(context);
    return {};
  };
  for (size_t i = 0; i < requests.size(); ++i) {
    if (std::string why = invalid(requests[i]); !why.empty()) {
      results[i] = {{}, FinishReason::Error, why};
      continue;
    }
    // No sequence may outgrow its context: the cache was sized for it.
    requests[i].max_tokens =
        int32_t(std::min<int64_t>(requests[i].max_tokens, context - int64_t(requests[i].prompt.size())));
    order[scheduler_.add(std::move(requests[i]), c.eos_token_ids)] = i;
  }

  ops::Context ctx{pool_, cpu::best_kernels()};
  auto collect = [&] {
    for (scheduler::Finished& f : scheduler_.take_finished()) {
      results[order.at(f.seq_id)] = std::move(f.result);
      caches[f.seq_id].release(kv_);
      caches.erase(f.seq_id);
    }
  };
  collect();
  while (!scheduler_.idle()) {
    scheduler::StepPlan plan = scheduler_.plan();
    model::Batch batch;
    std::vector<kvcache::SequenceKv*> seqs;
    std::vector<uint64_t> failed;
    for (const scheduler::StepItem& item : plan.items) {
      kvcache::SequenceKv& kv = caches[item.seq_id];
      if (!kv.reserve(kv_, item.start_pos + int64_t(item.tokens.size()))) {
        failed.push_back(item.seq_id);
        continue;
      }
      const int32_t s = int32_t(seqs.size());
      seqs.push_back(&kv);
      for (size_t j = 0; j < item.tokens.size(); ++j) {
        batch.tokens.push_back(item.tokens[j]);
        batch.positions.push_back(item.start_pos + int64_t(j));
        batch.seq.push_back(s);
      }
      batch.logit_rows.push_back(int64_t(batch.tokens.size()) - 1);
    }
    for (uint64_t id : failed) scheduler_.fail(id, "the KV cache is full; retry when other requests finish");
    std::erase_if(plan.items, [&](const scheduler::StepItem& it) {
      return std::find(failed.begin(), failed.end(), it.seq_id) != failed.end();
    });
    if (!batch.tokens.empty()) {
      Tensor logits = model_->forward(ctx, batch, kv_, seqs);
      std::vector<float*> rows;
      for (size_t r = 0; r < plan.items.size(); ++r) rows.push_back(logits.as<float>() + int64_t(r) * c.vocab_size);
      scheduler_.commit(plan, rows, c.vocab_size);
    }
    collect();
  }
  return results;
}

std::vector<std::vector<float>> ModelInstance::prompt_logits(const std::vector<int32_t>& tokens,
                                                             const std::vector<int64_t>& positions_wanted) {
  std::lock_guard lock(run_mu_);
  const model::ModelConfig& c = config();
  for (int32_t t : tokens)
    if (t < 0 || t >= c.vocab_size) throw EngineError("token id " + std::to_string(t) + " is outside the vocabulary");
  kvcache::SequenceKv kv;
  if (!kv.reserve(kv_, int64_t(tokens.size()))) throw EngineError("the prompt does not fit in the KV cache");
  model::Batch batch;
  batch.tokens = tokens;
  for (size_t i = 0; i < tokens.size(); ++i) {
    batch.positions.push_back(int64_t(i));
    batch.seq.push_back(0);
  }
  batch.logit_rows = positions_wanted;
  ops::Context ctx{pool_, cpu::best_kernels()};
  Tensor logits = model_->forward(ctx, batch, kv_, {&kv});
  kv.release(kv_);
  std::vector<std::vector<float>> out;
  for (size_t r = 0; r < positions_wanted.size(); ++r) {
    const float* row = logits.as<float>() + int64_t(r) * c.vocab_size;
    out.emplace_back(row, row + c.vocab_size);
  }
  return out;
}

std::vector<float> ModelInstance::decode_logits(const std::vector<int32_t>& tokens, size_t prefill) {
  std::lock_guard lock(run_mu_);
  const model::ModelConfig& c = config();
  kvcache::SequenceKv kv;
  if (tokens.empty() || prefill == 0 || prefill > tokens.size() || !kv.reserve(kv_, int64_t(tokens.size())))
    throw EngineError("decode_logits: need 1 <= prefill <= tokens, and room in the KV cache");
  ops::Context ctx{pool_, cpu::best_kernels()};
  Tensor logits;
  size_t done = 0;
  while (done < tokens.size()) {
    size_t n = done == 0 ? prefill : 1;
    model::Batch batch;
    for (size_t i = done; i < done + n; ++i) {
      batch.tokens.push_back(tokens[i]);
      batch.positions.push_back(int64_t(i));
      batch.seq.push_back(0);
    }
    batch.logit_rows = {int64_t(n) - 1};
    logits = model_->forward(ctx, batch, kv_, {&kv});
    done += n;
  }
  kv.release(kv_);
  return std::vector<float>(logits.as<float>(), logits.as<float>() + c.vocab_size);
}

}  // namespace ftllm
