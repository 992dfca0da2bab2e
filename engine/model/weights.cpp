#include "weights.h"

#include <simdjson.h>

#include <filesystem>
#include <set>

#include "../core/mapped_file.h"
#include "../cpu/kernels.h"
#include "../core/error.h"

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

Tensor WeightStore::matrix(const std::string& name, const std::vector<int64_t>& shape) const {
  const StoredTensor& s = get(name, shape);
  Tensor t;
  t.dtype = *s.dtype;
  t.shape = shape;
  t.data = const_cast<void*>(s.data);  // mapped read-only; kernels never write weights
  t.owner = s.owner;
  return t;
}

Tensor WeightStore::vector_f32(const std::string& name, int64_t n) const {
  const StoredTensor& s = get(name, {n});
  Tensor t = Tensor::zeros_f32({n});
  cpu::best_kernels().to_f32(*s.dtype, s.data, t.as<float>(), n);
  return t;
}

}  // namespace ftllm::model
