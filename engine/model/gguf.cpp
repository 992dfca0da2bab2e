#include "gguf.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "../core/error.h"
#include "../quant/ggml_blocks.h"

namespace ftllm::model {

namespace {

constexpr uint64_t kMaxString = 16u << 20;     // a chat template is kilobytes; 16 MiB is plenty
constexpr uint64_t kMaxArray = 64u << 20;      // vocabularies are ~10^5 entries
constexpr uint64_t kMaxCount = 1u << 24;       // tensors or metadata keys
constexpr int kMaxDims = 4;

enum ValueType : uint32_t { U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 };

class Cursor {
 public:
  Cursor(const MappedFile& f) : f_(f) {}
  size_t pos() const { return pos_; }
  uint64_t left() const { return f_.size() - pos_; }

  template <typename T>
  T read() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, f_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string string() {
    uint64_t n = read<uint64_t>();
    if (n > kMaxString) throw error("a string of " + std::to_string(n) + " bytes is implausibly long");
    need(n);
    std::string s(reinterpret_cast<const char*>(f_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  EngineError error(const std::string& why) const {
    return EngineError(f_.path() + ": " + why + " (at byte " + std::to_string(pos_) + "); the file is corrupt");
  }

 private:
  void need(uint64_t n) const {
    if (n > f_.size() - pos_)
      throw EngineError(f_.path() + ": ends at byte " + std::to_string(f_.size()) + " in the middle of its header; "
                        "the file is truncated");
  }
  const MappedFile& f_;
  size_t pos_ = 0;
};

double read_number(Cursor& c, uint32_t type) {
  switch (type) {
    case U8: return c.read<uint8_t>();
    case I8: return c.read<int8_t>();
    case U16: return c.read<uint16_t>();
    case I16: return c.read<int16_t>();
    case U32: return c.read<uint32_t>();
    case I32: return c.read<int32_t>();
    case F32: return c.read<float>();
    case BOOL: return c.read<uint8_t>();
    case U64: return double(c.read<uint64_t>());
    case I64: return double(c.read<int64_t>());
    case F64: return c.read<double>();
  }
  throw c.error("unknown metadata value type " + std::to_string(type));
}

GgufValue read_value(Cursor& c, uint32_t type) {
  switch (type) {
    case U8: return {int64_t(c.read<uint8_t>())};
    case I8: return {int64_t(c.read<int8_t>())};
    case U16: return {int64_t(c.read<uint16_t>())};
    case I16: return {int64_t(c.read<int16_t>())};
    case U32: return {int64_t(c.read<uint32_t>())};
    case I32: return {int64_t(c.read<int32_t>())};
    case U64: return {c.read<uint64_t>()};
    case I64: return {c.read<int64_t>()};
    case F32: return {double(c.read<float>())};
    case F64: return {c.read<double>()};
    case BOOL: return {c.read<uint8_t>() != 0};
    case STRING: return {c.string()};
    case ARRAY: {
      uint32_t item = c.read<uint32_t>();
      uint64_t n = c.read<uint64_t>();
      if (n > kMaxArray) throw c.error("an array of " + std::to_string(n) + " entries is implausibly long");
      // Checked before anything is reserved for it: a lying count must not cost memory. Every entry takes
      // at least a byte, a string its 8-byte length.
      if (n > c.left() / (item == STRING ? 8 : 1))
        throw c.error("an array of " + std::to_string(n) + " entries runs past the end of the file");
      if (item == STRING) {
        std::vector<std::string> out;
        out.reserve(n);
        for (uint64_t i = 0; i < n; ++i) out.push_back(c.string());
        return {std::move(out)};
      }
      if (item == ARRAY) throw c.error("nested arrays are not part of GGUF");
      std::vector<double> out;
      out.reserve(n);
      for (uint64_t i = 0; i < n; ++i) out.push_back(read_number(c, item));
      return {std::move(out)};
    }
  }
  throw c.error("unknown metadata value type " + std::to_string(type));
}

// One file: its metadata into `metadata`, its tensors (data pointing into its mapping) onto `tensors`.
void read_part(const std::string& path, std::map<std::string, GgufValue>& metadata, std::vector<GgufTensor>& tensors) {
  const std::shared_ptr<MappedFile> file = MappedFile::open(path);
  const MappedFile& f = *file;
  Cursor c(f);
  if (f.size() < 4 || std::memcmp(f.data(), "GGUF", 4) != 0)
    throw EngineError(path + " is not a GGUF file (it does not start with \"GGUF\")");
  c.read<uint32_t>();
  uint32_t version = c.read<uint32_t>();
  if (version != 2 && version != 3)
    throw EngineError(path + ": GGUF version " + std::to_string(version) + " is not supported (2 and 3 are)");
  uint64_t n_tensors = c.read<uint64_t>(), n_kv = c.read<uint64_t>();
  if (n_tensors > kMaxCount || n_kv > kMaxCount) throw c.error("implausible tensor or metadata count");

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.string();
    uint32_t type = c.read<uint32_t>();
    metadata[key] = read_value(c, type);
  }

  struct Info {
    GgufTensor t;
    uint64_t offset;
  };
  std::vector<Info> infos;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    Info info;
    info.t.name = c.string();
    uint32_t dims = c.read<uint32_t>();
    if (dims == 0 || dims > kMaxDims) throw c.error("tensor " + info.t.name + " has " + std::to_string(dims) + " dimensions");
    // Bounding the product, not just each dimension, keeps numel() and byte sizes from overflowing.
    const uint64_t kMaxElements = uint64_t(1) << 48;
    uint64_t elements = 1;
    for (uint32_t d = 0; d < dims; ++d) {
      uint64_t n = c.read<uint64_t>();
      if (n == 0 || n > kMaxElements / elements)
        throw c.error("tensor " + info.t.name + " has an implausible shape (over 2^48 elements)");
      elements *= n;
      info.t.ne.push_back(int64_t(n));
    }
    info.t.type = c.read<uint32_t>();
    info.offset = c.read<uint64_t>();
    infos.push_back(std::move(info));
  }

  uint64_t alignment = 32;
  if (auto it = metadata.find("general.alignment"); it != metadata.end()) {
    if (auto* u = std::get_if<uint64_t>(&it->second.v)) alignment = *u;
    else if (auto* v = std::get_if<int64_t>(&it->second.v)) alignment = uint64_t(*v);
  }
  if (alignment == 0 || (alignment & (alignment - 1)) || alignment > (uint64_t(1) << 20))
    throw c.error("general.alignment is not a power of two up to 1 MiB");
  const uint64_t data_start = (c.pos() + alignment - 1) / alignment * alignment;

  for (Info& info : infos) {
    auto type = quant::dtype_of_ggml(info.t.type);
    uint64_t bytes = 0;
    if (type) {
      if (!fits_rows(*type, info.t.ne[0]))
        throw EngineError(path + ": tensor " + info.t.name + " rows are not whole " + quant::ggml_type_name(info.t.type) +
                          " blocks");
      bytes = uint64_t(info.t.numel() / info.t.ne[0]) * row_bytes(*type, info.t.ne[0]);
    }
    // Tensors of types we cannot read are kept (with no data) so that binding names them in its error.
    if (type && (data_start > f.size() || info.offset > f.size() - data_start ||
                 bytes > f.size() - data_start - info.offset))
      throw EngineError(path + ": tensor " + info.t.name + " lies past the end of the file (" +
                        std::to_string(f.size()) + " bytes): the file is truncated");
    if (type) {
      info.t.data = f.data() + data_start + info.offset;
      info.t.bytes = bytes;
    }
    info.t.file = file;
    tensors.push_back(std::move(info.t));
  }
}

int64_t int_value(const std::map<std::string, GgufValue>& metadata, const std::string& key, int64_t otherwise) {
  auto it = metadata.find(key);
  if (it == metadata.end()) return otherwise;
  if (auto* i = std::get_if<int64_t>(&it->second.v)) return *i;
  if (auto* u = std::get_if<uint64_t>(&it->second.v)) return int64_t(*u);
  return otherwise;
}

}  // namespace

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

GgufFile GgufFile::open(const std::string& path) {
  GgufFile g;
  read_part(path, g.metadata_, g.tensors_);
  g.file_ = g.tensors_.empty() ? MappedFile::open(path) : g.tensors_.front().file;
  g.bytes_ = g.file_->size();
  // A split set (llama.cpp's gguf-split: NAME-00001-of-0000N.gguf): the first part holds the metadata and
  // names the rest; every part says which it is; together they hold split.tensors.count tensors.
  const int64_t count = int_value(g.metadata_, "split.count", 1);
  if (count <= 1) return g;
  const int64_t first = int_value(g.metadata_, "split.no", 0);
  static const std::regex kPart(R"((.*)-(\d{5})-of-(\d{5})\.gguf)");
  std::smatch m;
  if (!std::regex_match(path, m, kPart))
    throw EngineError(path + " is part " + std::to_string(first + 1) + " of a split GGUF of " + std::to_string(count) +
                      " parts, but its name is not NAME-0000K-of-0000N.gguf; give the first part under its gguf-split name");
  auto part_path = [&](int64_t i) {
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, "-%05d-of-%05d.gguf", int(i + 1), int(count));
    return m[1].str() + suffix;
  };
  if (first != 0)
    throw EngineError(path + " is part " + std::to_string(first + 1) + " of " + std::to_string(count) + " of a split GGUF; give the first, " +
                      part_path(0));
  for (int64_t i = 1; i < count; ++i) {
    const std::string p = part_path(i);
    if (!std::filesystem::exists(p))
      throw EngineError(path + " is split into " + std::to_string(count) + " parts and part " + std::to_string(i + 1) + ", " + p +
                        ", is missing; put every part in the same directory");
    std::map<std::string, GgufValue> meta;
    read_part(p, meta, g.tensors_);
    if (int_value(meta, "split.count", 0) != count || int_value(meta, "split.no", -1) != i)
      throw EngineError(p + " does not say it is part " + std::to_string(i + 1) + " of " + std::to_string(count) +
                        " (split.no, split.count): it belongs to another model or split");
    g.bytes_ += std::filesystem::file_size(p);
  }
  const int64_t want = int_value(g.metadata_, "split.tensors.count", -1);
  if (want >= 0 && int64_t(g.tensors_.size()) != want)
    throw EngineError(path + ": its " + std::to_string(count) + " parts hold " + std::to_string(g.tensors_.size()) +
                      " tensors, and the first says " + std::to_string(want) + ": the parts come from different models or splits");
  std::set<std::string> names;
  for (const GgufTensor& t : g.tensors_)
    if (!names.insert(t.name).second)
      throw EngineError(path + ": tensor " + t.name + " is in two parts: the parts come from different models or splits");
  return g;
}

const GgufTensor* GgufFile::tensor(const std::string& name) const {
  for (const GgufTensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) return std::nullopt;
  if (auto* i = std::get_if<int64_t>(&it->second.v)) return *i;
  if (auto* u = std::get_if<uint64_t>(&it->second.v)) return int64_t(*u);
  return std::nullopt;
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) return std::nullopt;
  if (auto* d = std::get_if<double>(&it->second.v)) return *d;
  if (auto i = get_int(key)) return double(*i);
  return std::nullopt;
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) return std::nullopt;
  if (auto* b = std::get_if<bool>(&it->second.v)) return *b;
  if (auto i = get_int(key)) return *i != 0;
  return std::nullopt;
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) return std::nullopt;
  if (auto* s = std::get_if<std::string>(&it->second.v)) return *s;
  return std::nullopt;
}

const std::vector<std::string>* GgufFile::get_strings(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) return nullptr;
  return std::get_if<std::vector<std::string>>(&it->second.v);
}

const std::vector<double>* GgufFile::get_numbers(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) return nullptr;
  return std::get_if<std::vector<double>>(&it->second.v);
}

void write_gguf_metadata(const std::string& path, const std::vector<std::pair<std::string, const GgufValue*>>& keys) {
  std::string out;
  auto put = [&](const auto& v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  auto put_string = [&](const std::string& s) {
    put(uint64_t(s.size()));
    out += s;
  };
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
  std::ofstream f(path, std::ios::binary);
  f << out;
  if (!f) throw EngineError("cannot write " + path);
}

}  // namespace ftllm::model
