#include "safetensors.h"

#include <simdjson.h>

#include <cstring>
#include <fstream>

#include "../core/error.h"
#include "../core/json_writer.h"
#include "../core/tensor.h"

namespace ftllm::model {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit

std::optional<DType> file_dtype(std::string_view s) {
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  return std::nullopt;
}

size_t element_size(std::string_view s) {
  if (s == "F64" || s == "I64" || s == "U64") return 8;
  if (s == "F32" || s == "I32" || s == "U32") return 4;
  if (s == "F16" || s == "BF16" || s == "I16" || s == "U16") return 2;
  if (s == "I8" || s == "U8" || s == "BOOL" || s == "F8_E4M3" || s == "F8_E5M2") return 1;
  return 0;
}

}  // namespace

std::map<std::string, StoredTensor> read_safetensors(const std::string& path) {
  auto file = MappedFile::open(path);
  const size_t size = file->size();
  auto fail = [&](const std::string& why) -> EngineError { return EngineError(path + ": " + why); };
  if (size < 8) throw fail("only " + std::to_string(size) + " bytes: too short to be a safetensors file");

  uint64_t header_len = 0;
  std::memcpy(&header_len, file->data(), 8);  // little-endian, as x86 is
  if (header_len > size - 8)
    throw fail("header length " + std::to_string(header_len) + " runs past the end of the file (" +
               std::to_string(size) + " bytes): the file is truncated or not safetensors");
  if (header_len > kMaxHeaderBytes) throw fail("header of " + std::to_string(header_len) + " bytes is implausibly large");

  const unsigned char* data_start = file->data() + 8 + header_len;
  const size_t data_bytes = size - 8 - header_len;

  simdjson::dom::parser parser;
  simdjson::padded_string header(reinterpret_cast<const char*>(file->data() + 8), header_len);
  simdjson::dom::object root;
  if (auto err = parser.parse(header).get(root))
    throw fail(std::string("header is not valid JSON (") + simdjson::error_message(err) + ")");

  // Directories written by `ftllmctl export` name each quantized tensor's dtype in the metadata; the
  // tensor itself is stored as U8 [rows, row bytes].
  std::map<std::string, DType, std::less<>> ftllm_dtypes;
  simdjson::dom::object metadata;
  if (!root["__metadata__"].get(metadata)) {
    std::string_view format;
    if (!metadata["format"].get(format) && format == "ftllm")
      for (auto [key, value] : metadata) {
        std::string_view v;
        if (key == "format" || value.get(v)) continue;
        auto t = ftllm::parse_dtype(v);
        if (!t) throw fail("metadata gives tensor " + std::string(key) + " the unknown dtype " + std::string(v));
        ftllm_dtypes.emplace(std::string(key), *t);
      }
  }

  std::map<std::string, StoredTensor> tensors;
  for (auto [key, value] : root) {
    std::string name(key);
    if (name == "__metadata__") continue;
    simdjson::dom::object entry;
    std::string_view dtype;
    simdjson::dom::array shape, offsets;
    if (value.get(entry) || entry["dtype"].get(dtype) || entry["shape"].get(shape) ||
        entry["data_offsets"].get(offsets) || offsets.size() != 2)
      throw fail("tensor " + name + " lacks dtype, shape or a pair of data_offsets");

    StoredTensor t;
    t.name = name;
    t.dtype_name = dtype;
    t.dtype = file_dtype(dtype);
    uint64_t numel = 1;
    bool overflow = false;
    for (auto d : shape) {
      int64_t dim = 0;
      if (d.get(dim) || dim < 0) throw fail("tensor " + name + " has a shape entry that is not a size");
      t.shape.push_back(dim);
      // A wrapped product could match the offsets by accident (2^32 x 2^32 floats "need" 0 bytes).
      overflow |= __builtin_mul_overflow(numel, uint64_t(dim), &numel);
    }
    if (overflow) throw fail("tensor " + name + " of shape " + shape_string(t.shape) + " is larger than any file");
    uint64_t begin = 0, end = 0;
    if (offsets.at(0).get(begin) || offsets.at(1).get(end))
      throw fail("tensor " + name + " has data_offsets that are not byte positions");
    if (begin > end || end > data_bytes)
      throw fail("tensor " + name + " has data offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                 "] outside the file's " + std::to_string(data_bytes) + " data bytes (truncated file?)");
    size_t esize = element_size(dtype);
    if (esize == 0) throw fail("tensor " + name + " has unknown dtype " + std::string(dtype));
    if ((end - begin) % esize != 0 || numel != (end - begin) / esize)  // division: numel * esize may wrap
      throw fail("tensor " + name + " of shape " + shape_string(t.shape) + " in " + std::string(dtype) + " needs " +
                 std::to_string(numel) + " x " + std::to_string(esize) + " bytes but its offsets span " +
                 std::to_string(end - begin));
    t.data = data_start + begin;
    t.bytes = end - begin;
    t.owner = file;
    if (auto it = ftllm_dtypes.find(name); it != ftllm_dtypes.end()) {
      const DType q = it->second;
      const DTypeLayout l = dtype_layout(q);
      if (dtype != "U8" || t.shape.size() != 2 || size_t(t.shape[1]) < l.row_header ||
          (size_t(t.shape[1]) - l.row_header) % l.block_bytes != 0)
        throw fail("tensor " + name + " is not stored as U8 rows of whole " + std::string(dtype_name(q)) + " blocks");
      t.shape[1] = int64_t((size_t(t.shape[1]) - l.row_header) / l.block_bytes) * l.block_values;
      t.dtype = q;
      t.dtype_name = dtype_name(q);
    }
    tensors.emplace(name, std::move(t));
  }
  return tensors;
}

uint64_t write_safetensors(const std::string& path, const std::vector<std::pair<std::string, const Tensor*>>& tensors) {
  std::string header = "{\"__metadata__\": {\"format\": \"ftllm\"";
  for (auto& [name, t] : tensors)
    if (!is_float(t->dtype)) header += ", " + json_quote(name) + ": " + json_quote(dtype_name(t->dtype));
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
    header += ", " + json_quote(name) + ": {\"dtype\": \"" + dtype + "\", \"shape\": [" + shape + "], \"data_offsets\": [" +
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
  if (!f) throw EngineError("cannot write " + path + " (disk full?)");
  return 8 + n + offset;
}

}  // namespace ftllm::model
