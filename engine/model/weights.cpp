#include "weights.h"

#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <thread>
#include <set>

#include "../core/mapped_file.h"
#include "../core/error.h"
#include "../quant/quant.h"

namespace ftllm::model {

namespace fs = std::filesystem;

namespace {

// The shard file names listed in model.safetensors.index.json's weight_map.
std::set<std::string> shards_of_index(const fs::path& index) {
  simdjson::dom::parser parser;
  simdjson::padded_string text(read_text_file(index));
  simdjson::dom::object weight_map;
  if (parser.parse(text)["weight_map"].get(weight_map))
    throw EngineError(index.string() + ": no \"weight_map\" object; the index is corrupt");
  std::set<std::string> files;
  for (auto [name, file] : weight_map) {
    std::string_view f;
    if (file.get(f)) throw EngineError(index.string() + ": weight_map entry " + std::string(name) + " is not a file name");
    if (f.find('/') != std::string_view::npos) throw EngineError(index.string() + ": shard name " + std::string(f) + " leaves the directory");
    files.emplace(f);
  }
  return files;
}

}  // namespace

WeightStore WeightStore::open_directory(const std::string& dir) {
  fs::path root(dir);
  std::set<std::string> files;
  if (fs::exists(root / "model.safetensors.index.json")) {
    files = shards_of_index(root / "model.safetensors.index.json");
  } else if (fs::exists(root / "model.safetensors")) {
    files.insert("model.safetensors");
  } else {
    for (auto& e : fs::directory_iterator(root))
      if (e.path().extension() == ".safetensors") files.insert(e.path().filename().string());
  }
  if (files.empty()) throw EngineError(dir + " holds no *.safetensors weights");

  WeightStore store;
  for (const std::string& f : files) {
    fs::path p = root / f;
    if (!fs::exists(p)) throw EngineError("shard " + p.string() + " named in the index is missing");
    store.file_bytes_ += fs::file_size(p);
    for (auto& [name, t] : read_safetensors(p.string())) store.tensors_[name] = std::move(t);
  }
  // A base model's checkpoint (transformers' AutoModel, as sentence-transformers saves Qwen3-Embedding):
  // the decoder's tensors without the "model." prefix, and no LM head.
  if (store.has("embed_tokens.weight") && !store.has("model.embed_tokens.weight")) {
    std::map<std::string, StoredTensor> prefixed;
    for (auto& [name, t] : store.tensors_) {
      const std::string full = name.starts_with("lm_head.") ? name : "model." + name;
      t.name = full;
      prefixed[full] = std::move(t);
    }
    store.tensors_ = std::move(prefixed);
  }
  return store;
}

const StoredTensor& WeightStore::get(const std::string& name, const std::vector<int64_t>& shape) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    throw EngineError("missing tensor " + name + " (expected shape " + shape_string(shape) + ")");
  const StoredTensor& t = it->second;
  if (t.shape != shape)
    throw EngineError("tensor " + name + " has shape " + shape_string(t.shape) + ", expected " + shape_string(shape));
  if (!t.dtype)
    throw EngineError("tensor " + name + " has dtype " + t.dtype_name + "; supported are F32, F16 and BF16");
  return t;
}

void WeightStore::set_dtype_rules(DTypeRules rules, int threads) {
  rules_ = std::move(rules);
  threads_ = std::max(1, threads);
}

std::string WeightStore::conversion_notes() const {
  std::string out;
  for (auto& [why, n] : kept_) out += (out.empty() ? "" : "; ") + std::to_string(n) + " tensors kept: " + why;
  return out;
}

namespace {

// rows x k values of `from` re-encoded as `to`, row by row through float32, spread over threads.
Tensor convert_rows(const void* src, DType from, std::vector<int64_t> shape, DType to, int threads) {
  const int64_t rows = shape[0], k = shape[1];
  Tensor t = Tensor::resident_zeros(to, std::move(shape));
  const size_t in_row = row_bytes(from, k), out_row = row_bytes(to, k);
  auto work = [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t r = r0; r < r1; ++r) {
      quant::dequantize_row(from, static_cast<const uint8_t*>(src) + size_t(r) * in_row, row.data(), k);
      quant::quantize_row(to, row.data(), k, t.as<uint8_t>() + size_t(r) * out_row);
    }
  };
  const int n = int(std::min<int64_t>(threads, std::max<int64_t>(1, rows / 64)));
  std::vector<std::thread> pool;
  for (int i = 1; i < n; ++i) pool.emplace_back(work, rows * i / n, rows * (i + 1) / n);
  work(0, rows / n);
  for (std::thread& th : pool) th.join();
  return t;
}

float scale_value(const StoredTensor& s, size_t i) {
  if (s.dtype_name == "F32") return static_cast<const float*>(s.data)[i];
  if (s.dtype_name == "BF16") return bf16_to_f32(static_cast<const uint16_t*>(s.data)[i]);
  return f16_to_f32(static_cast<const uint16_t*>(s.data)[i]);
}

}  // namespace

Tensor WeightStore::stored_matrix(const std::string& name, const std::vector<int64_t>& shape) const {
  auto it = tensors_.find(name);
  const std::string prefix = name.size() > 6 ? name.substr(0, name.size() - 6) : name;  // without "weight"
  if (it == tensors_.end() && has(prefix + "qweight")) return from_awq(prefix, shape);
  if (it != tensors_.end() && it->second.dtype_name == "F8_E4M3") return from_fp8_blocks(it->second, shape);
  const StoredTensor& s = get(name, shape);
  Tensor t;
  t.dtype = *s.dtype;
  t.shape = shape;
  t.data = const_cast<void*>(s.data);  // mapped read-only; kernels never write weights
  t.owner = s.owner;
  return t;
}

// DeepSeek V3 / Qwen3-FP8 style: e4m3 weights [N, K] and float scales per 128 x 128 block, which our
// fp8 rows (one scale per 128 values of a row) hold exactly.
Tensor WeightStore::from_fp8_blocks(const StoredTensor& w, const std::vector<int64_t>& shape) const {
  if (w.shape != shape)
    throw EngineError("tensor " + w.name + " has shape " + shape_string(w.shape) + ", expected " + shape_string(shape));
  const int64_t rows = shape[0], k = shape[1];
  auto it = tensors_.find(w.name + "_scale_inv");
  if (it == tensors_.end())
    throw EngineError("tensor " + w.name + " is float8 without " + w.name + "_scale_inv; only block-scaled FP8 checkpoints "
                      "(weight_block_size [128, 128]) are supported");
  const StoredTensor& scales = it->second;
  const std::vector<int64_t> want{(rows + 127) / 128, (k + 127) / 128};
  if (scales.shape != want || (scales.dtype_name != "F32" && scales.dtype_name != "BF16" && scales.dtype_name != "F16"))
    throw EngineError("tensor " + scales.name + " has shape " + shape_string(scales.shape) + " " + scales.dtype_name +
                      ", expected " + shape_string(want) + " floats (128 x 128 blocks)");
  if (k % 128 != 0) throw EngineError("tensor " + w.name + " rows of " + std::to_string(k) + " are not whole 128-value blocks");
  Tensor t = Tensor::resident_zeros(DType::FP8, shape);
  const size_t out_row = row_bytes(DType::FP8, k);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < k / 128; ++b) {
      uint8_t* out = t.as<uint8_t>() + size_t(r) * out_row + size_t(b) * 132;
      const float scale = scale_value(scales, size_t((r / 128) * want[1] + b));
      std::memcpy(out, &scale, 4);
      std::memcpy(out + 4, static_cast<const uint8_t*>(w.data) + size_t(r * k + b * 128), 128);
    }
  return t;
}

// AutoAWQ's GEMM layout: qweight int32 [K, N / 8] and qzeros int32 [K / G, N / 8], eight 4-bit values per
// int32 in the column order 0 2 4 6 1 3 5 7; scales float16 [K / G, N]. w[n][k] = (q - zero) * scale,
// which int4g of group G holds as scale and min = -zero * scale (the min rounded to float16).
Tensor WeightStore::from_awq(const std::string& prefix, const std::vector<int64_t>& shape) const {
  const int64_t n_out = shape[0], k = shape[1];
  auto found = tensors_.find(prefix + "scales");
  if (found == tensors_.end() || found->second.shape.size() != 2 || found->second.shape[1] != n_out)
    throw EngineError("AWQ tensor " + prefix + "scales is missing or not [groups, " + std::to_string(n_out) + "]");
  const StoredTensor& scales = found->second;
  const int64_t groups = scales.shape[0], g = groups ? k / groups : 0;
  DType type;
  switch (g) {
    case 32: type = DType::I4G32; break;
    case 64: type = DType::I4G64; break;
    case 128: type = DType::I4G128; break;
    case 256: type = DType::I4G256; break;
    default:
      throw EngineError("AWQ tensor " + prefix + "qweight has group size " + std::to_string(g) + "; 32, 64, 128 and 256 are supported");
  }
  auto packed = [&](const std::string& name, int64_t rows) -> const int32_t* {
    auto it = tensors_.find(name);
    const std::vector<int64_t> want{rows, n_out / 8};
    if (it == tensors_.end() || it->second.shape != want || it->second.dtype_name != "I32")
      throw EngineError("AWQ tensor " + name + " is missing or not I32 " + shape_string(want));
    return static_cast<const int32_t*>(it->second.data);
  };
  const int32_t* qweight = packed(prefix + "qweight", k);
  const int32_t* qzeros = packed(prefix + "qzeros", groups);
  if (scales.dtype_name != "F16") throw EngineError("AWQ tensor " + prefix + "scales must be F16, not " + scales.dtype_name);
  const auto* scale_bits = static_cast<const uint16_t*>(scales.data);
  static constexpr int kShift[8] = {0, 16, 4, 20, 8, 24, 12, 28};  // column c of 8 sits at bit kShift[c]
  auto nibble_at = [&](const int32_t* m, int64_t row, int64_t col) {
    return int((uint32_t(m[row * (n_out / 8) + col / 8]) >> kShift[col % 8]) & 0xF);
  };
  Tensor t = Tensor::resident_zeros(type, shape);
  const size_t out_row = row_bytes(type, k), block = dtype_layout(type).block_bytes;
  for (int64_t n = 0; n < n_out; ++n)
    for (int64_t gi = 0; gi < groups; ++gi) {
      uint8_t* out = t.as<uint8_t>() + size_t(n) * out_row + size_t(gi) * block;
      const uint16_t scale = scale_bits[gi * n_out + n];
      const uint16_t h[2] = {scale, f32_to_f16(-float(nibble_at(qzeros, gi, n)) * f16_to_f32(scale))};
      std::memcpy(out, h, 4);
      for (int64_t j = 0; j < g; ++j) {
        const int q = nibble_at(qweight, gi * g + j, n);
        out[4 + (j / 32) * 16 + (j % 32) % 16] |= uint8_t((j % 32) < 16 ? q : q << 4);
      }
    }
  return t;
}

Tensor WeightStore::matrix(const std::string& name, const std::vector<int64_t>& shape, const std::string& rule_name) const {
  return converted(stored_matrix(name, shape), rule_name.empty() ? name : rule_name);
}

Tensor WeightStore::matrix_rows(const std::string& name, const std::vector<int64_t>& stored_shape, int64_t first_row,
                                int64_t rows, const std::string& rule_name) const {
  const StoredTensor& s = get(name, stored_shape);
  const int64_t cols = stored_shape.back();
  Tensor t;
  t.dtype = *s.dtype;
  t.shape = {rows, cols};
  t.data = const_cast<char*>(static_cast<const char*>(s.data)) + size_t(first_row) * row_bytes(t.dtype, cols);
  t.owner = s.owner;
  return converted(std::move(t), rule_name);
}

Tensor WeightStore::converted(Tensor t, const std::string& rule_name) const {
  const std::optional<DType> to = rules_.target(rule_name);
  if (!to || *to == t.dtype) return t;
  if (!fits_rows(*to, t.shape[1])) {
    kept_["rows of " + std::to_string(t.shape[1]) + " values are not whole " + std::string(dtype_name(*to)) + " blocks"]++;
    return t;
  }
  return convert_rows(t.data, t.dtype, t.shape, *to, threads_);
}

Tensor WeightStore::vector_f32(const std::string& name, int64_t n) const { return floats(name, {n}); }

Tensor WeightStore::floats(const std::string& name, const std::vector<int64_t>& shape) const {
  const StoredTensor& s = get(name, shape);
  Tensor t = Tensor::zeros_f32(shape);
  quant::dequantize_row(*s.dtype, s.data, t.as<float>(), t.numel());  // once, at load: the reference conversion
  return t;
}

}  // namespace ftllm::model
