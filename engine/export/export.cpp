// ftllm-export: a model loaded (and converted as --dtype says) written back as a directory that
// loads as it is. Quantized tensors are stored as U8 rows with their dtype named in the safetensors
// metadata ("format": "ftllm"), so loading maps them and computes on them without requantizing.
#include <chrono>
#include <filesystem>
#include <fstream>

#include "../core/error.h"
#include "../engine.h"
#include "../model/gguf.h"
#include "../model/model_config.h"
#include "../model/safetensors.h"
#include "../runner/loader.h"

namespace ftllm {

namespace fs = std::filesystem;

namespace {

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  if (!f) throw EngineError("cannot write " + path.string());
}

}  // namespace

Status export_model(const ModelLoadOptions& source, const std::string& out_dir, ExportResult& result) {
  try {
    auto t0 = std::chrono::steady_clock::now();
    const LoadedModel m = load_model(source);  // weights and text only: no KV cache, no worker
    auto t1 = std::chrono::steady_clock::now();
    const fs::path dir(out_dir), from(m.options.path);
    fs::create_directories(dir);
    result.bytes = model::write_safetensors((dir / "model.safetensors").string(), m.model->named_tensors());
    write_file(dir / "config.json", model::model_config_json(m.model->config()));
    if (fs::is_directory(from)) {
      for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                            "generation_config.json", "tokenizer.gguf"})
        if (fs::exists(from / f)) fs::copy_file(from / f, dir / f, fs::copy_options::overwrite_existing);
    } else {
      model::GgufFile g = model::GgufFile::open(from.string());
      std::vector<std::pair<std::string, const model::GgufValue*>> vocabulary;
      for (auto& [key, value] : g.metadata())
        if (key.rfind("tokenizer.", 0) == 0 || key == "general.architecture") vocabulary.emplace_back(key, &value);
      model::write_gguf_metadata((dir / "tokenizer.gguf").string(), vocabulary);
      if (auto t = g.get_string("tokenizer.chat_template")) write_file(dir / "chat_template.jinja", *t);
    }
    if (!source.chat_template.empty()) fs::copy_file(source.chat_template, dir / "chat_template.jinja", fs::copy_options::overwrite_existing);
    if (m.pooling) {  // an embedding model stays one: its pooling as sentence-transformers' modules
      const bool norm = m.pooling->normalize;
      write_file(dir / "modules.json",
                 std::string(R"([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},)") +
                     R"( {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"})" +
                     (norm ? R"(, {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})" : "") +
                     "]\n");
      fs::create_directories(dir / "1_Pooling");
      const Pooling::Mode mode = m.pooling->mode;
      write_file(dir / "1_Pooling" / "config.json",
                 "{\"word_embedding_dimension\": " + std::to_string(m.model->config().hidden_size) +
                     ", \"pooling_mode_cls_token\": " + (mode == Pooling::Mode::First ? "true" : "false") +
                     ", \"pooling_mode_mean_tokens\": " + (mode == Pooling::Mode::Mean ? "true" : "false") +
                     ", \"pooling_mode_lasttoken\": " + (mode == Pooling::Mode::Last ? "true" : "false") + "}\n");
      if (norm) fs::create_directories(dir / "2_Normalize");
    }
    result.load_seconds = std::chrono::duration<double>(t1 - t0).count();
    result.write_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    result.dtypes = m.model->dtypes();
    result.notes = m.notes;
    return Status::success();
  } catch (const std::exception& e) {
    return Status::error(e.what());
  }
}

}  // namespace ftllm
