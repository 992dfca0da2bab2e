// ftllmctl export: a model loaded (and converted as --dtype says) written back as a directory that
// loads as it is. Quantized tensors are stored as U8 rows with their dtype named in the safetensors
// metadata ("format": "ftllm"), so loading maps them and computes on them without requantizing.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "engine.h"
#include "model/gguf.h"
#include "model_instance.h"

namespace ftllm {

namespace fs = std::filesystem;

namespace {

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string json_number(double v) {
  std::ostringstream o;
  o.precision(17);
  o << v;
  return o.str();
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  if (!f) throw EngineError("cannot write " + path.string());
}

// config.json for the architectures the decoder implements, from what the engine parsed.
std::string config_json(const model::ModelConfig& c) {
  std::string j = "{\n  \"architectures\": [" + json_string(c.architecture) + "],\n";
  auto field = [&](const char* k, const std::string& v) { j += "  " + json_string(k) + ": " + v + ",\n"; };
  field("hidden_size", std::to_string(c.hidden_size));
  field("intermediate_size", std::to_string(c.intermediate_size));
  field("num_hidden_layers", std::to_string(c.num_layers));
  field("num_attention_heads", std::to_string(c.num_heads));
  field("num_key_value_heads", std::to_string(c.num_kv_heads));
  field("head_dim", std::to_string(c.head_dim));
  field("vocab_size", std::to_string(c.vocab_size));
  field("max_position_embeddings", std::to_string(c.max_position_embeddings));
  field("rms_norm_eps", json_number(c.rms_norm_eps));
  field("rope_theta", json_number(c.rope.theta));
  if (c.rope.type == model::RopeType::Linear)
    field("rope_scaling", "{\"rope_type\": \"linear\", \"factor\": " + json_number(c.rope.factor) + "}");
  if (c.rope.type == model::RopeType::Llama3)
    field("rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": " + json_number(c.rope.factor) +
                              ", \"low_freq_factor\": " + json_number(c.rope.low_freq_factor) +
                              ", \"high_freq_factor\": " + json_number(c.rope.high_freq_factor) +
                              ", \"original_max_position_embeddings\": " +
                              std::to_string(c.rope.original_max_position_embeddings) + "}");
  field("attention_bias", c.attention_bias ? "true" : "false");
  field("mlp_bias", c.mlp_bias ? "true" : "false");
  if (c.sliding_window) field("sliding_window", std::to_string(*c.sliding_window));
  if (c.bos_token_id) field("bos_token_id", std::to_string(*c.bos_token_id));
  std::string eos;
  for (int32_t id : c.eos_token_ids) eos += (eos.empty() ? "" : ", ") + std::to_string(id);
  field("eos_token_id", "[" + eos + "]");
  return j + "  \"tie_word_embeddings\": " + (c.tie_word_embeddings ? "true" : "false") + "\n}\n";
}

// model.safetensors: float tensors as themselves, block types as U8 [rows, row bytes].
uint64_t write_safetensors(const fs::path& path, const model::DecoderModel& m) {
  auto tensors = m.named_tensors();
  std::string header = "{\"__metadata__\": {\"format\": \"ftllm\"";
  for (auto& [name, t] : tensors)
    if (!is_float(t->dtype)) header += ", " + json_string(name) + ": " + json_string(dtype_name(t->dtype));
  header += "}";
  uint64_t offset = 0;
  for (auto& [name, t] : tensors) {
    std::string dtype = t->dtype == DType::F32 ? "F32" : t->dtype == DType::F16 ? "F16" : t->dtype == DType::BF16 ? "BF16" : "U8";
    std::string shape;
    if (is_float(t->dtype)) {
      for (int64_t d : t->shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    } else {
      shape = std::to_string(t->numel() / t->dim(-1)) + ", " + std::to_string(row_bytes(t->dtype, t->dim(-1)));
    }
    header += ", " + json_string(name) + ": {\"dtype\": \"" + dtype + "\", \"shape\": [" + shape + "], \"data_offsets\": [" +
              std::to_string(offset) + ", " + std::to_string(offset + t->bytes()) + "]}";
    offset += t->bytes();
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header;
  for (auto& [name, t] : tensors) f.write(static_cast<const char*>(t->data), std::streamsize(t->bytes()));
  if (!f) throw EngineError("cannot write " + path.string() + " (disk full?)");
  return 8 + n + offset;
}

// A GGUF file with no tensors, carrying a GGUF model's tokenizer.* metadata, which the loader reads as
// it reads a GGUF's vocabulary.
void write_tokenizer_gguf(const fs::path& path, const model::GgufFile& g) {
  std::string out;
  auto put = [&](const auto& v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  auto put_string = [&](const std::string& s) {
    put(uint64_t(s.size()));
    out += s;
  };
  enum : uint32_t { U64 = 10, I64 = 11, F64 = 12, BOOL = 7, STRING = 8, ARRAY = 9 };
  std::vector<std::pair<std::string, const model::GgufValue*>> keys;
  for (auto& [key, value] : g.metadata())
    if (key.rfind("tokenizer.", 0) == 0 || key == "general.architecture") keys.emplace_back(key, &value);
  out += "GGUF";
  put(uint32_t(3));
  put(uint64_t(0));
  put(uint64_t(keys.size()));
  for (auto& [key, value] : keys) {
    put_string(key);
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, int64_t>) put(I64), put(v);
          else if constexpr (std::is_same_v<T, uint64_t>) put(U64), put(v);
          else if constexpr (std::is_same_v<T, double>) put(F64), put(v);
          else if constexpr (std::is_same_v<T, bool>) put(BOOL), put(uint8_t(v));
          else if constexpr (std::is_same_v<T, std::string>) put(STRING), put_string(v);
          else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            put(ARRAY), put(STRING), put(uint64_t(v.size()));
            for (const std::string& s : v) put_string(s);
          } else {
            put(ARRAY), put(F64), put(uint64_t(v.size()));
            for (double d : v) put(d);
          }
        },
        value->v);
  }
  write_file(path, out);
}

}  // namespace

Status export_model(const ModelLoadOptions& source, const std::string& out_dir, ExportResult& result) {
  try {
    auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<ModelInstance> m = ModelInstance::load(source);
    auto t1 = std::chrono::steady_clock::now();
    const fs::path dir(out_dir), from(m->options().path);
    fs::create_directories(dir);
    result.bytes = write_safetensors(dir / "model.safetensors", m->model());
    write_file(dir / "config.json", config_json(m->config()));
    if (fs::is_directory(from)) {
      for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                            "generation_config.json", "tokenizer.gguf"})
        if (fs::exists(from / f)) fs::copy_file(from / f, dir / f, fs::copy_options::overwrite_existing);
    } else {
      model::GgufFile g = model::GgufFile::open(from.string());
      write_tokenizer_gguf(dir / "tokenizer.gguf", g);
      if (auto t = g.get_string("tokenizer.chat_template")) write_file(dir / "chat_template.jinja", *t);
    }
    if (!source.chat_template.empty()) fs::copy_file(source.chat_template, dir / "chat_template.jinja", fs::copy_options::overwrite_existing);
    result.load_seconds = std::chrono::duration<double>(t1 - t0).count();
    result.write_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    result.dtypes = m->dtypes();
    result.notes = m->conversion_notes();
    return Status::success();
  } catch (const std::exception& e) {
    return Status::error(e.what());
  }
}

}  // namespace ftllm
